"""Reference helpers for XML-style calls: reading raw key/value text and building the arguments
JSON from it."""

from __future__ import annotations

from sidecar.reference.parse.jsonish import escape_json_string
from sidecar.reference.parse.pipeline import find_marker, is_sentinel
from sidecar.reference.parse.schema import coerce, is_plain_string


def member_json(key: str, raw: str, types: frozenset[str], strip_newlines: bool) -> str:
    """`"key": value` for a raw value: one leading and one trailing newline stripped when the
    format frames values with them; plain strings kept as text, other types converted."""
    if strip_newlines:
        if raw.startswith("\n"):
            raw = raw[1:]
        if raw.endswith("\n"):
            raw = raw[:-1]
    value = escape_json_string(raw) if is_plain_string(types) else coerce(raw, types)
    return f"{escape_json_string(key)}: {value}"


def object_json(members: list[str]) -> str:
    return "{" + ", ".join(members) + "}"


def could_become(s: str, pattern: str) -> bool:
    return len(s) < len(pattern) and pattern.startswith(s)


def read_value(s: str, i: int, ends: list[str]) -> tuple[str, int | None]:
    """The raw value at `i` up to the first of `ends`: the value's own closing tag (`ends[0]`,
    read past) or a tag that closes it implicitly (read up to). Returns the value and where
    reading goes on, or the rest of `s` and None when no tag came."""
    kind, at, which = find_marker(s[i:], ends)
    if kind != "found":
        return s[i:], None
    return s[i : i + at], i + at + (len(ends[0]) if which == 0 else 0)


def stray_end(s: str, i: int) -> int:
    """The end of stray text between elements at `i` (at least one character): the next `<` or
    marker."""
    j = i + 1
    while j < len(s) and not (s[j] == "<" or is_sentinel(s[j])):
        j += 1
    return j
