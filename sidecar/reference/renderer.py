"""`ReferenceRenderer`: chat templates rendered with the PyPI `minijinja` package (Python
compatibility on) in the environment transformers defines, then tokenized with PyPI `tokenizers`.

It follows the same rules as the native renderer (selection, normalization, `tojson`, limits,
`continue_final_message`), written plainly; the parity tests hold both to transformers' output.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from datetime import datetime, timezone
from typing import Any

import minijinja

from router_adapter.errors import quoted
from sidecar.backend import EncodeOptions, RenderOptions, Rendered, RendererSettings
from sidecar.errors import DeadlineExceeded, FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted, SidecarError
from sidecar.reference import template_analysis
from sidecar.reference.normalize import normalize_messages, normalize_tools, parse_json, type_name
from sidecar.reference.roles import names_developer
from sidecar.reference.tokenizer import ReferenceTokenizer
from sidecar.reference.words import check_word_lengths

_TEMPLATE_NAME = "chat_template"
_CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG "
_REQUEST_TEMPLATE_CACHE = 32
_RESERVED_KWARGS = (
    "messages", "tools", "documents", "add_generation_prompt", "continue_final_message", "chat_template", "tokenize",
)
# Renders a value the way minijinja displays it (Python-like, except floats), for `|string`.
_DISPLAY = minijinja.Environment()


class _Raised(Exception):
    """raise_exception() was called by the template."""


def _raise_exception(message: Any) -> None:
    raise _Raised(_py_str(message))


def _py_str(value: Any) -> str:
    # Python's str() for floats and containers; minijinja's display (Python-like) for the rest.
    if type(value) in (float, list, dict, tuple):
        return str(value)
    return _DISPLAY.render_str("{{ v }}", v=value)


def _none_is_not_iterable() -> None:
    raise TypeError("'NoneType' object is not iterable")


def _tojson(x: Any, ensure_ascii: Any = False, indent: Any = None, separators: Any = None, sort_keys: Any = False) -> str:
    # transformers' filter: json.dumps as Python spells it.
    try:
        return json.dumps(
            x, ensure_ascii=bool(ensure_ascii), indent=indent,
            separators=tuple(separators) if separators is not None else None, sort_keys=bool(sort_keys),
        )
    except (TypeError, ValueError) as e:
        raise ValueError(f"tojson: {e}") from None


def _indent(s: Any, width: Any = 4, first: Any = False, blank: Any = False) -> str:
    # Jinja2's filter: a newline is appended before splitting, so a trailing line break survives.
    if not isinstance(s, str):
        raise TypeError(f"indent: expected a string, got {type(s).__name__}")
    indention = width if isinstance(width, str) else " " * int(width)
    lines = (s + "\n").splitlines()
    if blank:
        out = ("\n" + indention).join(lines)
    else:
        out = lines[0] if lines else ""
        if len(lines) > 1:
            out += "\n" + "\n".join(indention + line if line else line for line in lines[1:])
    return indention + out if first else out


def _is_iterable(value: Any) -> bool:
    # Jinja2's test; minijinja's own calls `none` iterable.
    if value is None:
        return False
    try:
        iter(value)
    except TypeError:
        return False
    return True


class _Compiled:
    def __init__(self, source: str, settings: RendererSettings) -> None:
        rewritten = template_analysis.rewrite(source)
        reason = template_analysis.compile_error(rewritten)
        if reason is not None:
            raise InvalidArgument(f"chat_template: Jinja2 cannot compile this template: {reason}")
        self.content_format = template_analysis.content_format(rewritten)
        self.mentions_content = "content" in source
        self.names_developer = names_developer(source)
        env = minijinja.Environment(
            trim_blocks=True, lstrip_blocks=True, pycompat=True, fuel=settings.fuel, keep_trailing_newline=False,
            auto_escape_callback=lambda _name: None,
        )
        env.add_filter("tojson", _tojson)
        env.add_filter("string", _py_str)
        env.add_filter("indent", _indent)
        env.add_test("iterable", _is_iterable)
        env.add_global("raise_exception", _raise_exception)
        env.add_global(template_analysis.NONE_ITERATION_FUNCTION, _none_is_not_iterable)
        fixed = settings.fixed_time

        def strftime_now(fmt: str) -> str:
            # A fixed clock (tests) is shown in UTC, so dates do not depend on the time zone.
            now = datetime.now() if fixed is None else datetime.fromtimestamp(fixed, timezone.utc)
            return now.strftime(fmt)

        env.add_global("strftime_now", strftime_now)
        try:
            env.add_template(_TEMPLATE_NAME, template_analysis.guard_none_iteration(rewritten))
        except minijinja.TemplateError as e:
            raise InvalidArgument(f"chat_template: {_first_line(e)}") from None
        self.env = env


def _first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e) else type(e).__name__


class ReferenceRenderer:
    """A model's templates rendered in Python; thread-safe."""

    def __init__(
        self, templates: list[tuple[str, str]], variables: list[tuple[str, str]], tokenizer: ReferenceTokenizer,
        settings: RendererSettings,
    ) -> None:
        self._settings = settings
        self._tokenizer = tokenizer
        self._variables = dict(variables)
        self._named: dict[str, _Compiled | SidecarError] = {}
        for name, source in templates:
            try:
                self._named[name] = _Compiled(source, settings)
            except InvalidArgument as e:
                self._named[name] = FailedPrecondition(f"the model's chat template {name!r} is broken: {e.message}")
        self.template_names = list(self._named)
        self.content_formats = {n: t.content_format for n, t in self._named.items() if isinstance(t, _Compiled)}
        self._request_templates: OrderedDict[str, _Compiled] = OrderedDict()
        self._lock = threading.Lock()

    def render(self, opts: RenderOptions) -> Rendered:
        deadline = None if opts.timeout_s is None else time.monotonic() + opts.timeout_s
        if opts.continue_final_message and opts.add_generation_prompt:
            raise InvalidArgument(
                "continue_final_message and add_generation_prompt cannot both be true: the first ends the prompt "
                "inside the final message, the second opens a new assistant turn"
            )
        tools = _optional_array(opts.tools_json, "tools_json", "tools")
        if tools is not None:
            tools = normalize_tools(tools)
        template = self._select(opts.chat_template, tools is not None, opts.allow_request_template)
        messages = normalize_messages(
            parse_json(opts.messages_json, "messages_json"), template.content_format, template.names_developer
        )
        if not messages:
            raise InvalidArgument("messages_json: the conversation is empty; send at least one message")
        documents = _optional_array(opts.documents_json, "documents_json", "documents")
        kwargs = _template_kwargs(opts.chat_template_kwargs_json)
        original = _tag_final_message(messages, template) if opts.continue_final_message else None
        context = {**self._variables, **kwargs}
        context.update(messages=messages, tools=tools, documents=documents, add_generation_prompt=opts.add_generation_prompt)
        text = self._run(template, context)
        if original is not None:
            text = _cut_at_continue_tag(text, original)
        if deadline is not None and time.monotonic() >= deadline:
            raise DeadlineExceeded("the request's deadline passed while rendering")
        ids: list[int] = []
        offsets: list[int] = []
        if opts.return_token_ids or opts.return_offsets:
            check_word_lengths(text, self._settings.max_word_chars)
            enc = self._tokenizer.encode_batch(
                [text], EncodeOptions(add_special_tokens=opts.add_special_tokens, return_offsets=opts.return_offsets)
            )[0]
            ids = enc.ids if opts.return_token_ids else []
            offsets = enc.offsets
        return Rendered(text=text if opts.return_text else None, ids=ids, offsets=offsets)

    def _select(self, requested: str | None, has_tools: bool, allow_source: bool) -> _Compiled:
        def named(name: str) -> _Compiled | None:
            found = self._named.get(name)
            if isinstance(found, SidecarError):
                raise found
            return found

        available = ", ".join(self._named) or "none"
        if requested is not None and not _looks_like_jinja(requested):
            found = named(requested)
            if found is None:
                raise NotFound(f"chat_template: this model has no template named {quoted(requested, json.dumps)}; its templates: {available}")
            return found
        if requested is not None:
            if not allow_source:
                raise FailedPrecondition(
                    "chat_template: per-request Jinja templates are disabled (templates are code); start the server "
                    "with --allow-request-templates, or pass the name of one of the model's templates"
                )
            return self._request_template(requested)
        if has_tools and "tool_use" in self._named:
            return named("tool_use")  # type: ignore[return-value]
        if "default" in self._named:
            return named("default")  # type: ignore[return-value]
        if not self._named:
            raise FailedPrecondition(
                "this model has no chat template (tokenizer_config.json has none and there is no chat_template.jinja); "
                "pass one in chat_template if the server allows request templates"
            )
        raise FailedPrecondition(
            f"this model has several chat templates and none is named 'default'; pick one in chat_template: {available}"
        )

    def _request_template(self, source: str) -> _Compiled:
        with self._lock:
            if source in self._request_templates:
                self._request_templates.move_to_end(source, last=False)
                return self._request_templates[source]
        compiled = _Compiled(source, self._settings)
        with self._lock:
            self._request_templates[source] = compiled
            self._request_templates.move_to_end(source, last=False)
            while len(self._request_templates) > _REQUEST_TEMPLATE_CACHE:
                self._request_templates.popitem(last=True)
        return compiled

    def _run(self, template: _Compiled, context: dict) -> str:
        try:
            text = template.env.render_template(_TEMPLATE_NAME, **context)
        except _Raised as e:
            raise InvalidArgument(f"chat template error: {e}") from None
        except minijinja.TemplateError as e:
            if e.kind == "OutOfFuel":
                raise ResourceExhausted(
                    f"chat template: ran out of fuel: the template ran past the server's limit of {self._settings.fuel} "
                    "instructions (--template-fuel); it loops too long for this request"
                ) from None
            if "recursion limit exceeded" in str(e):
                raise ResourceExhausted("chat template: recursion too deep") from None
            raise InvalidArgument(f"chat template failed: {_first_line(e)}") from None
        except Exception as e:  # noqa: BLE001 - a Python callback (tojson, strftime_now) failed
            raise InvalidArgument(f"chat template failed: {e}") from None
        if len(text.encode("utf-8")) > self._settings.max_output_bytes:
            raise ResourceExhausted(
                f"chat template: the rendered prompt exceeds the output limit of {self._settings.max_output_bytes} bytes"
            )
        return text


