"""vLLM's `hf` and `beam` parsers (SGLang `response_template`, `beam`): interpreters of the
`response_template` a checkpoint ships in tokenizer_config.json. No shared model has one, so the
templates here are written for the test, from vLLM's loader (`chat_parsing/response_templates.py`)
and content parsers; each input carries its template, the per-character tokenizer carries it in
`init_kwargs` (where vLLM's `resolve_response_template` finds it) and the native test writes it
into a derived model's tokenizer_config.json.

- `rtpl_qwen`: Qwen-like, literal delimiters: `<think>`...`</think>`, `<tool_call>` JSON
  `{"name", "arguments"}` `</tool_call>` (repeats, transform into a call), content the sink.
- `rtpl_xml`: regex anchors and xml-inline: `[THINK]`...`[/THINK]` (open by pattern), calls
  `<call name="NAME">` (the name a named capture) with `<arg name="k">v</arg>` values typed by
  the request's schema, content the field vLLM adds as the sink.
- `rtpl_kv`: kv-lines: `<<NAME` newline `key=value` lines `>>`, values parsed as JSON.
- `rtpl_sink`: every field has an opener, `content` too (`<answer>`), so text outside every region
  has no field (vLLM drops it); calls are a JSON list mapped by `transform_each`.
- `rtpl_closer`: Harmony-like channels whose reasoning closer ends with the start anchor
  (`<|end|><|start|>assistant`): output the stop token cut inside that closer still closes it.
"""
from cases_common import EMPTY, SEARCH_NESTED, TOOLS, TYPED, UNICODE, WEATHER, WEATHER2, tool_cases
from formats_tool import _case, _j, _raw

HF_RUNS = {"vllm": ["hf", "beam", {"tool": "hf", "reasoning": "hf"}, {"tool": "beam", "reasoning": "beam"},
                    {"reasoning": "hf"}, {"reasoning": "beam"}],
           "sglang": ["response_template", "beam"]}

QWEN_TEMPLATE = {
    "version": 1,
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "thinking": {"open": "<think>", "close": "</think>"},
        "tool_calls": {"open": "<tool_call>", "close": "</tool_call>", "content": "json", "repeats": True,
                       "transform": {"type": "function",
                                     "function": {"name": "{content.name}", "arguments": "{content.arguments}"}}},
        "content": {},
    },
}

XML_TEMPLATE = {
    "version": 1,
    "start_anchor_pattern": r"<\|assistant\|>[ \t]*\n?",
    "fields": {
        "thinking": {"open_pattern": r"\[THINK\]\s*", "close": "[/THINK]"},
        "tool_calls": {"open_pattern": r'<call name="(?P<name>[\w.-]+)">', "close": "</call>",
                       "content": "xml-inline", "repeats": True,
                       "content_args": {"tag_pattern": r'<arg name="(?P<key>[^"]+)">(?P<value>.*?)</arg>',
                                        "merge_duplicates": True},
                       "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}}},
    },
}

KV_TEMPLATE = {
    "version": 1,
    "start_anchor": "<|assistant|>",
    "fields": {
        "thinking": {"open": ["<reasoning>", "<think>"], "close": "</reasoning>"},
        "tool_calls": {"open_pattern": r"<<(?P<name>\w+)\n", "close": ">>", "content": "kv-lines", "repeats": True,
                       "content_args": {"kv_sep": "=", "value_parser": {"name": "json", "args": {"allow_non_json": True}}},
                       "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}}},
        "content": {},
    },
}


SINK_TEMPLATE = {
    "version": 1,
    "start_anchor": "<|assistant|>",
    "fields": {
        "thinking": {"open": "<think>", "close": "</think>"},
        "content": {"open": "<answer>", "close": "</answer>"},
        "tool_calls": {"open": "<tool_call>", "close": "</tool_call>", "content": "json", "transform_each": True,
                       "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{arguments}"}}},
    },
}


CLOSER_TEMPLATE = {
    "version": 1,
    "start_anchor": "<|start|>assistant",
    "fields": {
        "thinking": {"open": "<|channel|>analysis<|message|>", "close": "<|end|><|start|>assistant"},
        "content": {"open": "<|channel|>final<|message|>", "close": ["<|return|>", "<|end|>"]},
        "tool_calls": {"open_pattern": r"<\|channel\|>commentary to=(?P<name>\w+)<\|message\|>", "close": "<|call|>",
                       "content": "json", "transform": {"function": {"name": "{name}", "arguments": "{content}"}}},
    },
}


