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
                     "minimax_m2_append_think", "deepseek_v3", "holo2", "step3", "olmo3",
                     "nemotron_v3", "mimo", "step3p5"],
            "sglang": ["deepseek-r1", "qwen3", "qwen3-thinking", "glm45", "kimi_k2", "minimax",
                       "minimax-append-think", "deepseek-v3", "step3", "step3p5", "gigachat35",
                       "nanbeige", "dots", "interns1", "nemotron_3", "mimo"],
        },
        "special_tokens": ["<think>", "</think>", "<tool_call>", "</tool_call>",
                           "<|tool_calls_section_begin|>", "<|im_end|>"],
        "reasoning_start": "<think>\n",
        "cases": think_cases("<think>", "</think>"),
    }


def mistral_think():
    return {
        "format": "mistral_think", "kind": "reasoning",
        "parsers": {"vllm": ["mistral"], "sglang": ["mistral"]},
        "special_tokens": ["[THINK]", "[/THINK]", "[TOOL_CALLS]", "[ARGS]", "</s>"],
        "reasoning_start": "[THINK]",
        "cases": think_cases("[THINK]", "[/THINK]", "[TOOL_CALLS]get_weather[ARGS]", "")
        + [_case("reasoning_effort_high", "reasoning_effort=high, end marker only",
                 "reason[/THINK]The answer.", reasoning_effort="high")],
    }


def specs():
    return [think(), mistral_think()]