def _looks_like_jinja(s: str) -> bool:
    return "{{" in s or "{%" in s or "{#" in s


def _optional_array(text: str, field: str, what: str) -> list | None:
    if not text.strip():
        return None
    value = parse_json(text, field)
    if value is None:
        return None
    if not isinstance(value, list):
        raise InvalidArgument(f"{field}: expected an array of {what}, got {type_name(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise InvalidArgument(f"{field}: {what}[{i}] must be an object, got {type_name(item)}")
    return value


def _template_kwargs(text: str) -> dict:
    if not text.strip():
        return {}
    value = parse_json(text, "chat_template_kwargs_json")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgument(f"chat_template_kwargs_json: expected an object, got {type_name(value)}")
    for key in value:
        if key in _RESERVED_KWARGS:
            raise InvalidArgument(f"chat_template_kwargs_json: {quoted(key, json.dumps)} is reserved; use the request field of that name")
    return value


def _tag_final_message(messages: list[dict], template: _Compiled) -> str:
    last = messages[-1]
    if "content" not in last:
        raise InvalidArgument('continue_final_message: the final message has no "content" to continue')
    if not template.mentions_content:
        raise InvalidArgument('continue_final_message: the chat template does not use the "content" field')
    content = last["content"]
    if isinstance(content, str):
        last["content"] = content + _CONTINUE_TAG
        return content
    if isinstance(content, list):
        for part in reversed(content):
            if isinstance(part, dict) and "text" in part:
                if not isinstance(part["text"], str):
                    raise InvalidArgument("continue_final_message: the final message's last text part is not a string")
                original = part["text"]
                part["text"] = original + _CONTINUE_TAG
                return original
        raise InvalidArgument("continue_final_message: the final message has no text part to continue")
    raise InvalidArgument(f"continue_final_message: the final message's content is a {type_name(content)}, not text")


def _cut_at_continue_tag(text: str, original: str) -> str:
    tag = _CONTINUE_TAG.strip()
    if original.strip() not in text or tag not in text:
        raise InvalidArgument(
            "continue_final_message: the final message does not appear in the rendered prompt (the chat template "
            "changes or drops it), so the prompt cannot end inside it"
        )
    at = text.rindex(tag)
    if text[at : at + len(_CONTINUE_TAG)] == _CONTINUE_TAG:
        return text[:at]
    return text[:at].rstrip()
