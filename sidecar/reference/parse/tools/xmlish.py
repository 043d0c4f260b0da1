"""Reference helpers for XML-style calls: building the arguments JSON from raw key/value text."""

from __future__ import annotations

from sidecar.reference.parse.jsonish import escape_json_string
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
