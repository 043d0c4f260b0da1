"""Shared pieces for writing per-format model outputs: the request's tools and the call shapes
every tool format is exercised with. Each format module renders these calls in its own syntax."""

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search documents",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "filters": {"type": "object"},
            "limit": {"type": "integer"}}}}},
    {"type": "function", "function": {
        "name": "set_flags", "description": "Typed values",
        "parameters": {"type": "object", "properties": {
            "enabled": {"type": "boolean"}, "ratio": {"type": "number"},
            "count": {"type": "integer"}, "ids": {"type": "array", "items": {"type": "integer"}},
            "meta": {"type": "object"}, "zip": {"type": "string"}, "note": {"type": ["string", "null"]}}}}},
    {"type": "function", "function": {
        "name": "echo", "description": "Echo text",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}}}},
    {"type": "function", "function": {
        "name": "ping", "description": "No arguments", "parameters": {"type": "object", "properties": {}}}},
]

WEATHER = ("get_weather", {"city": "Paris", "unit": "celsius"})
WEATHER2 = ("get_weather", {"city": "Tokyo", "days": 3})
SEARCH_NESTED = ("search", {"query": "llm {json} [x]", "filters": {"tags": ["a", "b"], "range": {"min": 1, "max": 2.5}, "exact": True, "none": None}, "limit": 10})
TYPED = ("set_flags", {"enabled": True, "ratio": 0.5, "count": 42, "ids": [1, 2, 3], "meta": {"k": "v"}, "zip": "03106", "note": None})
UNICODE = ("echo", {"text": "héllo 你好 😀 \"quoted\" back\\slash\nline2\ttab </x>"})
EMPTY = ("ping", {})


def tool_cases(render, start_marker, *, joiner="", lookalike=None, malformed=None, extra=()):
    """The standard ~17 cases of a tool-call format.

    render(calls) -> text of one tool-call block holding `calls` (list of (name, args));
    start_marker: the text that opens a call block (to cut mid-marker and write look-alikes).
    """
    one = render([WEATHER])
    two = render([WEATHER, WEATHER2])
    cut = max(1, len(start_marker) // 2)
    cases = [
        ("single", "one well-formed call", one),
        ("parallel", "two calls in one block", two),
        ("separate_blocks", "two calls in two blocks", render([WEATHER]) + joiner + render([WEATHER2])),
        ("text_before", "prose then a call", "Let me check the weather.\n\n" + one),
        ("text_after", "a call then prose", one + "\nI will report back."),
        ("text_between", "prose between two call blocks", render([WEATHER]) + "\nand also\n" + render([WEATHER2])),
        ("nested_json", "nested objects, arrays, null and bool values", render([SEARCH_NESTED])),
        ("typed_values", "values whose JSON type comes from the schema", render([TYPED])),
        ("unicode_escapes", "non-ASCII, emoji, quotes, backslash, newline, tab, a closing-tag look-alike",
         render([UNICODE])),
        ("empty_arguments", "a call with no arguments", render([EMPTY])),
        ("unknown_tool", "a call to a tool the request does not declare", render([("get_time", {"tz": "UTC"})])),
        ("truncated_mid_call", "generation stopped inside the arguments", one[: int(len(one) * 0.7)]),
        ("truncated_after_name", "generation stopped right after the name", _cut_after(one, WEATHER[0])),
        ("truncated_mid_marker", "generation stopped inside the opening marker",
         "Checking. " + start_marker[:cut]),
        ("lookalike_prose", "the marker text mentioned in prose, no call",
         lookalike or f"To call a tool, write {start_marker} followed by JSON. Nothing to call now."),
        ("plain_text", "no call at all", "The weather in Paris is mild today."),
        ("whitespace_around", "blank lines around the call", "\n\n" + one + "\n\n"),
    ]
    if malformed:
        cases.append(("malformed", "a broken call block", malformed))
    out = [{"id": i, "description": d, "text": t, "finish_reason": "length" if i.startswith("truncated") else "stop"}
           for i, d, t in cases]
    out.extend(extra)
    return out


def _cut_after(text, name):
    at = text.find(name)
    return text[: at + len(name)] if at >= 0 else text[: len(text) // 2]
