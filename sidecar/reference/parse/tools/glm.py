"""Reference `glm45` / `glm47`: `<tool_call>NAME(\\n)?<arg_key>k</arg_key>(\\n)?<arg_value>v</arg_value>...</tool_call>`."""

from __future__ import annotations

from sidecar.reference.parse.pipeline import (
    CONTENT, FRAMING, TOOL, WS, Buf, Markers, Out, Stage, after_ws, find_marker, is_sentinel,
)
from sidecar.reference.parse.schema import Tools
from sidecar.reference.parse.tools.xmlish import could_become, member_json, object_json, read_value, stray_end

MARKERS = ("<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>")


def _name_char(ch: str) -> bool:
    return not (ch in WS or ch in '<>{}"[]' or is_sentinel(ch))


class Glm(Stage):
    def __init__(self, markers: Markers, tools: Tools) -> None:
        self.open, self.close, self.key_open, self.key_close, self.value_open, self.value_close = (
            markers.pattern(m) for m in MARKERS
        )
        self.tools = tools
        self.state = "content"

    def _call(self, s: str, end: bool):  # noqa: ANN202
        """None = wait, "text" = not a call, else (name, members, consumed, closed)."""
        start = after_ws(s, len(self.open))
        j = start
        while j < len(s) and _name_char(s[j]):
            j += 1
        name, after = s[start:j], s[j:]
        ok_end = after.startswith("\n") or after.startswith(self.key_open) or after.startswith(self.close)
        if not (name and ok_end):
            if not end and (not after or (name and (could_become(after, self.key_open) or could_become(after, self.close)))):
                return None
            return "text"
        members: list[str] = []
        i = j
        while True:
            k = after_ws(s, i)
            rest = s[k:]
            if rest.startswith(self.key_open):
                kind, at, _ = find_marker(s[k + len(self.key_open) :], [self.key_close])
                if kind != "found":
                    return None if not end else (name, members, len(s), False)
                key_start = k + len(self.key_open)
                key = s[key_start : key_start + at].strip(WS)
                i = key_start + at + len(self.key_close)
                v = after_ws(s, i)
                if s[v:].startswith(self.value_open):
                    raw, after = read_value(s, v + len(self.value_open), [self.value_close, self.key_open, self.close])
                    if after is None and not end:
                        return None
                    members.append(member_json(key, raw, self.tools.types(name, key), False))
                    if after is None:
                        return name, members, len(s), False
                    i = after
                elif not end and (not s[v:] or could_become(s[v:], self.value_open)):
                    return None
                continue
            if rest.startswith(self.close):
                return name, members, k + len(self.close), True
            if not rest or could_become(rest, self.key_open) or could_become(rest, self.close):
                return (name, members, len(s), False) if end else None
            i = stray_end(s, k)  # stray text: skip to the next tag (even at the end: more may follow)

    def feed(self, buf: Buf, out: Out, end: bool) -> None:
        while True:
            s = buf.text
            if self.state == "content":
                if out.route_until(buf, [self.open], CONTENT, end) is None:
                    return
                self.state = "call"
                continue
            parsed = self._call(s, end)
            if parsed is None:
                return
            if parsed == "text":
                out.route(buf, len(self.open), CONTENT)
                self.state = "content"
                continue
            name, members, consumed, _closed = parsed
            out.add_call(name, object_json(members))
            out.route(buf, len(self.open), FRAMING)
            out.route(buf, consumed - len(self.open), TOOL)
            self.state = "content"
