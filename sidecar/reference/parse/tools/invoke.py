"""Reference `invoke`-element calls: MiniMax-M2 (`<minimax:tool_call><invoke name="f"><parameter
name="k">v</parameter></invoke></minimax:tool_call>`) and DeepSeek-V3.2 DSML (same shape, `｜DSML｜`
tags, a `string="true|false"` attribute per parameter)."""

from __future__ import annotations

from dataclasses import dataclass

from sidecar.reference.parse.pipeline import CONTENT, FRAMING, TOOL, Buf, Markers, Out, Stage, after_ws, is_sentinel
from sidecar.reference.parse.schema import JSON_TEXT, Tools
from sidecar.reference.parse.tools.xmlish import could_become, member_json, object_json, read_value, stray_end


@dataclass(frozen=True)
class Dialect:
    block_open: str
    block_close: str
    invoke_open: str
    invoke_close: str
    param_open: str
    param_close: str
    string_attr: bool


MINIMAX = Dialect("<minimax:tool_call>", "</minimax:tool_call>", '<invoke name="', "</invoke>", '<parameter name="',
                  "</parameter>", False)
DSML = Dialect("<｜DSML｜function_calls>", "</｜DSML｜function_calls>", '<｜DSML｜invoke name="', "</｜DSML｜invoke>",
               '<｜DSML｜parameter name="', "</｜DSML｜parameter>", True)
MINIMAX_MARKERS = (MINIMAX.block_open, MINIMAX.block_close)
DSML_MARKERS = (DSML.block_open, DSML.block_close)


def _header(s: str, i: int):  # noqa: ANN202
    """(key, attributes, end) of `key" attrs>` at i, or None before `>`."""
    quote = s.find('"', i)
    if quote < 0:
        return None
    close = s.find(">", quote)
    if close < 0:
        return None
    return s[i:quote], s[quote + 1 : close], close + 1


class InvokeCalls(Stage):
    def __init__(self, dialect: Dialect, markers: Markers, tools: Tools) -> None:
        self.d = dialect
        self.block_open = markers.pattern(dialect.block_open)
        self.block_close = markers.pattern(dialect.block_close)
        self.tools = tools
        self.state = "content"

    def _invoke(self, s: str, end: bool):  # noqa: ANN202
        """Reads an invoke at 0 (s starts with the invoke tag): None = wait, "bad" = malformed,
        else (name, members, consumed, finished_by)."""
        d = self.d
        start = len(d.invoke_open)
        rest = s[start:]
        bad = next((k for k, ch in enumerate(rest) if ch in "\n<" or is_sentinel(ch)), None)
        header = _header(rest, 0)
        if header is None or not header[0] or (bad is not None and bad <= len(header[0])):
            if header is None and bad is None and not end:
                return None
            return "bad"
        name = header[0]
        i = start + header[2]
        members: list[str] = []
        while True:
            k = after_ws(s, i)
            after = s[k:]
            if after.startswith(d.param_open):
                h = _header(s, k + len(d.param_open))
                if h is None:
                    return None if not end else (name, members, len(s), "end")
                key, attrs, j = h
                if d.string_attr:
                    types = JSON_TEXT if 'string="false"' in attrs else frozenset({"string"})
                else:
                    types = self.tools.types(name, key)
                raw, i = read_value(s, j, [d.param_close, d.param_open, d.invoke_close, self.block_close])
                if i is None and not end:
                    return None
                members.append(member_json(key, raw, types, False))
                if i is None:
                    return name, members, len(s), "end"
                continue
            if after.startswith(d.invoke_close):
                return name, members, k + len(d.invoke_close), "invoke"
            if after.startswith(self.block_close):
                return name, members, k, "invoke"
            if not after or any(could_become(after, p) for p in (d.param_open, d.invoke_close, self.block_close)):
                return (name, members, len(s), "end") if end else None
            i = stray_end(s, k)  # stray text: skip to the next tag (even at the end: more may follow)

    def feed(self, buf: Buf, out: Out, end: bool) -> None:
        d = self.d
        while True:
            s = buf.text
            if self.state == "content":
                if out.route_until(buf, [self.block_open], CONTENT, end) is None:
                    return
                out.route(buf, len(self.block_open), FRAMING)
                self.state = "block"
                continue
            if self.state == "block":
                k = after_ws(s)
                after = s[k:]
                if after.startswith(d.invoke_open):
                    out.route(buf, k, FRAMING)
                    self.state = "invoke"
                elif after.startswith(self.block_close):
                    out.route(buf, k + len(self.block_close), FRAMING)
                    self.state = "content"
                elif not after or could_become(after, d.invoke_open) or could_become(after, self.block_close):
                    if end:
                        out.route_all(buf, FRAMING)
                    else:
                        out.route(buf, k, FRAMING)
                    return
                else:
                    out.route(buf, stray_end(s, k), FRAMING)  # even at the end: the block may still close
                continue
            parsed = self._invoke(s, end)
            if parsed is None:
                return
            if parsed == "bad":
                out.route(buf, len(d.invoke_open), FRAMING)
                self.state = "block"
                continue
            name, members, consumed, finished_by = parsed
            out.add_call(name, object_json(members))
            out.route(buf, consumed, TOOL)
            self.state = "content" if finished_by == "end" else "block"
