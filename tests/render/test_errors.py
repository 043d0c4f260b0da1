"""Render refuses bad input with the right error class and a message naming the field, on both
backends; limits stop runaway templates; options (offsets, special tokens) behave as documented."""

from __future__ import annotations

import pytest

from tests.conftest import require_shared_models
from sidecar.backend import EncodeOptions, RenderOptions, RendererSettings
from sidecar.factory import get_backend
from sidecar.errors import DeadlineExceeded, FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted
from sidecar.registry import materialize_embedded

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
HELLO = '[{"role": "user", "content": "Hello"}]'


_TOKENIZERS: dict[str, object] = {}


def load(backend_name: str, templates: list[tuple[str, str]], **settings):  # noqa: ANN003, ANN201
    backend = get_backend(backend_name)
    if backend_name not in _TOKENIZERS:
        _TOKENIZERS[backend_name] = backend.load_tokenizer(materialize_embedded())
    tokenizer = _TOKENIZERS[backend_name]
    return backend.load_renderer(templates, [("eos_token", "<|im_end|>")], tokenizer, RendererSettings(**settings)), tokenizer


@pytest.fixture(scope="module", params=["native", "reference"])
def backend_name(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(scope="module")
def renderer(backend_name: str):  # noqa: ANN201
    return load(backend_name, [("default", CHATML), ("raises", "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}")])[0]


def opts(**fields) -> RenderOptions:  # noqa: ANN003
    fields.setdefault("messages_json", HELLO)
    return RenderOptions(**fields)


@pytest.mark.parametrize(
    ("fields", "error", "needle"),
    [
        ({"messages_json": '[{"role": "user", "content": "a"'}, InvalidArgument, "messages_json: invalid JSON"),
        ({"messages_json": "[]"}, InvalidArgument, "messages_json: the conversation is empty"),
        ({"messages_json": '[{"content": "a"}]'}, InvalidArgument, "messages[0].role: missing"),
        ({"tools_json": '{"type": "function"}'}, InvalidArgument, "tools_json: expected an array of tools"),
        ({"documents_json": '["text"]'}, InvalidArgument, "documents_json: documents[0] must be an object"),
        ({"chat_template_kwargs_json": "[1]"}, InvalidArgument, "chat_template_kwargs_json: expected an object"),
        ({"chat_template_kwargs_json": '{"add_generation_prompt": false}'}, InvalidArgument, "reserved"),
        ({"chat_template": "tool_use"}, NotFound, "chat_template: this model has no template named \"tool_use\""),
        ({"chat_template": "{{ messages }}"}, FailedPrecondition, "--allow-request-templates"),
        ({"chat_template": "{% if %}", "allow_request_template": True}, InvalidArgument, "chat_template:"),
        ({"chat_template": "{{ x|from_json }}", "allow_request_template": True}, InvalidArgument, "No filter named 'from_json'"),
        ({"continue_final_message": True, "add_generation_prompt": True}, InvalidArgument, "continue_final_message"),
        ({"continue_final_message": True, "add_generation_prompt": False, "chat_template": "{{ 'x' }}", "allow_request_template": True},
         InvalidArgument, "does not use the \"content\" field"),
        ({"timeout_s": 0.0}, DeadlineExceeded, "deadline"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_bad_requests(renderer, fields: dict, error: type, needle: str) -> None:  # noqa: ANN001
    with pytest.raises(error) as caught:
        renderer.render(opts(**fields))
    assert needle in caught.value.message


def test_raise_exception_message_reaches_the_caller(renderer) -> None:  # noqa: ANN001
    with pytest.raises(InvalidArgument) as caught:
        renderer.render(opts(chat_template="raises"))
    assert caught.value.message == "chat template error: Conversation roles must alternate user/assistant/user/assistant/..."


def test_model_without_a_chat_template(backend_name: str) -> None:
    renderer, _ = load(backend_name, [])
    with pytest.raises(FailedPrecondition, match="no chat template"):
        renderer.render(opts())


def test_broken_model_template_fails_requests_not_loading(backend_name: str) -> None:
    renderer, _ = load(backend_name, [("default", "{% for %}")])
    with pytest.raises(FailedPrecondition, match="broken"):
        renderer.render(opts())


@pytest.mark.parametrize(
    ("template", "settings"),
    [
        ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", {"fuel": 200_000}),
        ("{% for i in range(100000) %}0123456789{% endfor %}", {"max_output_bytes": 10_000}),
        ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", {}),
    ],
    ids=["fuel", "output-size", "recursion"],
)
def test_limits_are_clear_errors(backend_name: str, template: str, settings: dict) -> None:
    renderer, _ = load(backend_name, [("default", template)], **settings)
    with pytest.raises(ResourceExhausted):
        renderer.render(opts())


def test_running_out_of_fuel_names_the_flag(backend_name: str) -> None:
    """The same words on both backends, naming --template-fuel (it said only "limit 200000
    instructions", leaving the operator to guess which setting that was)."""
    renderer, _ = load(backend_name, [("default", "{% for i in range(100000) %}{% for j in range(100000) %}"
                                                  "{% endfor %}{% endfor %}")], fuel=200_000)
    with pytest.raises(ResourceExhausted) as refused:
        renderer.render(opts())
    assert refused.value.message == (
        "chat template: ran out of fuel: the template ran past the server's limit of 200000 instructions "
        "(--template-fuel); it loops too long for this request"
    )


def test_text_ids_and_offsets_agree_with_tokenize(backend_name: str) -> None:
    renderer, tokenizer = load(backend_name, [("default", CHATML)], cache_bytes=0)
    out = renderer.render(opts(return_text=True, return_offsets=True))
    assert out.text == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    enc = tokenizer.encode_batch([out.text], EncodeOptions(add_special_tokens=False, return_offsets=True))[0]
    assert list(out.ids) == enc.ids
    assert list(out.offsets) == enc.offsets and len(out.offsets) == 2 * len(out.ids)
    assert list(renderer.render(opts(return_token_ids=False, return_text=False)).ids) == []


def test_add_special_tokens_defaults_off_and_can_be_asked_for(backend_name: str) -> None:
    # Llama 3's post-processor adds <|begin_of_text|>; chat templates already write it.
    require_shared_models()
    from tests.conftest import load_tokenizer

    backend = get_backend(backend_name)
    tokenizer = load_tokenizer(backend_name, "llama3")
    renderer = backend.load_renderer([("default", "{{ bos_token }}{{ messages[0].content }}")], [("bos_token", "<|begin_of_text|>")],
                                     tokenizer, RendererSettings())
    plain = list(renderer.render(opts()).ids)
    doubled = list(renderer.render(opts(add_special_tokens=True)).ids)
    assert plain[0] == 128000 and plain.count(128000) == 1
    assert doubled == [128000, *plain]


@pytest.mark.parametrize("depth", [255, 256, 257, 400])
def test_nesting_past_256_levels_is_refused_alike(depth: int) -> None:
    """Both backends refuse JSON nested deeper than 256 levels: a request nested 257 deep rendered
    on the reference and was INVALID_ARGUMENT on native, and a tool call's arguments nested 257
    deep became {} on native and rendered whole on the reference, under one fingerprint."""
    template = "{% for m in messages %}{{ m.tool_calls | tojson if m.tool_calls else m.content }}{% endfor %}"
    nested = '{"a": ' * depth + "1" + "}" * depth
    arguments = '[{"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": %s}}]}]'
    results = {}
    for backend_name in ("native", "reference"):
        renderer = load(backend_name, [("default", template)])[0]
        by_input = []
        for messages in ('[{"role": "user", "content": %s}]' % nested, arguments % json_string(nested)):
            try:
                by_input.append(renderer.render(RenderOptions(messages_json=messages, return_text=True)).text)
            except InvalidArgument as e:
                assert "nested deeper than 256 levels" in e.message, e.message
                by_input.append("refused")
        results[backend_name] = by_input
    assert results["native"] == results["reference"]
    # The request itself: its content value sits one level below the conversation's array and object.
    assert (results["native"][0] == "refused") == (depth + 2 > 256)
    # The arguments text, invalid past the bound, becomes {} (as vLLM does with arguments that are not JSON).
    assert ('"arguments": {}' in results["native"][1]) == (depth > 256)


def json_string(text: str) -> str:
    import json

    return json.dumps(text)
