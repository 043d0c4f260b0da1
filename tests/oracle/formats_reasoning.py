"""Reasoning formats: outputs written per marker family and the names that parse them."""
import json

TOOL_JSON = json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})


def _case(cid, desc, text, finish="stop", **kw):
    return {"id": cid, "description": desc, "text": text, "finish_reason": finish, **kw}


def think_cases(start, end, tool_open="<tool_call>", tool_close="</tool_call>"):
    s, e = start, end
    call = f"{tool_open}\n{TOOL_JSON}\n{tool_close}"
    return [
        _case("with_start", "start and end marker", f"{s}\nI should answer.\n{e}\n\nThe answer."),
        _case("without_start", "end marker only (template opened the block)", f"I should answer.\n{e}\n\nThe answer."),
        _case("no_markers", "no markers at all", "Just the answer."),
        _case("truncated_in_reasoning", "generation stopped inside reasoning", f"{s}\nStill thinking about", "length"),
        _case("truncated_no_start", "no markers, stopped early", "Still thinking about", "length"),
        _case("truncated_mid_end_marker", "stopped inside the end marker", f"{s}\nThinking.{e[: max(1, len(e) - 2)]}", "length"),
        _case("empty_reasoning", "empty block", f"{s}\n\n{e}\n\nThe answer."),
        _case("nested_lookalike", "the start marker written inside reasoning", f"{s}\nI could write {s} again.\n{e}\nThe answer."),
        _case("end_marker_in_answer", "a second end marker after the block", f"{s}\nreason\n{e}\nThe tag {e} closes it."),
        _case("end_only_in_prose", "no start marker; the end marker appears in prose", f"The tag {e} closes reasoning."),
        _case("reasoning_only", "a complete block and no answer", f"{s}\nreason only\n{e}"),
        _case("prompt_in_reasoning", "prompt ends inside the block; output closes it",
              f"Let me think.\n{e}\n\nThe answer.", prompt_in_reasoning=True),
        _case("prompt_in_reasoning_truncated", "prompt ends inside the block; output never closes it",
              "Let me think more", "length", prompt_in_reasoning=True),
        _case("prompt_in_reasoning_start_again", "prompt inside the block; output opens it again",
              f"{s}\nreason\n{e}\nThe answer.", prompt_in_reasoning=True),
        _case("thinking_disabled", "enable_thinking=false, plain answer", "The answer.",
              chat_template_kwargs={"enable_thinking": False}),
        _case("thinking_disabled_empty_block", "enable_thinking=false, template wrote an empty block",
              f"{s}\n\n{e}\n\nThe answer.", chat_template_kwargs={"enable_thinking": False}),
        _case("enable_thinking_true", "chat_template_kwargs enable_thinking=true, end marker only",
              f"reason\n{e}\nThe answer.", chat_template_kwargs={"enable_thinking": True}),
        _case("reasoning_effort_high", "reasoning_effort=high, end marker only",
              f"reason\n{e}\nThe answer.", reasoning_effort="high"),
        _case("thinking_kwarg_true", "chat_template_kwargs thinking=true, end marker only",
              f"reason\n{e}\nThe answer.", chat_template_kwargs={"thinking": True}),
        _case("thinking_kwarg_false", "chat_template_kwargs thinking=false",
              "The answer.", chat_template_kwargs={"thinking": False}),
        _case("tool_call_inside_reasoning", "a tool-call block inside reasoning",
              f"{s}\nplan: {call}\n{e}\n\nDone."),
        _case("tool_call_without_end", "reasoning then a tool call, no end marker",
              f"{s}\nplan\n{call}"),
        _case("unicode", "non-ASCII reasoning and answer", f"{s}\n思考 😀 é\n{e}\n答案 ✓"),
    ]


