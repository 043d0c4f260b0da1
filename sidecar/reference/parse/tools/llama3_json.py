"""Reference `llama3_json`: `<|python_tag|>` and/or JSON call objects at the start, `;`-separated.
Untagged JSON is a call only at the start of the output and only with a name and an arguments
member."""

from __future__ import annotations

from sidecar.reference.parse.jsonish import parse_call_object
from sidecar.reference.parse.pipeline import CONTENT, FRAMING, TOOL, Buf, Markers, Out, Stage, after_ws

MARKERS = ("<|python_tag|>",)


class Llama3Json(Stage):
    def __init__(self, markers: Markers) -> None:
        self.tag = markers.pattern(MARKERS[0])
        self.state = "start"
        self.tagged = False
        self.marker = 0  # a tag (and whitespace before it) at the start of the input, not yet routed

    def feed(self, buf: Buf, out: Out, end: bool) -> None:
        while True:
            s = buf.text
            if self.state in ("start", "expect"):
                marker = self.marker if self.state == "expect" else 0
                k = after_ws(s[marker:])
                after = s[marker + k :]
                if after.startswith("{"):
                    self.state = "object"
                elif not after and not end:
                    return
                elif self.state == "start" and after.startswith(self.tag):
                    self.state, self.tagged, self.marker = "expect", True, k + len(self.tag)
                elif self.state == "start" and not end and self.tag.startswith(after):
                    return
                else:
                    out.route(buf, marker, CONTENT)
                    self.state = "content"
                continue
            if self.state == "content":
                if out.route_until(buf, [self.tag], CONTENT, end) is None:
                    return
                self.state, self.tagged, self.marker = "expect", True, len(self.tag)
                continue
            if self.state == "object":
                call = parse_call_object(s, self.marker, ("parameters", "arguments"))
                if call.status == "cut" and not end:
                    return
                if call.name is None or not (self.tagged or call.has_args):
                    out.route(buf, self.marker, CONTENT)
                    self.state = "content"
                    continue
                out.add_call(call.name, call.arguments)
                out.route(buf, self.marker, FRAMING)
                out.route(buf, call.end - self.marker, TOOL)
                self.state = "after"
                continue
            # after a call
            k = after_ws(s)
            after = s[k:]
            if after.startswith(";"):
                out.route(buf, k + 1, FRAMING)
                self.state, self.marker = "expect", 0
            elif not after and not end:
                return
            else:
                self.state = "content"
