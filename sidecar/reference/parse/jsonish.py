"""Reference JSON reading for tool calls: whole-value parsing that also says what a cut-off or
broken value becomes, as canonical text (`json.dumps(ensure_ascii=False)` spacing, string escapes
re-done, numbers kept as written).

A value cut off by the end of the text or broken by a bad character keeps what was complete or
open: an open string is closed, open containers are closed, and an object member or array element
whose key or scalar value was not finished (a number or literal counts as finished only once a
character after it arrived) is left out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from sidecar.reference.parse.pipeline import is_sentinel

_WS = " \t\n\r"
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_SCALAR_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-+.")
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def escape_json_string(s: str) -> str:
    """`s` as a canonical JSON string literal."""
    out = ['"']
    for ch in s:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\b":
            out.append("\\b")
        elif ch == "\f":
            out.append("\\f")
        elif code < 0x20 or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


@dataclass
class Parsed:
    """A value read from text."""

    #: Canonical text (closed when cut off); None when nothing of the value was emitted.
    text: str | None
    #: "done", "cut" (the text ended) or "error".
    status: str
    #: Where reading stopped: after the value (done), at the bad character (error), at the end (cut).
    end: int
    #: For strings: the decoded value (None for other kinds).
    string: str | None = None


def skip_ws(s: str, i: int) -> int:
    while i < len(s) and s[i] in _WS:
        i += 1
    return i


def parse_value(s: str, i: int) -> Parsed:
    """Reads one JSON value starting at `i` (after optional whitespace)."""
    i = skip_ws(s, i)
    if i >= len(s):
        return Parsed(None, "cut", i)
    ch = s[i]
    if ch == "{":
        return _parse_object(s, i + 1)
    if ch == "[":
        return _parse_array(s, i + 1)
    if ch == '"':
        return parse_string(s, i + 1)
    if ch == "-" or ch.isdigit() or ("a" <= ch <= "z"):
        j = i
        while j < len(s) and s[j] in _SCALAR_CHARS:
            j += 1
        if j >= len(s):
            return Parsed(None, "cut", len(s))
        word = s[i:j]
        if word in ("true", "false", "null") or _NUMBER.fullmatch(word):
            return Parsed(word, "done", j)
        return Parsed(None, "error", j)
    return Parsed(None, "error", i)


def parse_string(s: str, i: int) -> Parsed:
    """Reads a string whose opening quote is just before `i`."""
    chars: list[str] = []
    while i < len(s):
        ch = s[i]
        if is_sentinel(ch):
            return _string_result(chars, "error", i)
        if ch == '"':
            return _string_result(chars, "done", i + 1)
        if ch != "\\":
            chars.append(ch)
            i += 1
            continue
        if i + 1 >= len(s):
            return _string_result(chars, "cut", len(s))
        esc = s[i + 1]
        if esc in _ESCAPES:
            chars.append(_ESCAPES[esc])
            i += 2
            continue
        if esc != "u":
            return _string_result(chars, "error", i + 1)
        digits = s[i + 2 : i + 6]
        for k, d in enumerate(digits):
            if d not in "0123456789abcdefABCDEF":
                return _string_result(chars, "error", i + 2 + k)
        if len(digits) < 4:
            return _string_result(chars, "cut", len(s))
        chars.append(chr(int(digits, 16)))
        i += 6
    return _string_result(chars, "cut", len(s))


def _string_result(chars: list[str], status: str, end: int) -> Parsed:
    # Pair up surrogate escapes the way a JSON decoder does; lone ones stay escapes.
    value = "".join(chars).encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")
    return Parsed(escape_json_string(value), status, end, string=value)


def _items(s: str, i: int, closer: str, read_item: Callable[[int], tuple[str, int]]) -> tuple[str, int]:
    """Walks a container's items from just after its opening bracket to `closer`; `read_item(i)`
    reads one item at `i` (not whitespace) and says where it stopped. Returns the container's
    status and where it stopped."""
    first = True
    while True:
        i = skip_ws(s, i)
        if i >= len(s):
            return "cut", i
        if s[i] == closer and first:
            return "done", i + 1
        status, i = read_item(i)
        if status != "done":
            return status, i
        i = skip_ws(s, i)
        if i >= len(s):
            return "cut", i
        if s[i] == closer:
            return "done", i + 1
        if s[i] != ",":
            return "error", i
        i += 1
        first = False


def _members(s: str, i: int, read_value: Callable[[Parsed, int], Parsed]) -> tuple[str, int]:
    """Walks an object's members from just after its `{`; `read_value(key, i)` reads the value of
    member `key` at `i` (just after the colon)."""

    def member(i: int) -> tuple[str, int]:
        if s[i] != '"':
            return "error", i
        key = parse_string(s, i + 1)
        if key.status != "done":
            return key.status, key.end
        i = skip_ws(s, key.end)
        if i >= len(s):
            return "cut", i
        if s[i] != ":":
            return "error", i
        value = read_value(key, i + 1)
        return value.status, value.end

    return _items(s, i, "}", member)


def _parse_object(s: str, i: int) -> Parsed:
    members: list[str] = []

    def read_value(key: Parsed, i: int) -> Parsed:
        value = parse_value(s, i)
        if value.text is not None:
            members.append(f"{key.text}: {value.text}")
        return value

    status, end = _members(s, i, read_value)
    return Parsed(_obj(members), status, end)


def _parse_array(s: str, i: int) -> Parsed:
    items: list[str] = []

    def read_item(i: int) -> tuple[str, int]:
        value = parse_value(s, i)
        if value.text is not None:
            items.append(value.text)
        return value.status, value.end

    status, end = _items(s, i, "]", read_item)
    return Parsed(_arr(items), status, end)


def _obj(members: list[str]) -> str:
    return "{" + ", ".join(members) + "}"


def _arr(items: list[str]) -> str:
    return "[" + ", ".join(items) + "]"


def canonical(text: str) -> str | None:
    """Canonical text of a complete JSON value (surrounding whitespace allowed), else None."""
    parsed = parse_value(text + " ", 0)
    if parsed.status == "done" and not text[parsed.end :].strip(_WS):
        return parsed.text
    return None


@dataclass
class CallObject:
    """`{"name": ..., "arguments": {...}}` read from text."""

    name: str | None
    #: Canonical arguments, closed; "{}" when none.
    arguments: str
    #: "done", "cut" or "error".
    status: str
    end: int
    #: Whether an arguments member began (its key and colon were read).
    has_args: bool = False


def parse_call_object(s: str, i: int, arg_keys: tuple[str, ...]) -> CallObject:
    """Reads a call object at `i`: the first `name` member (a string) and the first arguments
    member (an object, or a string holding one); other members are skipped."""
    name: str | None = None
    args: str | None = None
    seen_args = False

    def read_value(key: Parsed, i: int) -> Parsed:
        nonlocal name, args, seen_args
        if key.string == "name" and name is None:
            value = parse_value(s, i)
            if value.status == "done":
                if value.string is None:
                    return Parsed(None, "error", value.end)
                name = value.string
            return value
        if key.string in arg_keys and not seen_args:
            seen_args = True
            j = skip_ws(s, i)
            value = parse_value(s, j)
            if j < len(s) and s[j] == "{":
                args = value.text
            elif j < len(s) and s[j] == '"' and value.status == "done":
                inner = canonical(value.string or "")
                if inner is not None and inner.startswith("{"):
                    args = inner
            return value
        return parse_value(s, i)

    i = skip_ws(s, i)
    if i >= len(s):
        status, end = "cut", i
    elif s[i] != "{":
        status, end = "error", i
    else:
        status, end = _members(s, i + 1, read_value)
    return CallObject(name, args if args is not None else "{}", status, end, seen_args)
