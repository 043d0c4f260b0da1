"""Reference `pythonic`: `[f(a=1, b='x'), g()]` anywhere in the text, values read with Python's
own `ast.literal_eval` and written as JSON (see the native `tools/pythonic.rs` for the rules)."""

from __future__ import annotations

import ast
import json
import re

from sidecar.reference.parse.pipeline import CONTENT, FRAMING, TOOL, Buf, Markers, Out, Stage

MARKERS = ("<|python_start|>", "<|python_end|>")
_WS = " \t\n\r"
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


class _More(Exception):
    pass


class _Bad(Exception):
    pass


def _ws(s: str, i: int) -> int:
    while i < len(s) and s[i] in _WS:
        i += 1
    return i


def _ident(s: str, i: int) -> tuple[str, int]:
    if i >= len(s):
        raise _More
    m = _IDENT.match(s, i)
    if not m:
        if s[i].isascii() and (s[i].isalnum() or s[i] == "_"):
            raise _Bad  # a digit first
        raise _Bad
    if m.end() == len(s):
        raise _More
    return m.group(), m.end()


def _value_end(s: str, i: int) -> int:
    """Where the Python literal at i ends."""
    i = _ws(s, i)
    if i >= len(s):
        raise _More
    c = s[i]
    if c in "rR" and i + 1 < len(s) and s[i + 1] in "'\"":
        return _string_end(s, i + 1, raw=True)
    if c in "rR" and i + 1 == len(s):
        raise _More
    if c in "'\"":
        return _string_end(s, i, raw=False)
    if c in "[(":
        close = "]" if c == "[" else ")"
        j = i + 1
        while True:
            j = _ws(s, j)
            if j >= len(s):
                raise _More
            if s[j] == close:
                return j + 1
            j = _ws(s, _value_end(s, j))
            if j >= len(s):
                raise _More
            if s[j] == ",":
                j += 1
            elif s[j] != close:
                raise _Bad
    if c == "{":
        j = i + 1
        while True:
            j = _ws(s, j)
            if j >= len(s):
                raise _More
            if s[j] == "}":
                return j + 1
            if s[j] not in "'\"":
                raise _Bad
            j = _ws(s, _string_end(s, j, raw=False))
            if j >= len(s):
                raise _More
            if s[j] != ":":
                raise _Bad
            j = _ws(s, _value_end(s, j + 1))
            if j >= len(s):
                raise _More
            if s[j] == ",":
                j += 1
            elif s[j] != "}":
                raise _Bad
    j = i
    while j < len(s) and (s[j].isascii() and (s[j].isalnum() or s[j] in "_.") or (s[j] in "+-" and (j == i or s[j - 1] in "eE"))):
        j += 1
    if j >= len(s):
        raise _More
    if j == i:
        raise _Bad
    return j


def _string_end(s: str, i: int, raw: bool) -> int:
    quote = s[i]
    j = i + 1
    while True:
        if j >= len(s):
            raise _More
        if s[j] == quote:
            return j + 1
        if s[j] == "\n":
            raise _Bad
        if s[j] == "\\":
            if j + 1 >= len(s):
                raise _More
            j += 2
            continue
        j += 1


def _json(source: str) -> str:
    try:
        value = ast.literal_eval(source.strip(_WS))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise _Bad from None
    if isinstance(value, (set, bytes, complex)) or not _json_keys(value):
        raise _Bad
    return json.dumps(value, ensure_ascii=False)


def _json_keys(value: object) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_keys(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return all(_json_keys(v) for v in value)
    return not isinstance(value, (set, bytes, complex))


def parse_list(s: str):  # noqa: ANN201
    """(calls, status, end): calls = [(name, [(key, json)], closed)], status wait/notalist/done/broken."""
    calls: list[tuple[str, list[tuple[str, str]], bool]] = []
    i = 1

    def fail(more: bool, at: int):  # noqa: ANN202
        if more:
            return calls, "wait", len(s)
        return calls, ("notalist" if not calls else "broken"), at

    while True:
        i = _ws(s, i)
        if not calls:
            if i < len(s) and s[i] == "]":
                return calls, "notalist", i
        else:
            if i >= len(s):
                return calls, "wait", len(s)
            if s[i] == "]":
                return calls, "done", i + 1
            if s[i] != ",":
                return calls, "broken", i
            i = _ws(s, i + 1)
            if i < len(s) and s[i] == "]":
                return calls, "done", i + 1
        at = i
        try:
            name, i = _ident(s, i)
            i = _ws(s, i)
            if i >= len(s):
                raise _More
            if s[i] != "(":
                raise _Bad
            i = _ws(s, i + 1)
            if i >= len(s):
                raise _More
            if s[i] != ")":
                _, j = _ident(s, i)
                j = _ws(s, j)
                if j >= len(s):
                    raise _More
                if s[j] != "=" or s[j + 1 : j + 2] == "=":
                    raise _Bad
        except _More:
            return fail(True, at)
        except _Bad:
            return fail(False, at)
        members: list[tuple[str, str]] = []
        calls.append((name, members, False))
        while True:
            i = _ws(s, i)
            if i >= len(s):
                return calls, "wait", len(s)
            if s[i] == ")":
                calls[-1] = (name, members, True)
                i += 1
                break
            at = i
            try:
                key, i = _ident(s, i)
                i = _ws(s, i)
                if i >= len(s):
                    return calls, "wait", len(s)
                if s[i] != "=":
                    return calls, "broken", at
                end = _value_end(s, i + 1)
                value = _json(s[i + 1 : end])
            except _More:
                return fail(True, at)
            except _Bad:
                return fail(False, at)
            i = _ws(s, end)
            if i >= len(s):
                return calls, "wait", len(s)
            if s[i] == ",":
                i += 1
            elif s[i] != ")":
                return calls, "broken", at
            members.append((key, value))


class Pythonic(Stage):
    def __init__(self, markers: Markers) -> None:
        self.start, self.end = (markers.pattern(m) for m in MARKERS)
        self.state = "content"

    def feed(self, buf: Buf, out: Out, end: bool) -> None:
        while True:
            s = buf.text
            if self.state == "content":
                pats = ["[", self.start, self.end]
                which = out.route_until(buf, pats, CONTENT, end)
                if which is None:
                    return
                if which == 0:
                    self.state = "list"
                else:
                    out.route(buf, len(pats[which]), FRAMING)
                continue
            calls, status, stop = parse_list(s)
            if status == "wait" and not end:
                return
            self.state = "content"
            if status == "notalist" or (status == "wait" and not calls):
                out.route(buf, 1, CONTENT)
                continue
            for name, members, _closed in calls:
                out.add_call(name, "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {v}" for k, v in members) + "}")
            out.route(buf, len(s) if status == "wait" else stop, TOOL)
