"""The Python path of the raw unary RPCs (`--backend reference`): a large body is decoded on a worker,
not on the event loop, and the response comes back as wire bytes serialized with the work (both
read the whole message with the GIL held; a 40 MB Tokenize decoded and encoded on the loop held it
for a fifth of a second)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from sidecar.config import ServerConfig
from sidecar.factory import get_hasher
from sidecar.rpc import Call
from sidecar.runtime import Offloader, Runtime
from sidecar.server import load_registry
from sidecar.servicers import native_table
from sidecar.servicers.detokenize import DetokenizeServicer
from sidecar.servicers.tokenize import TokenizeServicer
from sidecar.v1 import preprocessor_pb2 as pb


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    config = ServerConfig(backend="reference", port=None, metrics_port=None, workers=1)
    offloader = Offloader.for_config(config)
    yield Runtime(config, load_registry(config), offloader, get_hasher("reference"))
    offloader.shutdown()


@pytest.fixture
def decoded_on(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Per decoded body: whether it was decoded on the calling (event loop) thread."""
    seen: list[bool] = []
    real = native_table.decode_request
    loop_thread = threading.current_thread()

    def recording(rpc: str, request_type, body: bytes):  # noqa: ANN001, ANN202
        seen.append(threading.current_thread() is loop_thread)
        return real(rpc, request_type, body)

    monkeypatch.setattr(native_table, "decode_request", recording)
    return seen


@pytest.mark.parametrize("words", [3, 20_000])  # under and over the 16 KiB inline bound
def test_tokenize_decodes_large_bodies_off_the_loop_and_answers_wire_bytes(
    runtime: Runtime, decoded_on: list[bool], words: int
) -> None:
    text = "hello world " * words
    body = pb.TokenizeRequest(model="qwen3", texts=[text], add_special_tokens=False).SerializeToString()
    call = Call("Tokenize", "r1", None)
    raw = asyncio.run(TokenizeServicer(runtime).TokenizeRaw(body, None, call))
    response = pb.TokenizeResponse.FromString(raw)
    expected = runtime.registry.get("qwen3").tokenizer.encode_batch([text], _options())[0].ids
    assert list(response.encodings[0].token_ids) == list(expected)
    assert response.fingerprint and call.model == "qwen3" and call.body_bytes == len(body)
    assert decoded_on == [len(body) <= runtime.config.inline_bytes]


def test_detokenize_answers_wire_bytes(runtime: Runtime, decoded_on: list[bool]) -> None:
    ids = runtime.registry.get("qwen3").tokenizer.encode_batch(["hello world " * 8000], _options())[0].ids
    body = pb.DetokenizeRequest(model="qwen3", sequences=[pb.TokenIds(token_ids=ids)]).SerializeToString()
    assert len(body) > runtime.config.inline_bytes
    raw = asyncio.run(DetokenizeServicer(runtime).DetokenizeRaw(body, None, Call("Detokenize", "r2", None)))
    assert pb.DetokenizeResponse.FromString(raw).texts == ["hello world " * 8000]
    assert decoded_on == [False]


def _options():  # noqa: ANN202
    from sidecar.backend import EncodeOptions

    return EncodeOptions(add_special_tokens=False)


def test_a_small_render_runs_off_the_loop(runtime: Runtime) -> None:
    """A template's prompt can be many times its request (mistral-nemo repeats the tools for each
    user turn equal to the last: a 15.6 KB request rendered 921K characters, 0.9 s on the loop in
    Python). On this path a Render of any size runs on a worker."""
    from sidecar.servicers.render import RenderServicer

    loop_thread = threading.current_thread()
    rendered_on: list[bool] = []
    renderer = runtime.registry.get("qwen3").renderer
    real = renderer.render

    def recording(opts):  # noqa: ANN001, ANN202
        rendered_on.append(threading.current_thread() is loop_thread)
        return real(opts)

    renderer.render = recording  # type: ignore[method-assign]
    try:
        body = pb.RenderRequest(model="qwen3", messages_json='[{"role": "user", "content": "hi"}]',
                                return_text=True).SerializeToString()
        assert len(body) < runtime.config.inline_bytes
        raw = asyncio.run(RenderServicer(runtime).RenderRaw(body, None, Call("Render", "r3", None)))
    finally:
        del renderer.render
    assert "hi" in pb.RenderResponse.FromString(raw).text
    assert rendered_on == [False]
