"""Reference DeepSeek-V3 / V3.1 tool calls (see the native `tools/deepseek.rs` for the layouts)."""

from __future__ import annotations

from sidecar.reference.parse.jsonish import parse_value
from sidecar.reference.parse.pipeline import (
    CONTENT, FRAMING, TOOL, WS, Buf, Markers, Out, Stage, after_ws, find_marker, is_sentinel,
)
from sidecar.reference.parse.tools.xmlish import could_become

MARKERS = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>")


class DeepSeek(Stage):
    def __init__(self, markers: Markers, v31: bool) -> None:
        self.calls_begin, self.call_begin, self.sep, self.call_end, self.calls_end = (markers.pattern(m) for m in MARKERS)
        self.v31 = v31
        self.state = "content"

    def _header(self, s: str, end: bool):  # noqa: ANN202
        """(name or None, consumed) or None to wait."""
        if self.v31:
            kind, at, which = find_marker(s, [self.sep, self.call_end, self.call_begin, self.calls_end])
            if kind == "found":
                return (s[:at].strip(WS), at + len(self.sep)) if which == 0 else (None, at)
            return (None, len(s)) if end else None
        # The separator counts only before the call's other markers (a header cut short is malformed).
        kind, sep_at, which = find_marker(s, [self.sep, self.call_end, self.call_begin, self.calls_end])
        if kind != "found":
            return (None, len(s)) if end else None
        if which != 0:
            return None, sep_at
        rest = s[sep_at + len(self.sep) :]
        for i, ch in enumerate(rest):
            if ch in "\n`{" or is_sentinel(ch):
                return rest[:i].strip(WS), sep_at + len(self.sep) + i + (1 if ch == "\n" else 0)
        return (rest.strip(WS), len(s)) if end else None

    def _tail(self, buf: Buf, out: Out, end: bool) -> bool:
        """Framing up to the call's end; False = wait."""
        which = out.route_until(buf, [self.call_end, self.call_begin, self.calls_end], FRAMING, end)
        if which is None:
            return False
        if which == 0:
            out.route(buf, len(self.call_end), FRAMING)
            self.state = "section"
        elif which == 1:
            self.state = "section"
        else:
            out.route(buf, len(self.calls_end), FRAMING)
            self.state = "content"
        return True

    def feed(self, buf: Buf, out: Out, end: bool) -> None:
        while True:
            s = buf.text
            if self.state == "content":
                pats = [self.calls_begin, self.call_begin]
                which = out.route_until(buf, pats, CONTENT, end)
                if which is None:
                    return
                out.route(buf, len(pats[which]), FRAMING)
                self.state = "section" if which == 0 else "call"
                continue
            if self.state == "section":
                pats = [self.call_begin, self.calls_end]
                which = out.route_until(buf, pats, FRAMING, end)
                if which is None:
                    return
                out.route(buf, len(pats[which]), FRAMING)
                self.state = "call" if which == 0 else "content"
                continue
            if self.state == "call":
                header = self._header(s, end)
                if header is None:
                    return
                name, consumed = header
                if not name:
                    out.route(buf, consumed, FRAMING)
                    self.state = "tail"
                    continue
                start = consumed
                if not self.v31:
                    k = after_ws(s, start)
                    after = s[k:]
                    if not end and could_become(after, "```json"):
                        return
                    fence = next((len(f) for f in ("```json", "```") if after.startswith(f)), 0)
                    j = k + after_ws(after, fence)
                    if not s[j:].startswith("{"):
                        if not s[j:] and not end:
                            return
                        out.add_call(name, "{}")
                        out.route(buf, consumed, TOOL)
                        self.state = "tail"
                        continue
                    start = j
                value = parse_value(s, start)
                if value.status == "cut" and not end:
                    return
                out.add_call(name, value.text if value.text is not None else "{}")
                out.route(buf, value.end if value.status != "cut" else len(s), TOOL)
                self.state = "tail"
                continue
            if not self._tail(buf, out, end):
                return
