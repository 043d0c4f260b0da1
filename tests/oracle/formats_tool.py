"""Tool-call formats: how each renders calls, its markers, and the names that parse it."""
import json

from cases_common import TOOLS, WEATHER, WEATHER2, tool_cases


def _j(obj):
    return json.dumps(obj, ensure_ascii=False)


def _raw(value):
    """A value as an XML-style format writes it: strings bare, everything else as JSON."""
    return value if isinstance(value, str) else _j(value)


def _spec(fmt, parsers, special, cases, **extra):
    spec = {"format": fmt, "kind": "tool", "parsers": parsers, "special_tokens": special,
            "tools": TOOLS, "cases": cases}
    spec.update(extra)
    return spec


def _case(cid, desc, text, finish="stop", **kw):
    return {"id": cid, "description": desc, "text": text, "finish_reason": finish, **kw}


def hermes():
    def render(calls):
        return "\n".join(f"<tool_call>\n{_j({'name': n, 'arguments': a})}\n</tool_call>" for n, a in calls)

    extra = [
        _case("arguments_before_name", "arguments key first", '<tool_call>\n{"arguments": {"city": "Paris"}, "name": "get_weather"}\n</tool_call>'),
        _case("brace_in_string", "braces inside a string value", '<tool_call>\n{"name": "echo", "arguments": {"text": "a } b { c"}}\n</tool_call>'),
        _case("no_end_marker", "call closed by end of output, no </tool_call>", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'),
        _case("invalid_json", "invalid JSON inside the markers", '<tool_call>\n{"name": "get_weather", "arguments": {city: Paris}}\n</tool_call>'),
        _case("think_then_call", "reasoning-like text before the call (no reasoning parser)", "<think>\nneed weather\n</think>\n\n" + render([WEATHER])),
    ]
    cases = tool_cases(render, "<tool_call>", joiner="\n",
                       malformed='<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}\n</tool_call>', extra=extra)
    return _spec("hermes", {"vllm": ["hermes", "qwen3_json", "granite4", "ernie45"], "sglang": ["hermes", "qwen25", "qwen", "trinity"]},
                 ["<tool_call>", "</tool_call>", "<think>", "</think>"], cases)


def qwen3_coder():
    def render(calls):
        blocks = []
        for n, a in calls:
            params = "".join(f"<parameter={k}>\n{_raw(v)}\n</parameter>\n" for k, v in a.items())
            blocks.append(f"<tool_call>\n<function={n}>\n{params}</function>\n</tool_call>")
        return "\n".join(blocks)

    extra = [
        _case("missing_parameter_close", "a parameter closed by the next <parameter=", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n<parameter=unit>\ncelsius\n</parameter>\n</function>\n</tool_call>"),
        _case("function_without_tool_call", "<function=...> with no <tool_call> wrapper", "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>"),
        _case("value_with_markup", "a string value holding < and & and a newline", "<tool_call>\n<function=echo>\n<parameter=text>\na < b && c\n<b>bold</b>\n</parameter>\n</function>\n</tool_call>"),
        _case("float_for_integer", "140.0 for an integer parameter and text for a number", "<tool_call>\n<function=set_flags>\n<parameter=count>\n140.0\n</parameter>\n<parameter=ratio>\nabc\n</parameter>\n</function>\n</tool_call>"),
        _case("untyped_unknown_param", "a parameter not in the schema", "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=extra>\n[1, 2]\n</parameter>\n</function>\n</tool_call>"),
        _case("no_newlines", "values without the framing newlines", "<tool_call><function=get_weather><parameter=city>Paris</parameter><parameter=days>2</parameter></function></tool_call>"),
    ]
    cases = tool_cases(render, "<tool_call>", joiner="\n",
                       malformed="<tool_call>\n<function=get_weather\n<parameter=city>\nParis\n</parameter>\n</tool_call>", extra=extra)
    return _spec("qwen3_coder", {"vllm": ["qwen3_coder", "qwen3_xml", "step3p5", "step5", "mimo"], "sglang": ["qwen3_coder", "step3p5", "nanbeige", "mimo"]},
                 ["<tool_call>", "</tool_call>", "<think>", "</think>"], cases)


def llama3_json():
    def render(calls):
        return "; ".join(_j({"name": n, "parameters": a}) for n, a in calls)

    extra = [
        _case("python_tag", "call after <|python_tag|>", "<|python_tag|>" + render([WEATHER])),
        _case("arguments_key", "'arguments' instead of 'parameters'", _j({"name": "get_weather", "arguments": {"city": "Paris"}})),
        _case("json_mid_text", "a JSON object in the middle of prose", "Here is the result: " + render([WEATHER]) + " Would you like more?"),
        _case("json_not_a_call", "a JSON object without name", '{"city": "Paris", "temp": 20}'),
        _case("parallel_newline", "two calls separated by a newline, not '; '", render([WEATHER]) + "\n" + render([WEATHER2])),
    ]
    cases = tool_cases(render, "<|python_tag|>", joiner="; ",
                       malformed='{"name": "get_weather", "parameters": {"city": "Paris"}', extra=extra)
    return _spec("llama3_json", {"vllm": ["llama3_json", "llama4_json"], "sglang": ["llama3"]},
                 ["<|python_tag|>", "<|eom_id|>", "<|eot_id|>"], cases)


def mistral(v11):
    if v11:
        def render(calls):
            return "".join(f"[TOOL_CALLS]{n}[ARGS]{_j(a)}" for n, a in calls)
        extra = [
            _case("v11_no_args_token", "[TOOL_CALLS]name{json} without [ARGS]", "[TOOL_CALLS]get_weather" + _j({"city": "Paris"})),
            _case("call_id", "[CALL_ID] between name and arguments", "[TOOL_CALLS]get_weather[CALL_ID]abc123XYZ[ARGS]" + _j({"city": "Paris"})),
            _case("think_then_call", "[THINK] block then a call", "[THINK]need weather[/THINK]" + render([WEATHER])),
        ]
        special = ["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]", "</s>"]
        fmt = "mistral_v11"
    else:
        def render(calls):
            return "[TOOL_CALLS] " + _j([{"name": n, "arguments": a} for n, a in calls])
        extra = [
            _case("no_space", "array directly after the marker", "[TOOL_CALLS]" + _j([{"name": "get_weather", "arguments": {"city": "Paris"}}])),
            _case("single_object", "an object instead of an array", "[TOOL_CALLS] " + _j({"name": "get_weather", "arguments": {"city": "Paris"}})),
        ]
        special = ["[TOOL_CALLS]", "</s>"]
        fmt = "mistral"
    cases = tool_cases(render, "[TOOL_CALLS]", malformed="[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": }]", extra=extra)
    return _spec(fmt, {"vllm": ["mistral"], "sglang": ["mistral"]}, special, cases,
                 note="vLLM picks the dialect from the tokenizer: [ARGS] in the vocabulary = v11+ "
                      "(mistral_v11.json), absent = pre-v11 JSON array (mistral.json)")


DS_BEGIN, DS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL, DS_CALL_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
DS_SPECIAL = [DS_BEGIN, DS_END, DS_CALL, DS_CALL_END, DS_SEP, "<think>", "</think>", "<｜end▁of▁sentence｜>"]


def deepseek_v3():
    def render(calls):
        body = "\n".join(f"{DS_CALL}function{DS_SEP}{n}\n```json\n{_j(a)}\n```{DS_CALL_END}" for n, a in calls)
        return f"{DS_BEGIN}{body}{DS_END}"

    extra = [
        _case("multiline_json", "pretty-printed JSON in the fence", f"{DS_BEGIN}{DS_CALL}function{DS_SEP}get_weather\n```json\n{{\n  \"city\": \"Paris\",\n  \"days\": 2\n}}\n```{DS_CALL_END}{DS_END}"),
        _case("no_section_end", "call end but no calls-end marker", f"{DS_BEGIN}{DS_CALL}function{DS_SEP}get_weather\n```json\n{_j({'city': 'Paris'})}\n```{DS_CALL_END}"),
    ]
    cases = tool_cases(render, DS_BEGIN, malformed=f"{DS_BEGIN}{DS_CALL}function{DS_SEP}get_weather\n{_j({'city': 'Paris'})}{DS_CALL_END}{DS_END}", extra=extra)
    return _spec("deepseek_v3", {"vllm": ["deepseek_v3"], "sglang": ["deepseekv3"]}, DS_SPECIAL, cases)


def deepseek_v31():
    def render(calls):
        body = "".join(f"{DS_CALL}{n}{DS_SEP}{_j(a)}{DS_CALL_END}" for n, a in calls)
        return f"{DS_BEGIN}{body}{DS_END}"

    extra = [
        _case("v3_style_body", "a V3 'function' prefix and fence in a V3.1 output", f"{DS_BEGIN}{DS_CALL}function{DS_SEP}get_weather\n```json\n{_j({'city': 'Paris'})}\n```{DS_CALL_END}{DS_END}"),
        _case("no_section_end", "no calls-end marker", f"{DS_BEGIN}{DS_CALL}get_weather{DS_SEP}{_j({'city': 'Paris'})}{DS_CALL_END}"),
    ]
    cases = tool_cases(render, DS_BEGIN, malformed=f"{DS_BEGIN}{DS_CALL}get_weather{_j({'city': 'Paris'})}{DS_CALL_END}{DS_END}", extra=extra)
    return _spec("deepseek_v31", {"vllm": ["deepseek_v31"], "sglang": ["deepseekv31"]}, DS_SPECIAL, cases)


DSML = "｜DSML｜"


def _dsml(outer):
    def render(calls):
        invokes = []
        for n, a in calls:
            params = "".join(
                f'<{DSML}parameter name="{k}" string="{"true" if isinstance(v, str) else "false"}">{_raw(v)}</{DSML}parameter>\n'
                for k, v in a.items())
            invokes.append(f'<{DSML}invoke name="{n}">\n{params}</{DSML}invoke>\n')
        return f"<{DSML}{outer}>\n{''.join(invokes)}</{DSML}{outer}>"
    return render


def deepseek_v32():
    render = _dsml("function_calls")
    extra = [
        _case("string_false_text", "string=\"false\" on a value that is not JSON", f'<{DSML}function_calls>\n<{DSML}invoke name="echo">\n<{DSML}parameter name="text" string="false">hello world</{DSML}parameter>\n</{DSML}invoke>\n</{DSML}function_calls>'),
        _case("no_string_attr", "a parameter without the string attribute", f'<{DSML}function_calls>\n<{DSML}invoke name="get_weather">\n<{DSML}parameter name="days">3</{DSML}parameter>\n</{DSML}invoke>\n</{DSML}function_calls>'),
        _case("no_outer_close", "complete invoke, outer close never arrives", f'<{DSML}function_calls>\n<{DSML}invoke name="get_weather">\n<{DSML}parameter name="city" string="true">Paris</{DSML}parameter>\n</{DSML}invoke>\n'),
    ]
    cases = tool_cases(render, f"<{DSML}function_calls>", joiner="\n",
                       malformed=f'<{DSML}function_calls>\n<{DSML}invoke name="get_weather">\n<{DSML}parameter name="city" string="true">Paris</{DSML}invoke>\n</{DSML}function_calls>', extra=extra)
    return _spec("deepseek_v32", {"vllm": ["deepseek_v32"], "sglang": ["deepseekv32"]},
                 ["<think>", "</think>", "<｜end▁of▁sentence｜>"], cases,
                 note="DSML markers are plain text in the DeepSeek vocabulary, so they are characters here")


K2_SEC, K2_SEC_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
K2_CALL, K2_ARG, K2_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"


def kimi_k2():
    def render(calls, start=0):
        body = "".join(f"{K2_CALL}functions.{n}:{start + i}{K2_ARG}{_j(a)}{K2_END}" for i, (n, a) in enumerate(calls))
        return f"{K2_SEC}{body}{K2_SEC_END}"

    extra = [
        _case("bare_name_id", "id without functions. prefix", f"{K2_SEC}{K2_CALL}get_weather:0{K2_ARG}{_j({'city': 'Paris'})}{K2_END}{K2_SEC_END}"),
        _case("mangled_id", "model dropped '.' and ':' (functionsget_weather0)", f"{K2_SEC}{K2_CALL}functionsget_weather0{K2_ARG}{_j({'city': 'Paris'})}{K2_END}{K2_SEC_END}"),
        _case("dotted_name", "a tool name with a dot", f"{K2_SEC}{K2_CALL}functions.math.sum:0{K2_ARG}{_j({'a': 1})}{K2_END}{K2_SEC_END}"),
        _case("high_index", "ids continuing a conversation (index 5, 6)", render([WEATHER, WEATHER2], start=5)),
        _case("no_section_end", "section never closed", f"{K2_SEC}{K2_CALL}functions.get_weather:0{K2_ARG}{_j({'city': 'Paris'})}{K2_END}"),
    ]
    cases = tool_cases(render, K2_SEC, malformed=f"{K2_SEC}{K2_CALL}functions.get_weather:0{_j({'city': 'Paris'})}{K2_END}{K2_SEC_END}", extra=extra)
    return _spec("kimi_k2", {"vllm": ["kimi_k2"], "sglang": ["kimi_k2"]},
                 [K2_SEC, K2_SEC_END, K2_CALL, K2_ARG, K2_END, "<think>", "</think>", "<|im_end|>"], cases,
                 model_type="kimi_k2",
                 note="model_type kimi_k2 makes vLLM use native functions.NAME:IDX ids")


def glm45():
    def render_nl(calls):
        return "\n".join(f"<tool_call>{n}\n" + "".join(f"<arg_key>{k}</arg_key>\n<arg_value>{_raw(v)}</arg_value>\n" for k, v in a.items()) + "</tool_call>" for n, a in calls)

    def render_47(calls):
        return "".join(f"<tool_call>{n}" + "".join(f"<arg_key>{k}</arg_key><arg_value>{_raw(v)}</arg_value>" for k, v in a.items()) + "</tool_call>" for n, a in calls)

    extra = [
        _case("glm47_" + c["id"], "GLM-4.7 framing (no newlines): " + c["description"], c["text"], finish_reason=c["finish_reason"])
        for c in tool_cases(render_47, "<tool_call>") if c["id"] in ("single", "parallel", "text_before", "text_between", "typed_values", "unicode_escapes", "empty_arguments", "truncated_mid_call", "nested_json")
    ] + [
        _case("json_looking_string", "a string parameter whose value looks like JSON", "<tool_call>echo\n<arg_key>text</arg_key>\n<arg_value>[1, 2]</arg_value>\n</tool_call>"),
        _case("missing_value_close", "arg_value never closed", "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris\n</tool_call>"),
    ]
    cases = tool_cases(render_nl, "<tool_call>", joiner="\n",
                       malformed="<tool_call>get_weather\n<arg_key>city<arg_value>Paris</arg_value>\n</tool_call>", extra=extra)
    return _spec("glm45", {"vllm": ["glm45", "glm47", "ling3", "poolside_v1"], "sglang": ["glm45", "glm", "glm47", "spark25", "ling3", "poolside_v1", "iquest_q1"]},
                 ["<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
                  "<think>", "</think>", "<|observation|>", "<|user|>"], cases,
                 note="cases without a prefix use GLM-4.5 framing (newline after the name and between pairs); glm47_* cases use GLM-4.7 framing")


def minimax_m2():
    def render(calls):
        inv = "".join(f'<invoke name="{n}">\n' + "".join(f'<parameter name="{k}">{_raw(v)}</parameter>\n' for k, v in a.items()) + "</invoke>\n" for n, a in calls)
        return f"<minimax:tool_call>\n{inv}</minimax:tool_call>"

    extra = [
        _case("nil_value", "nil and null for a nullable string", '<minimax:tool_call>\n<invoke name="set_flags">\n<parameter name="note">nil</parameter>\n<parameter name="zip">null</parameter>\n</invoke>\n</minimax:tool_call>'),
        _case("single_quoted_name", "invoke name in single quotes", "<minimax:tool_call>\n<invoke name='get_weather'>\n<parameter name='city'>Paris</parameter>\n</invoke>\n</minimax:tool_call>"),
        _case("think_then_call", "</think> then a call (no reasoning parser)", "thinking...</think>\n\n" + render([WEATHER])),
    ]
    cases = tool_cases(render, "<minimax:tool_call>", joiner="\n",
                       malformed='<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris\n</invoke>\n</minimax:tool_call>', extra=extra)
    return _spec("minimax_m2", {"vllm": ["minimax_m2"], "sglang": ["minimax-m2"]},
                 ["<minimax:tool_call>", "</minimax:tool_call>", "<think>", "</think>"], cases)


def pythonic():
    def lit(v):
        if v is True:
            return "True"
        if v is False:
            return "False"
        if v is None:
            return "None"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{lit(k)}: {lit(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ", ".join(lit(x) for x in v) + "]"
        return repr(v)

    def render(calls):
        return "[" + ", ".join(f"{n}(" + ", ".join(f"{k}={lit(v)}" for k, v in a.items()) + ")" for n, a in calls) + "]"

    extra = [
        _case("user_backslash_t", "found by a user: malformed call-like text with literal backslash-t", "ok then[B(x=\\t)B(y=,\\t"),
        _case("user_cut_call", "found by a user: second call cut off by the end of generation", "see [f(a=1), g(b=", "length"),
        _case("double_quotes", "double-quoted strings", '[get_weather(city="San Francisco", unit="fahrenheit")]'),
        _case("positional_arg", "a positional argument (not valid for the format)", "[get_weather('Paris')]"),
        _case("not_a_list", "a call without brackets", "get_weather(city='Paris')"),
        _case("trailing_text_after_list", "a list then prose", render([WEATHER]) + " Let me know."),
        _case("python_start_wrapper", "Llama 4 wrapper tokens", "<|python_start|>" + render([WEATHER]) + "<|python_end|>"),
    ]
    cases = tool_cases(render, "[", joiner=" ", lookalike="Use [brackets] like [this](that) in markdown.",
                       malformed="[get_weather(city='Paris', unit=)]", extra=extra)
    return _spec("pythonic", {"vllm": ["pythonic", "llama4_pythonic"], "sglang": ["pythonic"]},
                 ["<|python_start|>", "<|python_end|>", "<|eot|>"], cases)


def openai_harmony():
    """gpt-oss Harmony. Markers are single special tokens of the real o200k vocabulary."""
    A = "<|channel|>analysis<|message|>"
    nxt = "<|end|><|start|>assistant"
    wx = _j({"city": "Paris"})

    def call(name, args, channel="commentary", constrain="<|constrain|>json"):
        return f"<|channel|>{channel} to=functions.{name} {constrain}<|message|>{args}<|call|>"

    cases = [
        _case("analysis_final", "reasoning then final answer", f"{A}Think first.{nxt}<|channel|>final<|message|>The answer.<|return|>"),
        _case("analysis_call", "reasoning then a tool call", f"{A}Need weather.{nxt}" + call("get_weather", wx)),
        _case("recipient_before_channel", "recipient in the header before the channel", f"{A}Need weather.<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{wx}<|call|>"),
        _case("call_without_analysis", "output starts directly with the commentary call", call("get_weather", wx)),
        _case("two_calls", "two calls in one output", f"{A}Two lookups.{nxt}" + call("get_weather", wx) + "<|start|>assistant" + call("get_weather", _j({"city": "Tokyo", "days": 3}))),
        _case("final_only", "only a final message", "<|channel|>final<|message|>Hello there.<|return|>"),
        _case("truncated_in_analysis", "stopped inside reasoning", f"{A}Thinking about", "length"),
        _case("truncated_in_arguments", "stopped inside the arguments", f"{A}Need weather.{nxt}<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{{\"city\": \"Pa", "length"),
        _case("preamble_then_call", "commentary preamble without recipient, then a call", f"<|channel|>commentary<|message|>Let me check.{nxt}" + call("get_weather", wx)),
        _case("call_on_analysis_channel", "a function call on the analysis channel", f"{A}Need weather.{nxt}" + call("get_weather", wx, channel="analysis")),
        _case("dotted_name", "a dotted function name", call("math.sum", _j({"a": 1, "b": 2}))),
        _case("builtin_recipient", "a built-in tool recipient is not a function call", f"{A}Search.{nxt}<|channel|>analysis to=browser.search <|constrain|>json<|message|>{_j({'query': 'x'})}<|call|>"),
        _case("no_constrain", "call without <|constrain|>json", f"<|channel|>commentary to=functions.get_weather<|message|>{wx}<|call|>"),
        _case("nested_json", "nested arguments", call("search", _j({"query": "q", "filters": {"tags": ["a"], "range": {"min": 1}}}))),
        _case("empty_arguments", "empty arguments object", call("ping", "{}")),
        _case("invalid_json", "arguments that are not JSON", call("get_weather", "{city: Paris}")),
        _case("unicode_final", "non-ASCII in reasoning and answer", f"{A}思考 😀{nxt}<|channel|>final<|message|>答案 ✓ é<|return|>"),
        _case("final_with_end", "final closed by <|end|>", "<|channel|>final<|message|>Done.<|end|>"),
        _case("plain_text", "no Harmony markup at all", "Just plain text."),
        _case("truncated_mid_marker_text", "output ends with a marker spelled as text", f"{A}Thinking.<|en", "length"),
        _case("unknown_tool", "a call to an undeclared tool", call("get_time", _j({"tz": "UTC"}))),
    ]
    parsers = {
        "vllm": [{"tool": "openai", "reasoning": "openai_gptoss"}, "openai", {"reasoning": "openai_gptoss"}],
        "sglang": [{"tool": "gpt-oss", "reasoning": "gpt-oss"}, "gpt-oss", {"reasoning": "gpt-oss"}],
    }
    return _spec("openai", parsers, [], cases, harmony=True, tokenizer="../shared/models/gpt-oss/tokenizer.json",
                 note="vLLM runs its HarmonyParser (is_harmony) on token ids of the real gpt-oss tokenizer; "
                      "the usual gpt-oss serving configuration sets both parsers (the combined entries)")


def specs():
    return [hermes(), qwen3_coder(), llama3_json(), mistral(False), mistral(True), deepseek_v3(),
            deepseek_v31(), deepseek_v32(), kimi_k2(), glm45(), minimax_m2(), pythonic(), openai_harmony()]
