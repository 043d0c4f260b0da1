"""Reference tool schemas and value conversion (rules as in the native `parse/schema.rs`: among
the allowed types try null, integer, number, boolean, object/array, string; else a string)."""

from __future__ import annotations

import json
import re

from sidecar.errors import InvalidArgument
from sidecar.reference.parse.jsonish import canonical, escape_json_string

_ALIASES = {
    "null": "null", "none": "null", "integer": "integer", "int": "integer", "number": "number", "float": "number",
    "double": "number", "boolean": "boolean", "bool": "boolean", "object": "object", "dict": "object",
    "array": "array", "list": "array", "tuple": "array", "string": "string", "str": "string", "text": "string",
}
_INT = re.compile(r"[+-]?[0-9]+")
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def schema_types(schema: object) -> frozenset[str]:
    if not isinstance(schema, dict):
        return frozenset()
    found: set[str] = set()
    t = schema.get("type")
    for name in [t] if isinstance(t, str) else t if isinstance(t, list) else []:
        if isinstance(name, str) and name.lower() in _ALIASES:
            found.add(_ALIASES[name.lower()])
    for key in ("anyOf", "oneOf"):
        members = schema.get(key)
        if isinstance(members, list):
            for m in members:
                found |= schema_types(m)
    if schema.get("nullable") is True:
        found.add("null")
    return frozenset(found)


class Tools:
    def __init__(self, functions: dict[str, dict[str, frozenset[str]]]) -> None:
        self.functions = functions

    @classmethod
    def parse(cls, tools_json: str) -> Tools:
        if not tools_json.strip():
            return cls({})
        try:
            items = json.loads(tools_json)
        except ValueError as e:
            raise InvalidArgument(f"tools_json: not valid JSON: {e}") from None
        if not isinstance(items, list):
            raise InvalidArgument("tools_json: expected a JSON array of tools")
        functions = {}
        for item in items:
            if not isinstance(item, dict):
                continue
            fn = item.get("function", item)
            if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                continue
            props = (fn.get("parameters") or {}).get("properties") if isinstance(fn.get("parameters"), dict) else None
            params = {k: schema_types(v) for k, v in props.items()} if isinstance(props, dict) else {}
            functions[fn["name"]] = params
        return cls(functions)

    def types(self, function: str, param: str) -> frozenset[str]:
        return self.functions.get(function, {}).get(param, frozenset())


#: DSML `string="false"`: the text is any JSON value (kept as a string when it does not parse).
JSON_TEXT = frozenset({"json"})


def is_plain_string(types: frozenset[str]) -> bool:
    return not types or types == {"string"}


def _number(t: str) -> str | None:
    t = t[1:] if t.startswith("+") else t
    sign, body = ("-", t[1:]) if t.startswith("-") else ("", t)
    if body.startswith("."):
        body = "0" + body
    dot = body.find(".")
    if dot >= 0 and (dot + 1 == len(body) or body[dot + 1] in "eE"):
        body = body[: dot + 1] + "0" + body[dot + 1 :]
    candidate = sign + body
    return candidate if _JSON_NUMBER.fullmatch(candidate) else None


def coerce(value: str, types: frozenset[str]) -> str:
    """Canonical JSON for a parameter's raw text value."""
    t = value.strip(" \t\n\r")
    if types == JSON_TEXT:
        c = canonical(t)
        if c is not None:
            return c
    elif not is_plain_string(types):
        if "null" in types and t == "null":
            return "null"
        if "integer" in types and _INT.fullmatch(t):
            return str(int(t))
        if "number" in types:
            n = _number(t)
            if n is not None:
                return n
        if "boolean" in types and t.lower() in ("true", "1", "false", "0"):
            return "true" if t.lower() in ("true", "1") else "false"
        if "object" in types or "array" in types:
            c = canonical(t)
            if c is not None and ((c.startswith("{") and "object" in types) or (c.startswith("[") and "array" in types)):
                return c
    return escape_json_string(value)
