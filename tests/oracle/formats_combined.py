"""Outputs with both reasoning and tool calls, run with a tool-call parser and a reasoning parser
together (the configuration models with thinking are served with)."""
from cases_common import TOOLS, UNICODE, WEATHER, WEATHER2
from formats_tool2 import hy_render, hy_tags
from formats_tool import DS_BEGIN, DS_CALL, DS_CALL_END, DS_END, DS_SEP, DS_SPECIAL, K2_ARG, K2_CALL, K2_END, K2_SEC, K2_SEC_END, _case, _j, _raw


def combined_cases(s, e, render, tool_start):
    call = render([WEATHER])
    return [
        _case("reasoning_then_call", "reasoning block then a call", f"{s}\nplan\n{e}\n\n{call}"),
        _case("reasoning_text_call", "reasoning, prose, then a call", f"{s}plan{e}Sure, checking.\n{call}"),
        _case("call_inside_reasoning", "a call written inside reasoning, none after", f"{s}\nmaybe {call}\n{e}\n\nNo call needed."),
        _case("without_start_then_call", "end marker only, then a call", f"plan\n{e}\n\n{call}"),
        _case("implicit_end_by_call", "reasoning never closed, a call follows", f"{s}\nplan\n{call}"),
        _case("prompt_in_reasoning_then_call", "prompt opened reasoning; output closes it and calls",
              f"plan{e}{call}", prompt_in_reasoning=True),
        _case("truncated_in_reasoning", "stopped inside reasoning", f"{s}\nplan", "length"),
        _case("truncated_in_call", "stopped inside the call after reasoning", f"{s}plan{e}" + call[: int(len(call) * 0.7)], "length"),
        _case("parallel_after_reasoning", "two calls after reasoning", f"{s}plan{e}" + render([WEATHER, WEATHER2])),
        _case("text_only_after_reasoning", "reasoning then an answer, no call", f"{s}plan{e}The answer."),
        _case("thinking_disabled_call", "enable_thinking=false and a call", call, chat_template_kwargs={"enable_thinking": False}),
        _case("thinking_true_call", "thinking=true, end marker only, then a call", f"plan{e}{call}", chat_template_kwargs={"thinking": True}),
        _case("marker_lookalike_in_reasoning", "the tool-call marker mentioned in reasoning",
              f"{s}I could write {tool_start} later.{e}The answer."),
        _case("empty_reasoning_then_call", "empty reasoning block then a call", f"{s}\n\n{e}\n\n{call}"),
        _case("unicode", "non-ASCII reasoning and arguments", f"{s}思考 😀{e}" + render([UNICODE])),
    ]


def _spec(fmt, parsers, special, cases, **extra):
    spec = {"format": fmt, "kind": "tool", "parsers": parsers, "special_tokens": special, "tools": TOOLS, "cases": cases}
    spec.update(extra)
    return spec


def _hermes(calls):
    return "\n".join(f"<tool_call>\n{_j({'name': n, 'arguments': a})}\n</tool_call>" for n, a in calls)


def _qwen3_xml(open_tag, close_tag):
    def render(calls):
        return "\n".join(f"{open_tag}\n<function={n}>\n" + "".join(f"<parameter={k}>\n{_raw(v)}\n</parameter>\n" for k, v in a.items()) + f"</function>\n{close_tag}" for n, a in calls)
    return render


def _glm(calls):
    return "".join(f"<tool_call>{n}" + "".join(f"<arg_key>{k}</arg_key><arg_value>{_raw(v)}</arg_value>" for k, v in a.items()) + "</tool_call>" for n, a in calls)


def _kimi(calls):
    return K2_SEC + "".join(f"{K2_CALL}functions.{n}:{i}{K2_ARG}{_j(a)}{K2_END}" for i, (n, a) in enumerate(calls)) + K2_SEC_END


def _minimax(calls):
    inv = "".join(f'<invoke name="{n}">\n' + "".join(f'<parameter name="{k}">{_raw(v)}</parameter>\n' for k, v in a.items()) + "</invoke>\n" for n, a in calls)
    return f"<minimax:tool_call>\n{inv}</minimax:tool_call>"


def _ds31(calls):
    return DS_BEGIN + "".join(f"{DS_CALL}{n}{DS_SEP}{_j(a)}{DS_CALL_END}" for n, a in calls) + DS_END


def _ds3(calls):
    return DS_BEGIN + "\n".join(f"{DS_CALL}function{DS_SEP}{n}\n```json\n{_j(a)}\n```{DS_CALL_END}" for n, a in calls) + DS_END


def _dsml(calls):
    inv = "".join(f'<｜DSML｜invoke name="{n}">\n' + "".join(f'<｜DSML｜parameter name="{k}" string="{"true" if isinstance(v, str) else "false"}">{_raw(v)}</｜DSML｜parameter>\n' for k, v in a.items()) + "</｜DSML｜invoke>\n" for n, a in calls)
    return f"<｜DSML｜tool_calls>\n{inv}</｜DSML｜tool_calls>"


def _mistral(calls):
    return "".join(f"[TOOL_CALLS]{n}[ARGS]{_j(a)}" for n, a in calls)


def _gemma(calls):
    q = '<|"|>'

    def val(v):
        if isinstance(v, str):
            return f"{q}{v}{q}"
        if isinstance(v, dict):
            return "{" + ",".join(f"{k}:{val(x)}" for k, x in v.items()) + "}"
        return _j(v)
    return "".join(f"<|tool_call>call:{n}{val(a)}<tool_call|>" for n, a in calls)


