"""Reference reasoning split for `<think>`-style formats (see the native `parse/reasoning` docs for
the rules: start state from the prompt, overridable by `enable_thinking` / `thinking`; assumed
reasoning ends at a tool-call start for Qwen3, GLM and Kimi; opened reasoning only at its end
marker)."""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.reference.parse.pipeline import FRAMING, REASONING, VISIBLE, Buf, Markers, Out, Stage


@dataclass(frozen=True)
class ThinkFormat:
    start: tuple[str, ...]
    end: tuple[str, ...]
    implicit_end: tuple[str, ...]
    default_reasoning: bool
    needs_flag: bool

    def markers(self) -> tuple[str, ...]:
        return self.start + self.end + self.implicit_end


_THINK, _UNTHINK = ("<think>",), ("</think>",)
THINK_FORMATS = {
    "deepseek_r1": ThinkFormat(_THINK, _UNTHINK, (), True, False),
    "qwen3": ThinkFormat(_THINK, _UNTHINK, ("<tool_call>",), True, False),
    "glm45": ThinkFormat(_THINK, _UNTHINK, ("<tool_call>",), True, False),
    "kimi_k2": ThinkFormat(_THINK, _UNTHINK, ("<|tool_calls_section_begin|>", "<|tool_call_section_begin|>"), True, False),
    "minimax_m2": ThinkFormat(_THINK, _UNTHINK, (), True, False),
    "mistral": ThinkFormat(("[THINK]",), ("[/THINK]",), (), False, False),
    "deepseek_v3": ThinkFormat(_THINK, _UNTHINK, (), False, True),
}


class ThinkSplit(Stage):
    def __init__(self, fmt: ThinkFormat, markers: Markers) -> None:
        self.start = [markers.pattern(m) for m in fmt.start]
        self.end = [markers.pattern(m) for m in fmt.end]
        self.implicit = [markers.pattern(m) for m in fmt.implicit_end]
        self.reasoning = fmt.default_reasoning
        self.opened = False  # reasoning (or content) was decided by a marker
        self.needs_flag = fmt.needs_flag
        self.enabled = True

    def primed(self, flag: bool | None) -> None:
        opened_by_prompt = self.reasoning and self.opened
        if flag is True and not self.reasoning:
            self.reasoning, self.opened = True, False
        elif flag is False:
            self.reasoning, self.opened = False, False
        if self.needs_flag:
            self.enabled = flag is True or (flag is None and opened_by_prompt)

    def feed(self, buf: Buf, out: Out, end: bool) -> None:
        if not self.enabled:
            out.route_all(buf, VISIBLE)
            return
        while buf.text:
            if self.reasoning:
                patterns = self.end + self.start + ([] if self.opened else self.implicit)
                here = REASONING
            else:
                patterns = list(self.start)
                here = VISIBLE
            index = out.route_until(buf, patterns, here, end)
            if index is None:
                return
            marker = patterns[index]
            if not self.reasoning:
                out.route(buf, len(marker), FRAMING)
                self.reasoning, self.opened = True, True
            elif index < len(self.end):
                out.route(buf, len(marker), FRAMING)
                self.reasoning, self.opened = False, True
            elif index < len(self.end) + len(self.start):
                out.route(buf, len(marker), FRAMING)
                self.opened = True
            else:
                self.reasoning, self.opened = False, False


class Passthrough(Stage):
    def __init__(self, channel: str) -> None:
        self.channel = channel

    def feed(self, buf: Buf, out: Out, end: bool) -> None:
        out.route_all(buf, self.channel)
