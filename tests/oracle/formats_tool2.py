"""The remaining tool-call formats (beyond the 13 the project started with)."""


from cases_common import WEATHER, tool_cases
from formats_tool import _case, _dsml, _j, _raw, _spec


def _pylit(v):
    if v is True:
        return "True"
    if v is False:
        return "False"
    if v is None:
        return "None"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_pylit(k)}: {_pylit(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_pylit(x) for x in v) + "]"
    return repr(v)


def _pycall(n, a, lit=_pylit):
    return f"{n}(" + ", ".join(f"{k}={lit(v)}" for k, v in a.items()) + ")"


def _xml_kv(calls, open_call, close_call, key, value, name_tpl="{n}"):
    """Calls as NAME + key/value tag pairs (GLM-like families)."""
    out = []
    for n, a in calls:
        pairs = "".join(f"{key[0]}{k}{key[1]}{value[0]}{_raw(v)}{value[1]}" for k, v in a.items())
        out.append(f"{open_call}{name_tpl.format(n=n)}{pairs}{close_call}")
    return out


def seed_oss():
    def render(calls):
        blocks = []
        for n, a in calls:
            params = "".join(f"<parameter={k}>{_raw(v)}</parameter>\n" for k, v in a.items())
            blocks.append(f"<seed:tool_call>\n<function={n}>\n{params}</function>\n</seed:tool_call>")
        return "\n".join(blocks)

    extra = [_case("think_then_call", "<seed:think> block then a call", "<seed:think>plan</seed:think>" + render([WEATHER]))]
    cases = tool_cases(render, "<seed:tool_call>", joiner="\n", malformed="<seed:tool_call>\n<function=get_weather>\n<parameter=city>Paris</function>\n</seed:tool_call>", extra=extra)
    return _spec("seed_oss", {"vllm": ["seed_oss"], "sglang": []},
                 ["<seed:tool_call>", "</seed:tool_call>", "<seed:think>", "</seed:think>", "<seed:bos>", "<seed:eos>"], cases)


def deepseek_v4():
    render = _dsml("tool_calls")
    extra = [
        _case("think_then_call", "<think> block then a call", "<think>plan</think>" + render([WEATHER])),
        _case("json_parameter_body", "arguments as one JSON body inside invoke", f'<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n{_j({"city": "Paris"})}\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>'),
        _case("no_outer_close", "complete invoke, outer close never arrives", '<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n'),
    ]
    cases = tool_cases(render, "<｜DSML｜tool_calls>", joiner="\n", extra=extra,
                       malformed='<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜invoke>\n</｜DSML｜tool_calls>')
    return _spec("deepseek_v4", {"vllm": ["deepseek_v4"], "sglang": ["deepseekv4"]}, ["<think>", "</think>", "<｜end▁of▁sentence｜>"], cases)


def deepseek_v41():
    D = "｜DSML｜ "

    def render(calls):
        inv = []
        for n, a in calls:
            params = "".join(f'<{D}parameter name="{k}" string="{"true" if isinstance(v, str) else "false"}">{_raw(v)}</{D}parameter>\n' for k, v in a.items())
            inv.append(f'<{D}invoke name="{n}">\n{params}</{D}invoke>\n')
        return f"<{D}calls>\n{''.join(inv)}</{D}calls>"

    cases = tool_cases(render, f"<{D}calls>", joiner="\n",
                       malformed=f'<{D}calls>\n<{D}invoke name="get_weather">\n<{D}parameter name="city" string="true">Paris</{D}invoke>\n</{D}calls>')
    return _spec("deepseek_v41", {"vllm": ["deepseek_v41"], "sglang": ["deepseekv41"]}, ["<think>", "</think>", "<｜end▁of▁sentence｜>"], cases,
                 note="V4.1 DSML tags have a space after ｜DSML｜")


def kimi_k3():
    O, S, C = "<|open|>", "<|sep|>", "<|close|>"

    def typ(v):
        return {bool: "boolean", int: "integer", float: "number", dict: "object", list: "array", str: "string"}.get(type(v), "null")

    def render(calls):
        body = ""
        for i, (n, a) in enumerate(calls):
            args = "".join(f'{O}argument key="{k}" type="{typ(v)}"{S}{_raw(v) if v is not None else "null"}{C}argument{S}' for k, v in a.items())
            body += f'{O}call tool="{n}" index="{i}"{S}{args}{C}call{S}'
        return f"{O}tools{S}{body}{C}tools{S}"

    extra = [_case("response_then_tools", "a response channel then tools", f"{O}response{S}Checking.{C}response{S}" + render([WEATHER])),
             _case("response_only", "only a response channel", f"{O}response{S}Hello.{C}response{S}")]
    cases = tool_cases(render, f"{O}tools{S}", extra=extra, malformed=f'{O}tools{S}{O}call tool="get_weather"{S}{O}argument key="city"{S}Paris{C}call{S}{C}tools{S}')
    return _spec("kimi_k3", {"vllm": ["kimi_k3"], "sglang": ["kimi_k3"]}, [O, S, C, "<|im_end|>"], cases)


def k2_horizon():
    def render(calls):
        blocks = "".join(f"<ifm|tool_call>{n}" + "".join(f"<ifm|arg_key>{k}</ifm|arg_key><ifm|arg_value>{_raw(v)}</ifm|arg_value>" for k, v in a.items()) + "</ifm|tool_call>" for n, a in calls)
        return f"<ifm|tool_calls>{blocks}</ifm|tool_calls>"

    typed = "<ifm|tool_calls><ifm|tool_call>set_flags<ifm|arg_key>count</ifm|arg_key><ifm|arg_type>integer</ifm|arg_type><ifm|arg_value>7</ifm|arg_value></ifm|tool_call></ifm|tool_calls>"
    js = f"<ifm|tool_calls><ifm|tool_call>{_j({'name': 'get_weather', 'arguments': {'city': 'Paris'}})}</ifm|tool_call></ifm|tool_calls>"
    extra = [_case("typed_xml", "xml_typed format (chat_template_kwargs tool_call_format)", typed, chat_template_kwargs={"tool_call_format": "xml_typed"}),
             _case("json_format", "json format (chat_template_kwargs tool_call_format)", js, chat_template_kwargs={"tool_call_format": "json"}),
             _case("think_then_call", "<ifm|think> block then a call", "<ifm|think>plan</ifm|think>" + render([WEATHER]))]
    cases = tool_cases(render, "<ifm|tool_calls>", extra=extra, malformed="<ifm|tool_calls><ifm|tool_call>get_weather<ifm|arg_key>city<ifm|arg_value>Paris</ifm|arg_value></ifm|tool_call></ifm|tool_calls>")
    marks = ["<ifm|tool_calls>", "</ifm|tool_calls>", "<ifm|tool_call>", "</ifm|tool_call>", "<ifm|arg_key>", "</ifm|arg_key>", "<ifm|arg_type>", "</ifm|arg_type>", "<ifm|arg_value>", "</ifm|arg_value>", "<ifm|think>", "</ifm|think>"]
    return _spec("k2_horizon", {"vllm": ["k2_horizon"], "sglang": ["k2_horizon"]}, marks, cases)


def minimax_m3():
    M = "]<]minimax[>["

    def elem(k, v):
        if isinstance(v, dict):
            return f"{M}<{k}>\n" + "".join(elem(kk, vv) for kk, vv in v.items()) + f"{M}</{k}>\n"
        if isinstance(v, list):
            return f"{M}<{k}>\n" + "".join(elem("item", x) for x in v) + f"{M}</{k}>\n"
        return f"{M}<{k}>{_raw(v) if v is not None else 'null'}{M}</{k}>\n"

    def render(calls):
        inv = "".join(f'{M}<invoke name="{n}">\n' + "".join(elem(k, v) for k, v in a.items()) + f"{M}</invoke>\n" for n, a in calls)
        return f"{M}<tool_call>\n{inv}{M}</tool_call>"

    extra = [_case("mm_think_then_call", "<mm:think> block then a call", "<mm:think>plan</mm:think>" + render([WEATHER]))]
    cases = tool_cases(render, f"{M}<tool_call>", joiner="\n", extra=extra, malformed=f'{M}<tool_call>\n{M}<invoke name="get_weather">\n{M}<city>Paris\n{M}</invoke>\n{M}</tool_call>')
    return _spec("minimax_m3", {"vllm": ["minimax_m3"], "sglang": ["minimax-m3"]}, ["<mm:think>", "</mm:think>"], cases,
                 note="the ]<]minimax[>[ separator is plain text here")


def pythonic_family(fmt, wrap, parsers, special, lit=_pylit, sep=", ", extra_cases=()):
    def render(calls):
        return wrap(sep.join(_pycall(n, a, lit) for n, a in calls))

    cases = tool_cases(render, wrap("")[:3] or "[", joiner="\n", malformed=wrap("get_weather(city='Paris', unit=)"), extra=list(extra_cases))
    return _spec(fmt, parsers, special, cases)


def _jsonlit(v):
    return _j(v)


def olmo3():
    extra = [_case("python_literals", "Python literals True/None inside", "<function_calls>set_flags(enabled=True, note=None)</function_calls>"),
             _case("single_line_no_wrapper", "a call without the wrapper", "get_weather(city='Paris')")]
    return pythonic_family("olmo3", lambda s: f"<function_calls>{s}</function_calls>", {"vllm": ["olmo3"], "sglang": []},
                           ["<function_calls>", "</function_calls>"], lit=_jsonlit, sep="\n", extra_cases=extra)


def lfm2():
    extra = [_case("content_after", "call then content", "<|tool_call_start|>[get_weather(city='Paris')]<|tool_call_end|>The weather is sunny.")]
    return pythonic_family("lfm2", lambda s: f"<|tool_call_start|>[{s}]<|tool_call_end|>", {"vllm": ["lfm2"], "sglang": ["lfm2"]},
                           ["<|tool_call_start|>", "<|tool_call_end|>", "<|im_end|>"], extra_cases=extra)


def _json_array(fmt, prefix, suffix, parsers, special, item=lambda n, a: {"name": n, "arguments": a}, extra=()):
    def render(calls):
        return prefix + _j([item(n, a) for n, a in calls]) + suffix

    cases = tool_cases(render, prefix.strip() or "[", joiner="\n", malformed=prefix + '[{"name": "get_weather", "arguments": {"city": }]' + suffix, extra=list(extra))
    return _spec(fmt, parsers, special, cases)


def granite():
    extra = [_case("plain_text_marker", "Granite 3.1: <tool_call> as plain text", "<tool_call>" + _j([{"name": "get_weather", "arguments": {"city": "Paris"}}]))]
    return _json_array("granite", "<|tool_call|>", "", {"vllm": ["granite"], "sglang": []}, ["<|tool_call|>"], extra=extra)


def granite_20b_fc():
    def render(calls):
        return " ".join(f"<function_call> {_j({'name': n, 'arguments': a})}" for n, a in calls)

    cases = tool_cases(render, "<function_call>", joiner=" ", malformed='<function_call> {"name": "get_weather", "arguments": {"city": }')
    return _spec("granite-20b-fc", {"vllm": ["granite-20b-fc"], "sglang": []}, ["<function_call>"], cases)


def jamba():
    return _json_array("jamba", "<tool_calls>", "</tool_calls>", {"vllm": ["jamba", "hunyuan_a13b"], "sglang": []}, ["<tool_calls>", "</tool_calls>"])


def phi4_mini_json():
    return _json_array("phi4_mini_json", "functools", "", {"vllm": ["phi4_mini_json"], "sglang": []}, [])


def apertus():
    return _json_array("apertus", "<|tools_prefix|>", "<|tools_suffix|>", {"vllm": ["apertus"], "sglang": ["apertus2509"]},
                       ["<|tools_prefix|>", "<|tools_suffix|>"], item=lambda n, a: {n: a})


def xlam():
    one = [{"name": "get_weather", "arguments": {"city": "Paris"}}]
    extra = [_case("fenced_json", "array in a ```json fence", "```json\n" + _j(one) + "\n```"),
             _case("tool_calls_tag", "[TOOL_CALLS] prefix", "[TOOL_CALLS]" + _j(one)),
             _case("tool_call_tag", "inside <tool_call> tags", "<tool_call>" + _j(one) + "</tool_call>"),
             _case("after_think", "after </think>", "plan</think>" + _j(one))]
    return _json_array("xlam", "", "", {"vllm": ["xlam"], "sglang": []}, ["<tool_call>", "</tool_call>", "</think>", "[TOOL_CALLS]"], extra=extra)


def internlm():
    def render(calls):
        return "".join(f"<|action_start|><|plugin|>\n{_j({'name': n, 'parameters': a})}<|action_end|>" for n, a in calls)

    spaced = _j({"name": "get_weather", "parameters": {"city": "Paris"}})
    extra = [_case("space_between_markers", "'<|action_start|> <|plugin|>' (SGLang's marker spelling)", f"<|action_start|> <|plugin|>\n{spaced}<|action_end|>"),
             _case("space_between_markers_with_text", "prose, then the spaced marker spelling", f"Let me check.<|action_start|> <|plugin|>\n{spaced}<|action_end|>")]
    cases = tool_cases(render, "<|action_start|>", joiner="\n", extra=extra, malformed='<|action_start|><|plugin|>\n{"name": "get_weather", "parameters": {"city": }<|action_end|>')
    return _spec("internlm", {"vllm": ["internlm"], "sglang": ["interns1"]}, ["<|action_start|>", "<|action_end|>", "<|plugin|>", "<|im_end|>"], cases)


def longcat():
    def render(calls):
        return "\n".join(f"<longcat_tool_call>\n{_j({'name': n, 'arguments': a})}\n</longcat_tool_call>" for n, a in calls)

    cases = tool_cases(render, "<longcat_tool_call>", joiner="\n", malformed='<longcat_tool_call>\n{"name": "get_weather", "arguments": {"city": }\n</longcat_tool_call>')
    return _spec("longcat", {"vllm": ["longcat"], "sglang": []}, ["<longcat_tool_call>", "</longcat_tool_call>"], cases)


def gigachat3():
    def render(calls):
        return "".join(f"function call<|role_sep|>\n{_j({'name': n, 'arguments': a})}" for n, a in calls)

    extra = [_case("content_then_call", "content, message separator, then the call", "Let me check.<|message_sep|>\n\nfunction call<|role_sep|>\n" + _j({"name": "get_weather", "arguments": {"city": "Paris"}})),
             _case("function_call_token", "<|function_call|> variant", "<|function_call|>" + _j({"name": "get_weather", "arguments": {"city": "Paris"}}))]
    cases = tool_cases(render, "function call<|role_sep|>", extra=extra, malformed='function call<|role_sep|>\n{"name": "get_weather", "arguments": {"city": }')
    return _spec("gigachat3", {"vllm": ["gigachat3"], "sglang": ["gigachat3"]}, ["<|role_sep|>", "<|message_sep|>", "<|function_call|>", "</s>"], cases)


def gigachat35():
    def render(calls):
        inv = "".join(f'<｜GCML｜invoke name="{n}">' + "".join(f'<｜GCML｜parameter name="{k}" string="{"true" if isinstance(v, str) else "false"}">{_raw(v)}</｜GCML｜parameter>' for k, v in a.items()) + "</｜GCML｜invoke>" for n, a in calls)
        return f"<｜GCML｜tool_calls>{inv}</｜GCML｜tool_calls>"

    cases = tool_cases(render, "<｜GCML｜tool_calls>", malformed='<｜GCML｜tool_calls><｜GCML｜invoke name="get_weather"><｜GCML｜parameter name="city">Paris</｜GCML｜invoke></｜GCML｜tool_calls>')
    return _spec("gigachat35", {"vllm": [], "sglang": ["gigachat35"]}, ["<|message_sep|>", "</s>"], cases, note="SGLang only")


def functiongemma():
    def val(v):
        return f"<escape>{v}<escape>" if isinstance(v, str) else _j(v)

    def render(calls):
        return "".join("<start_function_call>call:" + n + "{" + ",".join(f"{k}:{val(v)}" for k, v in a.items()) + "}<end_function_call>" for n, a in calls)

    cases = tool_cases(render, "<start_function_call>", malformed="<start_function_call>call:get_weather{city:<escape>Paris}<end_function_call>")
    return _spec("functiongemma", {"vllm": ["functiongemma"], "sglang": []}, ["<start_function_call>", "<end_function_call>", "<escape>"], cases)


def gemma4():
    Q = '<|"|>'

    def val(v):
        if isinstance(v, str):
            return f"{Q}{v}{Q}"
        if isinstance(v, dict):
            return "{" + ",".join(f"{k}:{val(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ",".join(val(x) for x in v) + "]"
        return _j(v)

    def render(calls):
        return "".join("<|tool_call>call:" + n + val(a) + "<tool_call|>" for n, a in calls)

    extra = [_case("thought_then_call", "thought channel then a call (no reasoning parser)", "<|channel>thought\nplan<channel|>" + render([WEATHER]))]
    cases = tool_cases(render, "<|tool_call>", extra=extra, malformed=f"<|tool_call>call:get_weather{{city:{Q}Paris}}<tool_call|>")
    return _spec("gemma4", {"vllm": ["gemma4"], "sglang": ["gemma4"]}, ["<|tool_call>", "<tool_call|>", Q, "<|channel>", "<channel|>", "<turn|>", "<|tool_response>"], cases)


def step3():
    def render(calls):
        body = "".join(f'<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="{n}">' + "".join(f'<steptml:parameter name="{k}">{_raw(v)}</steptml:parameter>' for k, v in a.items()) + "</steptml:invoke><｜tool_call_end｜>" for n, a in calls)
        return f"<｜tool_calls_begin｜>{body}<｜tool_calls_end｜>"

    extra = [_case("html_value", "a value holding HTML", '<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="echo"><steptml:parameter name="text"><b>hi</b></steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>')]
    marks = ["<｜tool_calls_begin｜>", "<｜tool_calls_end｜>", "<｜tool_call_begin｜>", "<｜tool_call_end｜>", "<｜tool_sep｜>"]
    cases = tool_cases(render, "<｜tool_calls_begin｜>", extra=extra, malformed='<｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="get_weather"><steptml:parameter name="city">Paris</steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>')
    return _spec("step3", {"vllm": ["step3"], "sglang": ["step3"]}, marks, cases)


def minicpm5():
    def render(calls):
        return "\n".join(f'<function name="{n}">' + "".join(f'<param name="{k}">{_raw(v)}</param>' for k, v in a.items()) + "</function>" for n, a in calls)

    extra = [_case("cdata_value", "a CDATA value", '<function name="echo"><param name="text"><![CDATA[a < b & c]]></param></function>')]
    cases = tool_cases(render, "<function", joiner="\n", extra=extra, malformed='<function name="get_weather"><param name="city">Paris</function>')
    return _spec("minicpm5", {"vllm": ["minicpm5"], "sglang": ["minicpm5"]}, ["<think>", "</think>"], cases)


def dots():
    def render(calls):
        inv = "".join(f'<invoke name="{n}">\n' + "".join(f'<parameter name="{k}">{_raw(v)}</parameter>\n' for k, v in a.items()) + "</invoke>\n" for n, a in calls)
        return f"<dots_function_call>\n{inv}</dots_function_call>"

    extra = [_case("json_fallback", "a JSON object inside the wrapper", "<dots_function_call>\n" + _j({"name": "get_weather", "arguments": {"city": "Paris"}}) + "\n</dots_function_call>")]
    cases = tool_cases(render, "<dots_function_call>", joiner="\n", extra=extra, malformed='<dots_function_call>\n<invoke name="get_weather">\n<parameter name="city">Paris\n</invoke>\n</dots_function_call>')
    return _spec("dots", {"vllm": ["dots"], "sglang": ["dots"]}, ["<dots_function_call>", "</dots_function_call>", "<think>", "</think>"], cases)


def hy_v3():
    def render(calls):
        body = "".join(f"<tool_call>{n}<tool_sep>\n" + "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{_raw(v)}</arg_value>\n" for k, v in a.items()) + "</tool_call>\n" for n, a in calls)
        return f"<tool_calls>\n{body}</tool_calls>"

    marks = ["<tool_calls>", "</tool_calls>", "<tool_call>", "</tool_call>", "<tool_sep>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "<think>", "</think>"]
    cases = tool_cases(render, "<tool_calls>", joiner="\n", malformed="<tool_calls>\n<tool_call>get_weather<tool_sep>\n<arg_key>city<arg_value>Paris</arg_value>\n</tool_call>\n</tool_calls>")
    return _spec("hy_v3", {"vllm": ["hy_v3", "hy_v4"], "sglang": ["hunyuan"]}, marks, cases)


#: A Hunyuan v4 checkpoint's token suffix (vLLM reads it off the vocabulary: `detect_token_suffix`).
HY_SUFFIX = ":6124c78e"


def hy_tags(suffix=HY_SUFFIX):
    """The suffixed structural tags of Hunyuan v4, by role."""
    return {k: f"<{t}{suffix}>" for k, t in (("calls", "tool_calls"), ("calls_end", "/tool_calls"), ("call", "tool_call"),
                                             ("call_end", "/tool_call"), ("key", "arg_key"), ("key_end", "/arg_key"),
                                             ("value", "arg_value"), ("value_end", "/arg_value"), ("think", "think"),
                                             ("think_end", "/think"))}


def hy_render(calls, t=None):
    t = t or hy_tags()
    body = "".join(f"{t['call']}{n}" + "".join(f"{t['key']}{k}{t['key_end']}{t['value']}{_raw(v)}{t['value_end']}" for k, v in a.items())
                   + t["call_end"] for n, a in calls)
    return f"{t['calls']}{body}{t['calls_end']}"


def hy_v4():
    t = hy_tags()
    plain = hy_tags("")
    other = hy_tags(":deadbeef")
    one = hy_render([WEATHER])
    extra = [
        _case("unsuffixed_lookalike", "unsuffixed tags (not this checkpoint's tokens) in prose",
              "Write " + hy_render([WEATHER], plain) + " to call."),
        _case("other_suffix", "tags with another checkpoint's suffix", hy_render([WEATHER], other)),
        _case("newline_framing", "newlines after the section tag and between elements",
              f"{t['calls']}\n{t['call']}get_weather\n{t['key']}city{t['key_end']}{t['value']}Paris{t['value_end']}\n"
              f"{t['key']}days{t['key_end']}{t['value']}3{t['value_end']}\n{t['call_end']}\n{t['calls_end']}"),
        _case("newline_between_key_and_value", "a newline between a key and its value",
              f"{t['calls']}{t['call']}get_weather{t['key']}city{t['key_end']}\n{t['value']}Paris{t['value_end']}{t['call_end']}{t['calls_end']}"),
        _case("value_with_unsuffixed_close", "a value holding an unsuffixed closing tag",
              f"{t['calls']}{t['call']}echo{t['key']}text{t['key_end']}{t['value']}a </arg_value> b{t['value_end']}{t['call_end']}{t['calls_end']}"),
        _case("no_section_close", "a complete call, the section never closed", one[: -len(t["calls_end"])]),
        _case("name_with_spaces", "spaces around the name",
              f"{t['calls']}{t['call']} get_weather {t['key']}city{t['key_end']}{t['value']}Paris{t['value_end']}{t['call_end']}{t['calls_end']}"),
        _case("think_then_call", "a think block then a call (tool parser alone)", f"{t['think']}plan{t['think_end']}" + one),
        _case("unicode_key_value", "non-ASCII key and value",
              f"{t['calls']}{t['call']}echo{t['key']}text{t['key_end']}{t['value']}日本語 ✓{t['value_end']}{t['call_end']}{t['calls_end']}"),
    ]
    malformed = f"{t['calls']}{t['call']}get_weather{t['key']}city{t['value']}Paris{t['value_end']}{t['call_end']}{t['calls_end']}"
    cases = tool_cases(hy_render, t["calls"], extra=extra, malformed=malformed)
    marks = [t[k] for k in ("calls", "calls_end", "call", "call_end", "key", "key_end", "value", "value_end", "think", "think_end")]
    return _spec("hy_v4", {"vllm": ["hy_v4"], "sglang": []}, marks, cases,
                 note=f"Hunyuan v4 tags carry the checkpoint's token suffix ({HY_SUFFIX}); the vocabulary has only the suffixed tokens",
                 extend_model="qwen3")


def inkling():
    def render(calls):
        return "".join(f"<|message_model|><|content_invoke_tool_json|>{_j({'name': n, 'args': a})}<|end_message|>" for n, a in calls)

    extra = [_case("text_block_then_call", "a text block then a call block", "<|message_model|><|content_text|>Checking.<|end_message|>" + render([WEATHER])),
             _case("thinking_text_call", "thinking, text and call blocks", "<|message_model|><|content_thinking|>plan<|end_message|><|message_model|><|content_text|>Checking.<|end_message|>" + render([WEATHER]))]
    marks = ["<|message_model|>", "<|content_invoke_tool_json|>", "<|content_invoke_tool_text|>", "<|content_text|>", "<|content_thinking|>", "<|end_message|>", "<|content_model_end_sampling|>", "<|content_tool_error|>"]
    cases = tool_cases(render, "<|message_model|><|content_invoke_tool_json|>", extra=extra, malformed='<|message_model|><|content_invoke_tool_json|>{"name": "get_weather", "args": {"city": }<|end_message|>')
    return _spec("inkling", {"vllm": ["inkling"], "sglang": ["inkling"]}, marks, cases)


def cohere_command():
    def render(calls):
        return "<|START_ACTION|>" + _j([{"tool_call_id": str(i), "tool_name": n, "parameters": a} for i, (n, a) in enumerate(calls)]) + "<|END_ACTION|>"

    extra = [_case("response_block", "a response block only", "<|START_RESPONSE|>Hello.<|END_RESPONSE|>"),
             _case("thinking_then_action", "thinking then an action", "<|START_THINKING|>plan<|END_THINKING|>" + render([WEATHER]))]
    marks = ["<|START_ACTION|>", "<|END_ACTION|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_THINKING|>", "<|END_THINKING|>", "<|START_TEXT|>", "<|END_TEXT|>", "<|END_OF_TURN_TOKEN|>"]
    cases = tool_cases(render, "<|START_ACTION|>", extra=extra, malformed='<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "get_weather", "parameters": {"city": }]<|END_ACTION|>')
    return _spec("cohere_command", {"vllm": ["cohere_command3", "cohere_command4"], "sglang": ["cohere_command4"]}, marks, cases)


def plamo3():
    P = "<|plamo:"

    def render(calls):
        body = "".join(f"{P}begin_tool_request:plamo|>{P}begin_tool_name:plamo|>{n}{P}end_tool_name:plamo|>{P}begin_tool_arguments:plamo|>{P}constrain|>json{P}msg|>{_j(a)}{P}end_tool_arguments:plamo|>{P}end_tool_request:plamo|>" for n, a in calls)
        return f"{P}begin_tool_requests:plamo|>{body}{P}end_tool_requests:plamo|>"

    marks = [f"{P}{m}" for m in ("begin_tool_requests:plamo|>", "end_tool_requests:plamo|>", "begin_tool_request:plamo|>", "end_tool_request:plamo|>", "begin_tool_name:plamo|>", "end_tool_name:plamo|>", "begin_tool_arguments:plamo|>", "end_tool_arguments:plamo|>", "constrain|>", "msg|>", "begin_think:plamo|>", "end_think:plamo|>", "tag|>")]
    cases = tool_cases(render, f"{P}begin_tool_requests:plamo|>", malformed=f"{P}begin_tool_requests:plamo|>{P}begin_tool_request:plamo|>{P}begin_tool_name:plamo|>get_weather{P}end_tool_name:plamo|>{_j({'city': 'Paris'})}{P}end_tool_request:plamo|>{P}end_tool_requests:plamo|>")
    return _spec("plamo3", {"vllm": ["plamo3"], "sglang": []}, marks, cases)


def muse():
    def render(calls):
        out = ""
        for n, a in calls:
            params = "".join(f'<atem:parameter name="{k}">{_raw(v)}</atem:parameter>\n' for k, v in a.items())
            out += f'<|start|>assistant to=functions.{n}<|message|><atem:function_calls>\n<atem:invoke name="functions.{n}">\n{params}</atem:invoke>\n</atem:function_calls><|eom|>'
        return out

    extra = [_case("self_then_call", "reasoning to=self then a call", "<|start|>assistant to=self<|message|>plan<|eom|>" + render([WEATHER])),
             _case("to_user", "a message to the user", "<|start|>assistant to=user<|message|>Hello.<|eot|>"),
             _case("bare_names", "invoke names without functions. prefix", '<|start|>assistant to=get_weather<|message|><atem:function_calls>\n<atem:invoke name="get_weather">\n<atem:parameter name="city">Paris</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eom|>')]
    cases = tool_cases(render, "<|start|>assistant to=", extra=extra, malformed='<|start|>assistant to=functions.get_weather<|message|><atem:function_calls>\n<atem:invoke name="functions.get_weather">\n<atem:parameter name="city">Paris</atem:invoke>\n</atem:function_calls><|eom|>')
    return _spec("muse", {"vllm": ["muse", "musespark1x", "muse_glimmer"], "sglang": ["muse"]}, ["<|start|>", "<|message|>", "<|eom|>", "<|eot|>"], cases)


def iquest_q1():
    def render(calls):
        return "".join(f"<iquest_tool_call>{n}" + "".join(f"<arg_key>{k}</arg_key><arg_value>{_raw(v)}</arg_value>" for k, v in a.items()) + "</iquest_tool_call>" for n, a in calls)

    cases = tool_cases(render, "<iquest_tool_call>", malformed="<iquest_tool_call>get_weather<arg_key>city<arg_value>Paris</arg_value></iquest_tool_call>")
    return _spec("iquest_q1", {"vllm": [], "sglang": ["iquest_q1"]}, ["<iquest_tool_call>", "</iquest_tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "<think>", "</think>"], cases,
                 note="SGLang only; body guessed as GLM-4.7 key/value (IQuestQ1Detector subclasses Glm47MoeDetector)")


def specs():
    return [seed_oss(), deepseek_v4(), deepseek_v41(), kimi_k3(), k2_horizon(), minimax_m3(), olmo3(), lfm2(), granite(),
            granite_20b_fc(), jamba(), phi4_mini_json(), apertus(), xlam(), internlm(), longcat(), gigachat3(), gigachat35(),
            functiongemma(), gemma4(), step3(), minicpm5(), dots(), hy_v3(), hy_v4(), inkling(), cohere_command(), plamo3(), muse(), iquest_q1()]



