"""Reference `qwen3_coder`: `<tool_call><function=NAME><parameter=K>V</parameter>...</function></tool_call>`.

A function is read whole once it is complete (or the output ended): name up to `>`, then
parameters; a value ends at `</parameter>`, `<parameter=`, `</function>` or `</tool_call>`."""

from __future__ import annotations

from sidecar.reference.parse.pipeline import (
    CONTENT, FRAMING, TOOL, WS, Buf, Markers, Out, Stage, after_ws, is_sentinel,
)
from sidecar.reference.parse.schema import Tools
from sidecar.reference.parse.tools.xmlish import could_become, member_json, object_json, read_value, stray_end

MARKERS = ("<tool_call>", "</tool_call>")
FUNCTION, FUNCTION_END, PARAMETER, PARAMETER_END = "<function=", "</function>", "<parameter=", "</parameter>"


class Qwen3Coder(Stage):
    def __init__(self, markers: Markers, tools: Tools) -> None:
        self.open = markers.pattern(MARKERS[0])
        self.close = markers.pattern(MARKERS[1])
        self.tools = tools
        self.state = "content"
        self.block = 0  # bytes of `<tool_call>` + whitespace before a `<function=`

    def _function(self, s: str, end: bool):  # noqa: ANN202
        """Reads a function at the start of `s` (which starts with `<function=`): None = wait,
        ("text",) = not a function, ("call", name, members, consumed, closed_by) otherwise."""
        i = len(FUNCTION)
        j = i
        while j < len(s) and not (s[j] in ">\n<" or is_sentinel(s[j])):
            j += 1
        if j >= len(s):
            return None if not end else ("text",)
        name = s[i:j].strip(WS)
        if s[j] != ">" or not name:
            return ("text",)
        i = j + 1
        members: list[tuple[str, str]] = []
        while True:  # parameters
            k = after_ws(s, i)
            rest = s[k:]
            if rest.startswith(PARAMETER):
                close_name = s.find(">", k + len(PARAMETER))
                if close_name < 0:
                    return None if not end else ("call", name, members, len(s), "end")
                key = s[k + len(PARAMETER) : close_name].strip(WS)
                raw, i = read_value(s, close_name + 1, [PARAMETER_END, PARAMETER, FUNCTION_END, self.close])
                if i is None and not end:
                    return None
                members.append((key, raw))
                if i is None:
                    return ("call", name, members, len(s), "end")
                continue
            if rest.startswith(FUNCTION_END):
                return ("call", name, members, k + len(FUNCTION_END), "function")
            if rest.startswith(self.close):
                return ("call", name, members, k, "block")
            if not rest or any(could_become(rest, p) for p in (PARAMETER, FUNCTION_END, self.close)):
                return ("call", name, members, len(s), "end") if end else None
            i = stray_end(s, k)  # stray text: skip to the next tag (even at the end: more may follow)

    def feed(self, buf: Buf, out: Out, end: bool) -> None:
        while True:
            s = buf.text
            if self.state == "content":
                which = out.route_until(buf, [self.open, FUNCTION], CONTENT, end)
                if which is None:
                    return
                self.state = "block" if which == 0 else "function"
                self.block = 0
                continue
            if self.state == "block":
                k = after_ws(s, len(self.open))
                after = s[k:]
                if after.startswith(FUNCTION):
                    self.block = k
                    self.state = "function"
                elif after.startswith(self.close):
                    out.route(buf, k + len(self.close), FRAMING)
                    self.state = "content"
                elif not end and (not after or could_become(after, FUNCTION) or could_become(after, self.close)):
                    return
                else:
                    out.route(buf, len(self.open), CONTENT)
                    self.state = "content"
                continue
            if self.state == "function":
                parsed = self._function(s[self.block :], end)
                if parsed is None:
                    return
                if parsed[0] == "text":
                    out.route(buf, self.block + len(FUNCTION), CONTENT)
                    self.state = "content"
                    continue
                _, name, members, consumed, closed_by = parsed
                fields = [member_json(k, v, self.tools.types(name, k), True) for k, v in members]
                out.add_call(name, object_json(fields))
                out.route(buf, self.block, FRAMING)
                out.route(buf, consumed, TOOL)
                self.state = "content" if closed_by == "end" else "after"
                continue
            # after a function
            k = after_ws(s)
            after = s[k:]
            if after.startswith(self.close):
                out.route(buf, k + len(self.close), FRAMING)
                self.state = "content"
            elif after.startswith(FUNCTION):
                out.route(buf, k, FRAMING)
                self.state = "function"
                self.block = 0
            elif not end and (not after or could_become(after, self.close) or could_become(after, FUNCTION)):
                return
            else:
                self.state = "content"