def think():
    return {
        "format": "think", "kind": "reasoning",
        "parsers": {
            "vllm": ["deepseek_r1", "step5", "qwen3", "glm45", "glm47", "kimi_k2", "minimax_m2",
                     "minimax_m2_append_think", "deepseek_v3", "holo2", "step3",
                     "nemotron_v3", "mimo", "step3p5", "ling3", "minicpmv", "ernie45",
                     "hy_v3", "hy_v4", "deepseek_v4", "deepseek_v41", "granite_thinking_parser", "poolside_v1"],
            "sglang": ["deepseek-r1", "qwen3", "qwen3-thinking", "glm45", "kimi_k2", "minimax",
                       "minimax-append-think", "deepseek-v3", "step3", "step3p5", "gigachat35",
                       "nanbeige", "dots", "interns1", "nemotron_3", "mimo", "ling3", "hunyuan",
                       "deepseek-v4", "deepseek-v41", "granite_thinking_parser", "iquest_q1", "poolside_v1"],
        },
        "special_tokens": ["<think>", "</think>", "<tool_call>", "</tool_call>",
                           "<|tool_calls_section_begin|>", "<|im_end|>", "<assistant>", "<response>", "</response>"],
        "note": "<assistant> is in the vocabulary because poolside_v1 requires it (it never appears in the outputs)",
        "reasoning_start": "<think>\n",
        "cases": think_cases("<think>", "</think>"),
    }


def mistral_think():
    return {
        "format": "mistral_think", "kind": "reasoning",
        "parsers": {"vllm": ["mistral"], "sglang": ["mistral"]},
        "special_tokens": ["[THINK]", "[/THINK]", "[TOOL_CALLS]", "[ARGS]", "</s>"],
        "reasoning_start": "[THINK]",
        "cases": think_cases("[THINK]", "[/THINK]", "[TOOL_CALLS]get_weather[ARGS]", ""),
    }


def family(fmt, start, end, parsers, special, tool_open="", tool_close="", extra=()):
    return {"format": fmt, "kind": "reasoning", "parsers": parsers,
            "special_tokens": special, "reasoning_start": start,
            "cases": think_cases(start, end, tool_open, tool_close) + list(extra)}


def hunyuan_answer():
    s, e = "<think>\n", "\n</think>\n<answer>\n"
    cases = [
        _case("think_and_answer", "full think and answer blocks", f"{s}reason{e}The answer.\n</answer>"),
        _case("answer_only", "answer block only", "<answer>\nThe answer.\n</answer>"),
        _case("no_markers", "plain text", "Just the answer."),
        _case("truncated_in_reasoning", "stopped inside reasoning", f"{s}Still thinking", "length"),
        _case("truncated_in_answer", "stopped inside the answer", f"{s}reason{e}The ans", "length"),
        _case("fast_think", "empty think block (fast mode)", "<think>\n\n</think>\n<answer>\nThe answer.\n</answer>"),
        _case("no_answer_close", "answer never closed", f"{s}reason{e}The answer."),
        _case("unicode", "non-ASCII", f"{s}思考 😀{e}答案 ✓\n</answer>"),
    ]
    cases += think_cases("<think>", "</think>")[:10]
    return {"format": "hunyuan_think", "kind": "reasoning",
            "parsers": {"vllm": ["hunyuan_a13b"], "sglang": []},
            "special_tokens": ["<tool_calls>", "</tool_calls>"], "reasoning_start": "<think>\n",
            "note": "hunyuan_a13b matches hard-coded Hunyuan token ids in streaming; with the per-character tokenizer those never occur",
            "cases": _unique(cases)}


def _unique(cases):
    seen, out = set(), []
    for c in cases:
        if c["id"] in seen:
            c = {**c, "id": "think_" + c["id"]}
        seen.add(c["id"])
        out.append(c)
    return out