def _qwen(calls):
    return "\n".join(f"<tool_call>\n{_j({'name': n, 'arguments': a})}\n</tool_call>" for n, a in calls)


def _xml(calls):
    return "".join(f'<call name="{n}">' + "".join(f'<arg name="{k}">{_raw(v)}</arg>' for k, v in a.items())
                   + "</call>" for n, a in calls)


def _kv(calls):
    return "".join(f"<<{n}\n" + "".join(f"{k}={_j(v)}\n" for k, v in a.items()) + ">>" for n, a in calls)


def _thinking_cases(s, e, render):
    call = render([WEATHER])
    return [
        _case("think_then_call", "reasoning block then a call", f"{s}\nplan\n{e}\n\n{call}"),
        _case("think_then_text", "reasoning then an answer", f"{s}plan{e}The answer."),
        _case("prompt_in_thinking", "the prompt opened reasoning; the output closes it",
              f"plan{e}Answer. {call}", prompt_in_reasoning=True),
        _case("unclosed_thinking", "reasoning never closed", f"{s}\nstill thinking", "length"),
        _case("call_inside_thinking", "a call written inside reasoning", f"{s}maybe {call}{e}No call."),
        _case("think_marker_cut", "stopped inside the end marker", f"{s}plan{e[:3]}", "length"),
        _case("empty_thinking", "empty reasoning block then text", f"{s}{e}Hi."),
        _case("thinking_disabled", "enable_thinking=false and a call", call,
              chat_template_kwargs={"enable_thinking": False}),
    ]


def _spec(fmt, template, special, cases, reasoning_start, prompt, note):
    return {"format": fmt, "kind": "tool", "parsers": HF_RUNS, "special_tokens": special, "tools": TOOLS,
            "response_template": template, "reasoning_start": reasoning_start, "prompt": prompt,
            "extend_model": "qwen3", "note": note, "cases": cases}


def rtpl_qwen():
    extra = _thinking_cases("<think>", "</think>", _qwen) + [
        _case("bad_json", "a call block whose JSON does not parse", "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": }\n</tool_call> after"),
        _case("no_name", "JSON without a name member", "<tool_call>\n{\"arguments\": {}}\n</tool_call>"),
        _case("string_number", "a string value the schema types as integer",
              "<tool_call>\n" + _j({"name": "get_weather", "arguments": {"city": "Paris", "days": "3"}}) + "\n</tool_call>"),
    ]
    cases = tool_cases(_qwen, "<tool_call>", joiner="\n", extra=extra,
                       malformed="<tool_call>\nget_weather(city=Paris)\n</tool_call>")
    return _spec("rtpl_qwen", QWEN_TEMPLATE, ["<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>",
                                              "</tool_call>"], cases, "<think>\n",
                 "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
                 "response_template with literal delimiters and json tool calls (Qwen-like)")


def rtpl_xml():
    extra = _thinking_cases("[THINK]", "[/THINK]", _xml) + [
        _case("duplicate_keys", "one key twice (merge_duplicates)",
              '<call name="search"><arg name="query">a</arg><arg name="query">b</arg></call>'),
        _case("string_typed", "values typed by the schema: integer, number, boolean, null, object",
              '<call name="set_flags"><arg name="count">0042</arg><arg name="ratio">1e3</arg>'
              '<arg name="enabled">True</arg><arg name="note">None</arg><arg name="meta">{"a": [1]}</arg>'
              '<arg name="zip">03106</arg></call>'),
        _case("open_pattern_lookalike", "an opener without a name", 'I write <call name=""> sometimes.'),
        _case("think_pattern_whitespace", "spaces after the opener are part of the opener pattern",
              "[THINK]   \n\nplan[/THINK]ok"),
        _case("unclosed_call", "a call cut off before its closer", _xml([WEATHER])[:-7], "length"),
    ]
    cases = tool_cases(_xml, '<call name="', extra=extra)
    return _spec("rtpl_xml", XML_TEMPLATE, [], cases, "[THINK]\n", "user: hi\n<|assistant|>\n",
                 "response_template with regex delimiters, a named capture and xml-inline arguments")