THINK = ["<think>", "</think>"]


def specs():
    return [
        _spec("combined_qwen3_hermes", {"vllm": [{"tool": "hermes", "reasoning": "qwen3"}],
                                        "sglang": [{"tool": "qwen25", "reasoning": "qwen3"}, {"tool": "hermes", "reasoning": "qwen3"}]},
              THINK + ["<tool_call>", "</tool_call>", "<|im_end|>"], combined_cases("<think>", "</think>", _hermes, "<tool_call>"), reasoning_start="<think>\n"),
        _spec("combined_qwen3_coder", {"vllm": [{"tool": "qwen3_coder", "reasoning": "qwen3"}], "sglang": [{"tool": "qwen3_coder", "reasoning": "qwen3"}]},
              THINK + ["<tool_call>", "</tool_call>", "<|im_end|>"], combined_cases("<think>", "</think>", _qwen3_xml("<tool_call>", "</tool_call>"), "<tool_call>"), reasoning_start="<think>\n"),
        _spec("combined_glm", {"vllm": [{"tool": "glm47", "reasoning": "glm45"}], "sglang": [{"tool": "glm47", "reasoning": "glm45"}, {"tool": "glm45", "reasoning": "glm45"}]},
              THINK + ["<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "<|observation|>", "<|user|>"],
              combined_cases("<think>", "</think>", _glm, "<tool_call>"), reasoning_start="<think>"),
        _spec("combined_kimi_k2", {"vllm": [{"tool": "kimi_k2", "reasoning": "kimi_k2"}], "sglang": [{"tool": "kimi_k2", "reasoning": "kimi_k2"}]},
              THINK + [K2_SEC, K2_SEC_END, K2_CALL, K2_ARG, K2_END, "<|im_end|>"], combined_cases("<think>", "</think>", _kimi, K2_SEC),
              reasoning_start="<think>", model_type="kimi_k2"),
        _spec("combined_minimax_m2", {"vllm": [{"tool": "minimax_m2", "reasoning": "minimax_m2"}, {"tool": "minimax_m2", "reasoning": "minimax_m2_append_think"}],
                                      "sglang": [{"tool": "minimax-m2", "reasoning": "minimax"}, {"tool": "minimax-m2", "reasoning": "minimax-append-think"}]},
              THINK + ["<minimax:tool_call>", "</minimax:tool_call>"], combined_cases("<think>", "</think>", _minimax, "<minimax:tool_call>"), reasoning_start="<think>\n"),
        _spec("combined_deepseek_v31", {"vllm": [{"tool": "deepseek_v31", "reasoning": "deepseek_v3"}], "sglang": [{"tool": "deepseekv31", "reasoning": "deepseek-v3"}]},
              DS_SPECIAL, combined_cases("<think>", "</think>", _ds31, DS_BEGIN), reasoning_start="<think>"),
        _spec("combined_deepseek_r1", {"vllm": [{"tool": "deepseek_v3", "reasoning": "deepseek_r1"}], "sglang": [{"tool": "deepseekv3", "reasoning": "deepseek-r1"}]},
              DS_SPECIAL, combined_cases("<think>", "</think>", _ds3, DS_BEGIN), reasoning_start="<think>\n"),
        _spec("combined_deepseek_v4", {"vllm": [{"tool": "deepseek_v4", "reasoning": "deepseek_v4"}], "sglang": [{"tool": "deepseekv4", "reasoning": "deepseek-v4"}]},
              DS_SPECIAL, combined_cases("<think>", "</think>", _dsml, "<｜DSML｜tool_calls>"), reasoning_start="<think>"),
        _spec("combined_mistral", {"vllm": [{"tool": "mistral", "reasoning": "mistral"}], "sglang": [{"tool": "mistral", "reasoning": "mistral"}]},
              ["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]", "</s>"], combined_cases("[THINK]", "[/THINK]", _mistral, "[TOOL_CALLS]"), reasoning_start="[THINK]"),
        _spec("combined_seed_oss", {"vllm": [{"tool": "seed_oss", "reasoning": "seed_oss"}], "sglang": []},
              ["<seed:think>", "</seed:think>", "<seed:tool_call>", "</seed:tool_call>", "<seed:eos>"],
              combined_cases("<seed:think>", "</seed:think>", _qwen3_xml("<seed:tool_call>", "</seed:tool_call>"), "<seed:tool_call>"), reasoning_start="<seed:think>"),
        _spec("combined_hy_v4", {"vllm": [{"tool": "hy_v4", "reasoning": "hy_v4"}], "sglang": []},
              list(hy_tags().values()), combined_cases(hy_tags()["think"], hy_tags()["think_end"], hy_render, hy_tags()["calls"]),
              reasoning_start=hy_tags()["think"], extend_model="qwen3"),
        _spec("combined_gemma4", {"vllm": [{"tool": "gemma4", "reasoning": "gemma4"}], "sglang": [{"tool": "gemma4", "reasoning": "gemma4"}]},
              ["<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", '<|"|>', "<turn|>"],
              combined_cases("<|channel>thought\n", "<channel|>", _gemma, "<|tool_call>"), reasoning_start="<|channel>thought\n"),
    ]