def specs():
    mm = [_case("thinking_mode_enabled", "thinking_mode=enabled: template opened <mm:think>",
                "reason</mm:think>The answer.", chat_template_kwargs={"thinking_mode": "enabled"})]
    ifm = [_case("effort_fast", "reasoning_effort fast selects <ifm|think_fast>", "<ifm|think_fast>quick</ifm|think_fast>The answer.",
                 reasoning_effort="low")]
    hy = [_case("unsuffixed_markers", "unsuffixed <think> tags (not this checkpoint's tokens)", "<think>\nreason\n</think>\nThe answer."),
          _case("no_think_effort", "reasoning_effort=no_think", "The answer.", chat_template_kwargs={"reasoning_effort": "no_think"})]
    return [think(), mistral_think(), hunyuan_answer(),
            family("seed_think", "<seed:think>", "</seed:think>", {"vllm": ["seed_oss"], "sglang": []},
                   ["<seed:think>", "</seed:think>", "<seed:tool_call>", "</seed:tool_call>", "<seed:eos>"], "<seed:tool_call>", "</seed:tool_call>"),
            family("mm_think", "<mm:think>", "</mm:think>", {"vllm": ["minimax_m3"], "sglang": ["minimax-m3"]},
                   ["<mm:think>", "</mm:think>"], extra=mm),
            family("granite_think", "Here is my thought process:", "Here is my response:", {"vllm": ["granite"], "sglang": []}, []),
            family("gemma4_think", "<|channel>thought\n", "<channel|>", {"vllm": ["gemma4"], "sglang": ["gemma4"]},
                   ["<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<turn|>", "<eos>"], "<|tool_call>call:get_weather{city:Paris}", "<tool_call|>"),
            family("cohere_think", "<|START_THINKING|>", "<|END_THINKING|>", {"vllm": ["cohere_command3", "cohere_command4"], "sglang": ["cohere_command4"]},
                   ["<|START_THINKING|>", "<|END_THINKING|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_ACTION|>", "<|END_ACTION|>", "<|START_TEXT|>", "<|END_TEXT|>", "<|CHATBOT_TOKEN|>"],
                   "<|START_ACTION|>", "<|END_ACTION|>"),
            {**family("hy_v4_think", "<think:6124c78e>", "</think:6124c78e>", {"vllm": ["hy_v4"], "sglang": []},
                      ["<think:6124c78e>", "</think:6124c78e>", "<tool_calls:6124c78e>", "</tool_calls:6124c78e>"],
                      "<tool_calls:6124c78e>", "</tool_calls:6124c78e>", extra=hy), "extend_model": "qwen3"},
            family("ifm_think", "<ifm|think>", "</ifm|think>", {"vllm": ["k2_horizon"], "sglang": ["k2_horizon"]},
                   ["<ifm|think>", "</ifm|think>", "<ifm|think_fast>", "</ifm|think_fast>", "<ifm|think_faster>", "</ifm|think_faster>", "<ifm|tool_calls>", "</ifm|tool_calls>"],
                   "<ifm|tool_calls>", "</ifm|tool_calls>", extra=ifm),
            family("kimi_k3_think", "<|open|>think<|sep|>", "<|close|>think<|sep|>", {"vllm": ["kimi_k3"], "sglang": ["kimi_k3"]},
                   ["<|open|>", "<|close|>", "<|sep|>", "<|im_end|>"], "<|open|>tools<|sep|>", "<|close|>tools<|sep|>"),
            family("inkling_think", "<|message_model|><|content_thinking|>", "<|end_message|>", {"vllm": ["inkling"], "sglang": ["inkling"]},
                   ["<|message_model|>", "<|content_thinking|>", "<|content_text|>", "<|end_message|>", "<|content_invoke_tool_json|>", "<|content_model_end_sampling|>"],
                   "<|message_model|><|content_invoke_tool_json|>", "<|end_message|>"),
            family("plamo3_think", "<|plamo:begin_think:plamo|>", "<|plamo:end_think:plamo|>", {"vllm": ["plamo3"], "sglang": []},
                   ["<|plamo:begin_think:plamo|>", "<|plamo:end_think:plamo|>", "<|plamo:tag|>", "<|plamo:begin_tool_requests:plamo|>"]),
            family("muse_think", "<|start|>assistant to=self<|message|>", "<|eom|>", {"vllm": ["muse", "musespark1x", "muse_glimmer"], "sglang": ["muse"]},
                   ["<|start|>", "<|message|>", "<|eom|>", "<|eot|>"]),
            {**family("olmo3_think", "<think>", "</think>", {"vllm": ["olmo3"], "sglang": []},
                      ["\u0120</", "</", "think"], "<function_calls>", "</function_calls>"),
             "note": "OLMo 3 writes <think> as text: '</', 'think' and the byte-level '\u0120</' are tokens "
                     "because the parser looks them up at construction"},
            family("kimi_legacy_think", "◁think▷", "◁/think▷", {"vllm": [], "sglang": ["kimi"]}, []),
            family("apertus_think", "<|inner_prefix|>", "<|inner_suffix|>", {"vllm": [], "sglang": ["apertus2509"]},
                   ["<|inner_prefix|>", "<|inner_suffix|>", "<|tools_prefix|>", "<|tools_suffix|>"], "<|tools_prefix|>", "<|tools_suffix|>"),
            ]
