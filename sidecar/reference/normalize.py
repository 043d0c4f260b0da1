"""Request JSON and message normalization for the reference renderer: the same rules as
`native/src/template/normalize.rs` (listed in COMPATIBILITY.md), on Python objects.

vLLM rebuilds each message from the fields it knows, turns content parts into a string (text parts
joined with "\\n") or a list of text parts depending on the template, and parses tool-call
arguments given as JSON text; system messages lose Claude Code's billing header line and developer
messages become system messages for templates that do not name the role (`roles`); transformers
then drops null-valued keys and aliases reasoning.
Tools are rebuilt as vLLM's tool model dumps them (`normalize_tools`).
"""

from __future__ import annotations

import json
from typing import Any

from router_adapter.errors import quoted
from sidecar.errors import InvalidArgument
from sidecar.reference.roles import developer_as_system, without_billing_header

_INT_MIN, _INT_MAX = -(2**127), 2**127 - 1

_MEDIA_PART_TYPES = (
    "image_url", "input_image", "image_embeds", "audio_embeds", "prompt_embeds", "image_pil", "audio_url",
    "input_audio", "video_url",
)
_MEDIA_PART_KEYS = (
    "image_url", "image_pil", "image_embeds", "audio_embeds", "prompt_embeds", "audio_url", "input_audio", "video_url",
)


def type_name(value: Any) -> str:
    """The JSON type name the native side uses in messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


#: Values nested deeper than this are refused, as the native parser refuses them (a tool call's
#: arguments nested 257 deep became {} there and rendered whole here).
MAX_DEPTH = 256


def parse_json(text: str, field: str) -> Any:
    """`json.loads`, refusing what the native parser refuses (integers beyond 128 bits, lone
    surrogates, values nested deeper than `MAX_DEPTH`), with errors naming `field`."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise InvalidArgument(f"{field}: invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except RecursionError:
        raise InvalidArgument(f"{field}: invalid JSON: nested too deeply") from None
    _check_representable(value, field)
    return value


def _check_representable(value: Any, field: str) -> None:
    stack = [(value, 0)]
    while stack:
        v, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InvalidArgument(f"{field}: invalid JSON: nested deeper than {MAX_DEPTH} levels")
        if isinstance(v, bool) or v is None or isinstance(v, float):
            continue
        if isinstance(v, int):
            if not _INT_MIN <= v <= _INT_MAX:
                raise InvalidArgument(f"{field}: integer {v} is outside the supported range (a signed 128-bit integer)")
        elif isinstance(v, str):
            _check_utf8(v, field)
        elif isinstance(v, list):
            stack.extend((item, depth + 1) for item in v)
        elif isinstance(v, dict):
            for k, item in v.items():
                _check_utf8(k, field)
                stack.append((item, depth + 1))


def _check_utf8(s: str, field: str) -> None:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidArgument(f"{field}: lone surrogate in a string (not representable as UTF-8)") from None


def normalize_messages(parsed: Any, content_format: str, names_developer: bool) -> list[dict]:
    """The messages the template sees; `content_format` is "string" or "openai", `names_developer`
    whether the template's source names the developer role (`roles.names_developer`)."""
    if not isinstance(parsed, list):
        raise InvalidArgument(f"messages_json: expected an array of messages, got {type_name(parsed)}")
    out = [_message_for_vllm(m, content_format, i) for i, m in enumerate(parsed)]
    for i, message in enumerate(out):
        _normalize_tool_calls(message, i)
    # vLLM's last step before transformers, on the content as the template's format shaped it.
    if not names_developer and any(m["role"] == "developer" for m in out):
        out = developer_as_system(out)
    return [_alias_reasoning({k: v for k, v in m.items() if v is not None}) for m in out]


def _message_for_vllm(message: Any, content_format: str, i: int) -> dict:
    field = f"messages[{i}]"
    if not isinstance(message, dict):
        raise InvalidArgument(f"{field}: expected an object, got {type_name(message)}")
    if "role" not in message:
        raise InvalidArgument(f"{field}.role: missing")
    role = message["role"]
    if not isinstance(role, str):
        raise InvalidArgument(f"{field}.role: expected a string, got {type_name(role)}")
    content = message.get("content")
    # vLLM strips the billing header by the role as sent (a developer message keeps it), before it
    # reads the parts.
    parts = _content_parts(without_billing_header(content) if role == "system" else content, field)
    if content_format == "string":
        content = "\n".join(text for kind, text in parts if text)
    else:
        content = [
            {"type": "text", "text": text} if kind == "text" else {"type": "tool_reference", "name": text}
            for kind, text in parts
        ]
    if role == "tool":
        content = _tool_content_as_text(content)
    result: dict[str, Any] = {"role": role, "content": content}
    if role == "assistant":
        calls = message.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                raise InvalidArgument(f"{field}.tool_calls: expected an array, got {type_name(calls)}")
            result["tool_calls"] = list(calls)
        reasoning = message.get("reasoning")
        if reasoning is None:
            reasoning = message.get("reasoning_content")
        if reasoning is not None:
            result["reasoning"] = reasoning
            result["reasoning_content"] = reasoning
    elif role == "tool":
        if "tool_call_id" in message:
            result["tool_call_id"] = message["tool_call_id"]
    for key in ("name", "task"):
        if isinstance(message.get(key), str):
            result[key] = message[key]
    if role == "developer":
        result["tools"] = message.get("tools")
    return result


