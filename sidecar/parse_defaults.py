"""Which tool-call and reasoning parsers a model uses when a request names none.

Configuration wins (`--model NAME=DIR,tool_parser=...,reasoning_parser=...`); otherwise the parsers
are recognised from the model's chat templates and special tokens: each format has a marker that
only its templates write (`<minimax:tool_call>`, `<｜DSML｜`, `<arg_key>`, harmony's `<|channel|>`
token...). The rules are ordered from the most specific marker to the most generic (`<tool_call>`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping


@dataclass(frozen=True, slots=True)
class ParseDefaults:
    """The parsers a model's ParseStream requests get when they name none ("" = none)."""

    tool_parser: str = ""
    reasoning_parser: str = ""


def detect_parsers(templates: list[str], added_tokens: set[str]) -> tuple[str, str]:
    """(tool parser, reasoning parser) recognised from template sources and added-token texts;
    "" where nothing is recognised."""
    t = "\n".join(templates)
    thinks = "<think>" in t or "</think>" in t
    if "<|channel|>" in added_tokens and "<|message|>" in added_tokens:
        return "openai", "openai"
    if "<minimax:tool_call>" in t:
        return "minimax_m2", "minimax_m2"
    if "｜DSML｜" in t:
        return "deepseek_v32", "deepseek_v3"
    if "<｜tool▁calls▁begin｜>" in t:
        tool = "deepseek_v3" if "```json" in t else "deepseek_v31"
        if "thinking" in t.replace("</think>", "").replace("<think>", ""):
            return tool, "deepseek_v3"
        return tool, "deepseek_r1" if thinks else ""
    if "<|tool_calls_section_begin|>" in t:
        return "kimi_k2", "kimi_k2" if thinks else ""
    if "<arg_key>" in t:
        return ("glm45" if "\n<arg_key>" in t else "glm47"), "glm45"
    if "<function=" in t and "<parameter=" in t:
        return "qwen3_coder", "qwen3" if thinks else ""
    if "<tool_call>" in t:
        return "hermes", "qwen3" if thinks else ""
    if "[TOOL_CALLS]" in t or "[TOOL_CALLS]" in added_tokens:
        return "mistral", "mistral" if "[THINK]" in t or "[THINK]" in added_tokens else ""
    if "<|python_tag|>" in added_tokens or "ipython" in t:
        return "llama3_json", ""
    return "", ""


def parse_defaults(templates: Iterable[str], added_tokens: Iterable[str], options: Mapping[str, str]) -> ParseDefaults:
    """A model's defaults: configured (`tool_parser=`, `reasoning_parser=` options), else recognised
    from its template sources and added-token texts."""
    tool, reasoning = detect_parsers(list(templates), set(added_tokens))
    return ParseDefaults(options.get("tool_parser", tool), options.get("reasoning_parser", reasoning))
