"""Reference `hermes`: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`."""

from __future__ import annotations

from sidecar.reference.parse.jsonish import parse_call_object
from sidecar.reference.parse.pipeline import CONTENT, FRAMING, TOOL, Buf, Markers, Out, find_marker

MARKERS = ("<tool_call>", "</tool_call>")


class Hermes:
    def __init__(self, markers: Markers) -> None:
        self.open = markers.pattern(MARKERS[0])
        self.close = markers.pattern(MARKERS[1])
        self.state = "content"

    def held(self) -> int:
        return 0

    def primed(self, flag: bool | None) -> None:
        pass

    def feed(self, buf: Buf, out: Out, end: bool) -> None:
        while True:
            if self.state == "content":
                kind, at, _ = find_marker(buf.text, [self.open])
                if kind == "found":
                    out.route(buf, at, CONTENT)
                    self.state = "call"
                    continue
                if kind == "partial" and not end:
                    out.route(buf, at, CONTENT)
                    return
                out.route_all(buf, CONTENT)
                return
            if self.state == "call":
                call = parse_call_object(buf.text, len(self.open), ("arguments", "parameters"))
                if call.status == "cut" and not end:
                    return
                if call.name is None:
                    out.route(buf, len(self.open), CONTENT)
                    self.state = "content"
                    continue
                index = out.start_call(call.name)
                out.call_args(index, call.arguments)
                out.route(buf, len(self.open), FRAMING)
                out.route(buf, call.end - len(self.open), TOOL)
                self.state = "after"
                continue
            # after a call: framing up to `</tool_call>`, or up to the next `<tool_call>`
            kind, at, index = find_marker(buf.text, [self.close, self.open])
            if kind == "found":
                out.route(buf, at + (len(self.close) if index == 0 else 0), FRAMING)
                self.state = "content"
                continue
            if kind == "partial" and not end:
                out.route(buf, at, FRAMING)
                return
            out.route_all(buf, FRAMING)
            return
