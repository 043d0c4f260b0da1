"""Reference `kimi_k2`: `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>`.
The header is kept as the call id."""

from __future__ import annotations

import re

from sidecar.reference.parse.jsonish import parse_value
from sidecar.reference.parse.pipeline import CONTENT, FRAMING, TOOL, WS, Buf, Markers, Out, Stage, find_marker

MARKERS = (
    "<|tool_calls_section_begin|>", "<|tool_call_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>",
    "<|tool_call_end|>", "<|tool_calls_section_end|>", "<|tool_call_section_end|>",
)


def name_of(header: str) -> str:
    m = re.fullmatch(r"(.*):([0-9]+)", header, re.S)
    if m:
        left = m.group(1)
        return left[len("functions.") :] if left.startswith("functions.") else left
    if header.startswith("functions."):
        return header[len("functions.") :]
    rest = header[len("functions") :] if header.startswith("functions") and len(header) > len("functions") else header
    trimmed = rest.rstrip("0123456789")
    return trimmed or rest


class Kimi(Stage):
    def __init__(self, markers: Markers) -> None:
        p = [markers.pattern(m) for m in MARKERS]
        self.section_begin = p[0:2]
        self.call_begin, self.arg_begin, self.call_end = p[2], p[3], p[4]
        self.section_end = p[5:7]
        self.state = "content"

    def feed(self, buf: Buf, out: Out, end: bool) -> None:
        while True:
            s = buf.text
            if self.state == "content":
                pats = [*self.section_begin, self.call_begin]
                which = out.route_until(buf, pats, CONTENT, end)
                if which is None:
                    return
                out.route(buf, len(pats[which]), FRAMING)
                self.state = "header" if which == 2 else "section"
                continue
            if self.state == "section":
                pats = [self.call_begin, *self.section_end, self.call_end]
                which = out.route_until(buf, pats, FRAMING, end)
                if which is None:
                    return
                out.route(buf, len(pats[which]), FRAMING)
                self.state = {0: "header", 1: "content", 2: "content"}.get(which, "section")
                continue
            # header
            kind, at, which = find_marker(s, [self.arg_begin, self.call_end, self.call_begin, *self.section_end])
            if kind != "found":
                if end:
                    out.route_all(buf, FRAMING)
                return
            if which != 0:
                out.route(buf, at, FRAMING)
                self.state = "section"
                continue
            header = s[:at].strip(WS)
            if not header:
                out.route(buf, at + len(self.arg_begin), FRAMING)
                self.state = "section"
                continue
            start = at + len(self.arg_begin)
            value = parse_value(s, start)
            if value.status == "cut" and not end:
                return
            out.add_call(name_of(header), value.text if value.text is not None else "{}", header)
            out.route(buf, value.end if value.status != "cut" else len(s), TOOL)
            self.state = "section"