def rtpl_kv():
    call = _kv([WEATHER])
    cases = [
        _case("single", "one call", call),
        _case("parallel", "two calls", _kv([WEATHER, WEATHER2])),
        _case("text_around", "prose around a call", f"Checking.\n{call}\nDone."),
        _case("nested_json", "JSON values", _kv([SEARCH_NESTED])),
        _case("typed_values", "typed values", _kv([TYPED])),
        _case("unicode", "non-ASCII and escapes", _kv([UNICODE])),
        _case("empty_arguments", "no arguments", _kv([EMPTY])),
        _case("bare_values", "values that are not JSON stay text", "<<get_weather\ncity = Paris \nunit=celsius\nnoise line\n>>"),
        _case("think_alternatives", "either opener literal", "<think>a</reasoning><reasoning>b</reasoning>" + call),
        _case("truncated_mid_call", "stopped inside the call", call[:-4], "length"),
        _case("truncated_mid_marker", "stopped inside the opener", "Text <<get_", "length"),
        _case("lookalike", "an opener pattern without a newline", "compare a <<b and c>> d"),
    ]
    return _spec("rtpl_kv", KV_TEMPLATE, [], cases, "<think>", "user: hi\n<|assistant|>",
                 "response_template with kv-lines arguments whose values parse as JSON")


def _sink(calls):
    return "<tool_call>" + _j([{"name": n, "arguments": a} for n, a in calls]) + "</tool_call>"


def rtpl_sink():
    call = _sink([WEATHER])
    cases = [
        _case("answer_only", "an answer region", "<answer>The answer.</answer>"),
        _case("text_outside", "text outside every region", "Hello <answer>The answer.</answer> bye"),
        _case("think_answer", "reasoning then an answer", "<think>plan</think><answer>Yes.</answer>"),
        _case("call_list", "one call in a list", call),
        _case("parallel_list", "two calls in one list", _sink([WEATHER, WEATHER2])),
        _case("text_around_call", "text outside regions around a call", f"Checking. {call} Done."),
        _case("answer_and_call", "an answer then a call", f"<answer>One moment.</answer>{call}"),
        _case("unclosed_answer", "an answer cut off", "<answer>The ans", "length"),
        _case("empty_list", "an empty call list", "<tool_call>[]</tool_call>"),
        _case("not_objects", "a list of strings", '<tool_call>["get_weather"]</tool_call>'),
        _case("typed_list", "typed values in a list", _sink([TYPED])),
        _case("plain_text", "no region at all", "Just text."),
    ]
    return _spec("rtpl_sink", SINK_TEMPLATE, [], cases, "<think>", "user: hi\n<|assistant|>",
                 "response_template whose content field has an opener: no sink for other text; transform_each")


def rtpl_closer():
    a, f = "<|channel|>analysis<|message|>", "<|channel|>final<|message|>"
    call = '<|channel|>commentary to=get_weather<|message|>{"city": "Paris"}<|call|>'
    cases = [
        _case("analysis_cut_at_end", "reasoning ended by <|end|>, the stop token cut the rest", f"{a}plan<|end|>"),
        _case("analysis_cut_in_anchor", "the output stops inside the anchor", f"{a}plan<|end|><|start|>assi"),
        _case("analysis_then_final", "reasoning then the answer", f"{a}plan<|end|><|start|>assistant{f}Hi<|return|>"),
        _case("analysis_then_call", "reasoning then a call", f"{a}plan<|end|><|start|>assistant{call}"),
        _case("final_only", "the answer alone", f"{f}Hi<|end|>"),
        _case("analysis_cut_in_end", "the output stops inside <|end|>", f"{a}plan<|en", "length"),
        _case("unopened_end", "<|end|> without a region", "Hello<|end|>"),
        _case("prompt_in_analysis", "the prompt opened reasoning", "plan<|end|>", prompt_in_reasoning=True),
    ]
    return _spec("rtpl_closer", CLOSER_TEMPLATE, [], cases, "<|channel|>analysis<|message|>",
                 "user: hi<|end|><|start|>assistant", "response_template whose reasoning closer ends with the start anchor")


def specs():
    return [rtpl_qwen(), rtpl_xml(), rtpl_kv(), rtpl_sink(), rtpl_closer()]