def _content_parts(content: Any, field: str) -> list[tuple[str, str | None]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [("text", content)]
    if not isinstance(content, list):
        raise InvalidArgument(
            f"{field}.content: expected a string, an array of parts or null, got {type_name(content)}"
        )
    parts = []
    for j, item in enumerate(content):
        part = _content_part(item, f"{field}.content[{j}]")
        if part is not None:
            parts.append(part)
    return parts


def _content_part(part: Any, field: str) -> tuple[str, str | None] | None:
    if isinstance(part, str):
        return ("text", part)
    if not isinstance(part, dict):
        raise InvalidArgument(f"{field}: expected an object or a string, got {type_name(part)}")
    has_uuid = part.get("uuid") is not None
    part_type = part.get("type")
    if part_type is not None and not isinstance(part_type, str):
        raise InvalidArgument(f"{field}.type: expected a string, got {type_name(part_type)}")
    if part_type is None or has_uuid:
        if has_uuid or any(k in part for k in _MEDIA_PART_KEYS):
            raise InvalidArgument(_media_error(field, "media"))
        raise InvalidArgument(f"{field}.type: missing")

    def text_of(key: str) -> str | None:
        value = part.get(key)
        if value is not None and not isinstance(value, str):
            raise InvalidArgument(f"{field}.{key}: expected a string, got {type_name(value)}")
        return value

    if part_type in ("text", "refusal"):
        text = text_of(part_type)
        return None if text is None else ("text", text)
    if part_type in ("input_text", "output_text"):
        return ("text", text_of("text"))
    if part_type == "thinking":
        return ("text", text_of("thinking"))
    if part_type == "tool_reference":
        return ("tool_reference", text_of("name"))
    if part_type in _MEDIA_PART_TYPES:
        raise InvalidArgument(_media_error(field, part_type))
    raise InvalidArgument(
        f"{field}.type: unsupported content part type {quoted(part_type, json.dumps)}; Render accepts text, input_text, "
        "output_text, refusal, thinking and tool_reference parts"
    )


def _media_error(field: str, kind: str) -> str:
    return f"{field}: {kind} parts are not supported: Render produces text prompts; send media to the engine"


def _tool_content_as_text(content: Any) -> Any:
    if not isinstance(content, list):
        return content
    if any(isinstance(item, dict) and item.get("type") != "text" for item in content):
        return content
    texts = [
        item["text"] if isinstance(item.get("text"), str) else ""
        for item in content
        if isinstance(item, dict) and item.get("type") == "text"
    ]
    return "\n".join(texts)


def _normalize_tool_calls(message: dict, i: int) -> None:
    if message.get("role") != "assistant" or not isinstance(message.get("tool_calls"), list):
        return
    calls = message["tool_calls"]
    if not calls:
        del message["tool_calls"]
        return
    message["tool_calls"] = [_tool_call_for_vllm(call, f"messages[{i}].tool_calls[{j}]") for j, call in enumerate(calls)]


def _tool_call_for_vllm(call: Any, field: str) -> dict:
    """One assistant tool call as vLLM 0.33 hands it to the template: rebuilt by its request
    validation (openai's function tool-call TypedDict) in the declared key order `id`, `function`
    (`arguments`, `name`), `type`, other keys after them in the client's order. What that
    validation refuses (a missing or non-string `id`, `name` or `arguments`, a missing `type`) is
    refused here; `arguments` given as an object (transformers' shape, a 400 in vLLM) is kept.
    A fresh dict, so the caller's parsed request is never edited in place."""
    if not isinstance(call, dict):
        raise InvalidArgument(f"{field}: expected an object, got {type_name(call)}")
    call_id = _required_str(call, "id", field)
    if "type" not in call:
        raise InvalidArgument(f"{field}.type: missing")
    function = _function_of(call, field)  # also refuses a custom call (`type: "custom"`)
    name = _required_str(function, "name", f"{field}.function")
    # As in vLLM 0.33: an object, or JSON text of one, is kept; other text (empty, invalid JSON,
    # JSON of another value) becomes {} rather than failing the request.
    if "arguments" not in function:
        raise InvalidArgument(f"{field}.function.arguments: missing")
    arguments = function["arguments"]
    if isinstance(arguments, str):
        try:
            arguments = parse_json(arguments, "arguments")
        except InvalidArgument:
            arguments = {}
        if not isinstance(arguments, dict):
            arguments = {}
    elif not isinstance(arguments, dict):
        raise InvalidArgument(
            f"{field}.function.arguments: expected a string (JSON text) or an object, got {type_name(arguments)}"
        )
    out_function = {"arguments": arguments, "name": name}
    out_function.update((k, v) for k, v in function.items() if k not in out_function)
    out = {"id": call_id, "function": out_function, "type": "function"}
    out.update((k, v) for k, v in call.items() if k not in out)
    return out


def _required_str(item: dict, key: str, field: str) -> str:
    """A key that vLLM's request validation requires to be a string."""
    if key not in item:
        raise InvalidArgument(f"{field}.{key}: missing")
    if not isinstance(item[key], str):
        raise InvalidArgument(f"{field}.{key}: expected a string, got {type_name(item[key])}")
    return item[key]


def _function_of(item: dict, field: str) -> dict:
    """The `function` object of a tool or a tool call, whose `type` (when given) must be
    "function", as vLLM's models for both require."""
    if "type" in item and item["type"] != "function":
        raise InvalidArgument(f'{field}.type: expected "function", got {_shown(item["type"])}')
    if "function" not in item:
        raise InvalidArgument(f"{field}.function: missing")
    function = item["function"]
    if not isinstance(function, dict):
        raise InvalidArgument(f"{field}.function: expected an object, got {type_name(function)}")
    return function


def _alias_reasoning(message: dict) -> dict:
    reasoning = next((message[k] for k in ("reasoning_content", "thinking", "reasoning") if k in message), None)
    if reasoning is None:
        return message
    return {"thinking": reasoning, **message, "reasoning_content": reasoning}


_BOOL_STRINGS = {"0": False, "off": False, "f": False, "false": False, "n": False, "no": False,
                 "1": True, "on": True, "t": True, "true": True, "y": True, "yes": True}


def normalize_tools(tools: list) -> list:
    """The tools the template sees: each OpenAI tool rebuilt as vLLM 0.33 passes it to the template
    (`tool.model_dump()` of its `ChatCompletionToolsParam`): `type`, then `function` with `name`,
    `description` and `parameters` (null when missing), `strict` and `defer_loading` when set;
    then the tool's `defer_loading` when set. Other keys are dropped; `parameters` is kept as is."""
    return [_tool_for_vllm(tool, i) for i, tool in enumerate(tools)]


def _tool_for_vllm(tool: dict, i: int) -> dict:
    field = f"tools[{i}]"
    function = _function_of(tool, field)
    field += ".function"
    if "name" not in function:
        raise InvalidArgument(f"{field}.name: missing")
    name = function["name"]
    if not isinstance(name, str):
        raise InvalidArgument(f"{field}.name: expected a string, got {type_name(name)}")
    description = function.get("description")
    if description is not None and not isinstance(description, str):
        raise InvalidArgument(f"{field}.description: expected a string or null, got {type_name(description)}")
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, dict):
        raise InvalidArgument(f"{field}.parameters: expected an object or null, got {type_name(parameters)}")
    strict = _optional_bool(function.get("strict"), f"{field}.strict")
    defer = _optional_bool(function.get("defer_loading"), f"{field}.defer_loading")
    tool_defer = _optional_bool(tool.get("defer_loading"), f"tools[{i}].defer_loading")
    if defer is None:
        defer = tool_defer
    out_function: dict[str, Any] = {"name": name, "description": description, "parameters": parameters}
    if strict is not None:
        out_function["strict"] = strict
    if defer is not None:
        out_function["defer_loading"] = defer
    out: dict[str, Any] = {"type": "function", "function": out_function}
    if tool_defer is not None:
        out["defer_loading"] = tool_defer
    return out


def _optional_bool(value: Any, field: str) -> bool | None:
    """pydantic's lax `bool | None`: null, a boolean, 0 or 1 (also as 0.0 or 1.0), or one of its
    words for true and false in any case."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return value == 1
    if isinstance(value, str) and value.lower() in _BOOL_STRINGS:
        return _BOOL_STRINGS[value.lower()]
    raise InvalidArgument(f"{field}: expected a boolean or null, got {_shown(value)}")


def _shown(value: Any) -> str:
    """A value in an error message: a string as itself in quotes, anything else by its JSON type."""
    return quoted(value, lambda s: f'"{s}"') if isinstance(value, str) else type_name(value)
