"""Reference `mistral`: `[TOOL_CALLS]` then a JSON array of call objects, or `name{...}`,
`name[ARGS]{...}`, `name[CALL_ID]id[ARGS]{...}`."""

from __future__ import annotations

import re

from sidecar.reference.parse.jsonish import parse_call_object, parse_value
from sidecar.reference.parse.pipeline import CONTENT, FRAMING, TOOL, WS, Buf, Markers, Out, Stage, after_ws
from sidecar.reference.parse.tools.xmlish import could_become

MARKERS = ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]")
_NAME = re.compile(r"[A-Za-z0-9_.\-]*")
_ID = re.compile(r"[A-Za-z0-9]*")


class Mistral(Stage):
    def __init__(self, markers: Markers) -> None:
        self.tag, self.args_tag, self.id_tag = (markers.pattern(m) for m in MARKERS)
        self.state = "content"
        self.first = True

    def _header(self, s: str, end: bool):  # noqa: ANN202
        name = _NAME.match(s).group()
        if not name:
            return "no"
        pos = len(name)
        call_id = None
        if s[pos:].startswith(self.id_tag):
            pos += len(self.id_tag)
            call_id = _ID.match(s, pos).group()
            if pos + len(call_id) == len(s):
                return "no" if end else None
            pos += len(call_id)
        if s[pos:].startswith(self.args_tag):
            pos += len(self.args_tag)
        rest = s[pos:]
        after = rest[after_ws(rest):]
        if after.startswith("{"):
            return name, call_id, pos + after_ws(rest)
        if not after and not end:
            return None
        if after and not end and (could_become(rest, self.id_tag) or could_become(rest, self.args_tag)):
            return None
        return "no"

    def feed(self, buf: Buf, out: Out, end: bool) -> None:
        while True:
            s = buf.text
            if self.state == "content":
                if out.route_until(buf, [self.tag], CONTENT, end) is None:
                    return
                self.state = "tag"
                continue
            if self.state == "tag":
                m = len(self.tag)
                k = after_ws(s[m:])
                after = s[m + k :]
                if after.startswith("["):
                    inner = after[1:].lstrip(WS)
                    if inner[:1] in ("{", "]") and inner:
                        out.route(buf, m + k + 1, FRAMING)
                        self.state, self.first = "item", True
                    elif not inner and not end:
                        return
                    else:
                        out.route(buf, m, CONTENT)
                        self.state = "content"
                elif _NAME.match(after).group():
                    header = self._header(after, end)
                    if header is None:
                        return
                    if header == "no":
                        out.route(buf, m, CONTENT)
                        self.state = "content"
                        continue
                    name, call_id, length = header
                    value = parse_value(after, length)
                    if value.status == "cut" and not end:
                        return
                    out.add_call(name, value.text if value.text is not None else "{}", call_id)
                    out.route(buf, m, FRAMING)
                    out.route(buf, k + (value.end if value.status != "cut" else len(after)), TOOL)
                    self.state = "content"
                elif not after and not end:
                    return
                else:
                    out.route(buf, m, CONTENT)
                    self.state = "content"
                continue
            if self.state == "item":
                k = after_ws(s)
                after = s[k:]
                if after.startswith("{"):
                    call = parse_call_object(s, 0, ("arguments", "parameters"))
                    if call.status == "cut" and not end:
                        return
                    if call.name is None:
                        self.state = "content"
                        continue
                    out.add_call(call.name, call.arguments)
                    out.route(buf, call.end, TOOL)
                    self.state = "next" if call.status == "done" else "content"
                elif self.first and after.startswith("]"):
                    out.route(buf, k + 1, FRAMING)
                    self.state = "content"
                elif not after and not end:
                    return
                else:
                    self.state = "content"
                continue
            # after an array element
            k = after_ws(s)
            after = s[k:]
            if after.startswith(","):
                out.route(buf, k + 1, FRAMING)
                self.state, self.first = "item", False
            elif after.startswith("]"):
                out.route(buf, k + 1, FRAMING)
                self.state = "content"
            elif not after and not end:
                return
            else:
                self.state = "content"
