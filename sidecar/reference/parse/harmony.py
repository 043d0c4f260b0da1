"""Reference gpt-oss Harmony (`openai`): messages `<|start|>ROLE<|channel|>CH[ to=R][ <|constrain|>T]<|message|>BODY<|end|>`,
ended by `<|call|>` or `<|return|>` at the end. `functions.NAME` recipients are tool calls (any
channel), other recipients and `analysis` are reasoning, everything else is content."""

from __future__ import annotations

import re

from sidecar.reference.parse.jsonish import parse_value
from sidecar.reference.parse.pipeline import (
    CONTENT, FRAMING, REASONING, TOOL, Buf, Markers, Out, Stage, after_ws, find_marker,
)

MARKERS = ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>", "<|constrain|>")


def _words(s: str) -> list[str]:
    return [w for w in re.split(r"[ \t\n\r\x0c\ufdd0-\ufdef]", s)]


class Harmony(Stage):
    def __init__(self, markers: Markers) -> None:
        self.start, self.channel, self.message, self.end, self.call, self.ret, _ = (markers.pattern(m) for m in MARKERS)
        self.state = "header"
        self.route_to: str | None = None

    def _route(self, header: str):  # noqa: ANN202
        if len(self.channel) > 1:  # markers matched as text separate words too
            header = header.replace(self.channel, f" {self.channel} ").replace("<|constrain|>", " ")
        recipient = next((w[3:] for w in _words(header) if w.startswith("to=")), None) or None
        _, sep, after = header.partition(self.channel)
        channel = next((w for w in _words(after) if w), "") if sep else ""
        if recipient is not None:
            if recipient.startswith("functions.") and len(recipient) > len("functions."):
                return ("call", recipient[len("functions.") :])
            return REASONING
        return REASONING if channel == "analysis" else CONTENT

    def _ends(self) -> list[str]:
        return [self.end, self.call, self.ret, self.start, self.channel]

    def _after_body(self, buf: Buf, out: Out, which: int) -> None:
        if which <= 2:
            out.route(buf, len(self._ends()[which]), FRAMING)
            self.state = "between"
        else:
            self.state = "header"

    def feed(self, buf: Buf, out: Out, end: bool) -> None:
        while True:
            s = buf.text
            if self.state == "header":
                pats = [self.message, self.end, self.call, self.ret]
                kind, at, which = find_marker(s, pats)
                if kind != "found":
                    if end:
                        out.route_all(buf, FRAMING)
                    return
                if which != 0:
                    out.route(buf, at + len(pats[which]), FRAMING)
                    self.state = "between"
                    continue
                header = s[:at].rpartition(self.start)[2]
                route = self._route(header)
                out.route(buf, at + len(self.message), FRAMING)
                self.state, self.route_to = ("call", route[1]) if isinstance(route, tuple) else ("text", route)
                continue
            if self.state == "text":
                which = out.route_until(buf, self._ends(), self.route_to, end)
                if which is None:
                    return
                self._after_body(buf, out, which)
                continue
            if self.state == "call":
                k = after_ws(s)
                if k == len(s) and not end:
                    return
                if not s[k:].startswith("{"):
                    out.add_call(self.route_to, "{}")
                    self.state = "tail"
                    continue
                value = parse_value(s, k)
                if value.status == "cut" and not end:
                    return
                out.add_call(self.route_to, value.text if value.text is not None else "{}")
                out.route(buf, value.end if value.status != "cut" else len(s), TOOL)
                self.state = "tail"
                continue
            if self.state == "tail":
                which = out.route_until(buf, self._ends(), FRAMING, end)
                if which is None:
                    return
                self._after_body(buf, out, which)
                continue
            # between messages
            which = out.route_until(buf, [self.start, self.channel], FRAMING, end)
            if which is None:
                return
            if which == 0:
                out.route(buf, len(self.start), FRAMING)
            self.state = "header"
