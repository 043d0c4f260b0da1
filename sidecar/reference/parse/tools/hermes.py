"""Reference `hermes`: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`."""

from __future__ import annotations

from sidecar.reference.parse.jsonish import parse_call_object
from sidecar.reference.parse.pipeline import CONTENT, FRAMING, TOOL, Buf, Markers, Out, Stage

MARKERS = ("<tool_call>", "</tool_call>")


class Hermes(Stage):
    def __init__(self, markers: Markers) -> None:
        self.open = markers.pattern(MARKERS[0])
        self.close = markers.pattern(MARKERS[1])
        self.state = "content"

    def feed(self, buf: Buf, out: Out, end: bool) -> None:
        while True:
            if self.state == "content":
                if out.route_until(buf, [self.open], CONTENT, end) is None:
                    return
                self.state = "call"
                continue
            if self.state == "call":
                call = parse_call_object(buf.text, len(self.open), ("arguments", "parameters"))
                if call.status == "cut" and not end:
                    return
                if call.name is None:
                    out.route(buf, len(self.open), CONTENT)
                    self.state = "content"
                    continue
                out.add_call(call.name, call.arguments)
                out.route(buf, len(self.open), FRAMING)
                out.route(buf, call.end - len(self.open), TOOL)
                self.state = "after"
                continue
            # after a call: framing up to `</tool_call>`, or up to the next `<tool_call>`
            index = out.route_until(buf, [self.close, self.open], FRAMING, end)
            if index is None:
                return
            if index == 0:
                out.route(buf, len(self.close), FRAMING)
            self.state = "content"
