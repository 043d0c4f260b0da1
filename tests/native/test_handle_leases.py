"""Closing a native handle while a call is using it (a cancelled ParseStream, a reloaded model) must
not free the memory under that call: the free waits for the last lease, the call finishes with its
correct result, and later calls fail with FAILED_PRECONDITION instead of touching freed memory.

Every wrapper that owns a handle is driven the same way: a long call on a worker thread, `close()`
from this thread while the call is inside the native code.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Callable

import msgspec
import pytest

from sidecar.backend import EncodeOptions, ParseLimits, RendererSettings, RenderOptions
from sidecar.errors import FailedPrecondition
from sidecar.native import NativeBackend, ffi, lib
from sidecar.native._calls import call_out, str_arg
from sidecar.native._handle import Handle
from sidecar.native.kv_index import NativePrefixIndex
from sidecar.registry import materialize_embedded
from sidecar.v1 import preprocessor_pb2 as pb
from tests.conftest import require_native_testing_exports

BACKEND = NativeBackend()
LONG_TEXT = "The quick brown fox, 12345; jumps over the lazy dog! " * 20_000  # ~1 MB


@pytest.fixture(scope="module")
def tokenizer():  # noqa: ANN201
    return BACKEND.load_tokenizer(materialize_embedded())


def _close_during(call: Callable[[], Any], handle: Handle, close: Callable[[], None]) -> Any:
    """Runs `call` on a thread, closes the handle once the call holds its lease, returns the result."""
    value = _while_in_flight(call, handle, close)
    assert handle.closed
    return value


def _while_in_flight(call: Callable[[], Any], handle: Handle, during: Callable[[], None]) -> Any:
    """Runs `call` on a thread and `during` here once the call holds its lease; returns the result."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = call()
        except BaseException as e:  # noqa: BLE001 - reported to the test thread
            result["error"] = e

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 30
    while handle.in_flight == 0 and worker.is_alive() and time.monotonic() < deadline:
        time.sleep(0.0002)
    assert handle.in_flight == 1, "the call finished before it could be raced; make the input larger"
    during()
    worker.join(60)
    assert not worker.is_alive()
    if "error" in result:
        raise result["error"]
    assert handle.in_flight == 0
    return result["value"]


def test_free_waits_for_the_call_in_flight(tokenizer) -> None:  # noqa: ANN001
    # The mechanism itself, observed: the free callback runs after the call returned, not at close().
    events: list[str] = []
    path = str(materialize_embedded()).encode()
    ptr = call_out("sc_tokenizer *", lib.sc_tokenizer_new, str_arg(path), str_arg(b""))
    handle = Handle(ptr, lambda p: (events.append("freed"), lib.sc_tokenizer_free(p)), "tokenizer")
    data = LONG_TEXT.encode()
    items = ffi.new("sc_str[]", 1)
    keep = ffi.from_buffer("uint8_t[]", data)
    items[0].ptr, items[0].len = keep, len(data)
    options = ffi.new("sc_encode_options *", {"add_special_tokens": True})

    def encode() -> int:
        with handle as tok:
            enc = call_out("sc_encodings *", lib.sc_tokenizer_encode_batch, tok, items, 1, options)
            events.append("returned")
        count = enc.ids_len
        lib.sc_encodings_free(enc)
        return count

    def close() -> None:
        handle.close()
        events.append("closed")

    assert _close_during(encode, handle, close) > 100_000
    assert events == ["closed", "returned", "freed"]
    with pytest.raises(FailedPrecondition, match="tokenizer: already closed"):
        handle.__enter__()
    handle.close()  # idempotent
    assert events.count("freed") == 1


def test_tokenizer_closed_mid_encode(tokenizer) -> None:  # noqa: ANN001
    fresh = BACKEND.load_tokenizer(materialize_embedded())
    expected = tokenizer.encode_batch([LONG_TEXT], EncodeOptions())[0].ids
    got = _close_during(lambda: fresh.encode_batch([LONG_TEXT], EncodeOptions())[0].ids, fresh.handle, fresh.close)
    assert got == expected
    with pytest.raises(FailedPrecondition, match="tokenizer"):
        fresh.encode_batch(["hi"], EncodeOptions())


def test_renderer_closed_mid_render(tokenizer) -> None:  # noqa: ANN001
    templates = [("default", "{% for m in messages %}{{ m.content }}{% endfor %}")]
    renderer = BACKEND.load_renderer(templates, [], tokenizer, RendererSettings(cache_bytes=0))
    opts = RenderOptions(messages_json=json.dumps([{"role": "user", "content": LONG_TEXT}]))
    rendered = _close_during(lambda: renderer.render(opts), renderer._handle, renderer.close)
    assert list(rendered.ids) == tokenizer.encode_batch([LONG_TEXT], EncodeOptions(add_special_tokens=False))[0].ids
    with pytest.raises(FailedPrecondition, match="renderer"):
        renderer.render(opts)
    # The tokenizer it was built from is still fine (the renderer held its own reference).
    assert tokenizer.encode_batch(["hi"], EncodeOptions())[0].ids


def _step(request_id: str, ids: list[int], finished: bool = False) -> bytes:
    item = pb.StepTokens(request_id=request_id, token_ids=ids, finished=finished)
    return pb.ParseStreamRequest(step=pb.Step(items=[item])).SerializeToString()


def test_parse_stream_closed_mid_step(tokenizer) -> None:  # noqa: ANN001
    # The reported crash: a client cancels while its large step runs on a worker.
    model = BACKEND.load_parse_model(tokenizer)
    ids = tokenizer.encode_batch([LONG_TEXT], EncodeOptions(add_special_tokens=False))[0].ids
    mux = BACKEND.new_parse_mux(ParseLimits())
    mux.open(model, "r", "fp", {"tool_parser": "", "reasoning_parser": ""}, [])
    answer = _close_during(lambda: mux.handle(_step("r", ids, True)), mux._handle, mux.close)
    delta = pb.ParseStreamResponse.FromString(answer).deltas[0]
    assert delta.content == LONG_TEXT and delta.finished
    with pytest.raises(FailedPrecondition, match="parse stream: already closed"):
        mux.handle(_step("r", [1]))
    assert len(mux) == 0
    mux.close()


def test_parse_model_closed_mid_bench(tokenizer) -> None:  # noqa: ANN001
    require_native_testing_exports()  # sc_parse_bench
    model = BACKEND.load_parse_model(tokenizer)
    ids = tokenizer.encode_batch([LONG_TEXT[:200_000]], EncodeOptions(add_special_tokens=False))[0].ids
    config = {"tool_parser": "", "reasoning_parser": ""}
    ns = _close_during(lambda: model.bench(config, [], ids, 1, 3), model.handle, model.close)
    assert ns > 0
    with pytest.raises(FailedPrecondition, match="parse model"):
        model.bench(config, [], ids[:10], 1, 1)


def test_kv_index_closed_mid_apply() -> None:
    # The subscriber thread inside a large batch while the server shuts the index down.
    blocks = 300_000
    event = {"type": "BlockStored", "block_hashes": list(range(1, blocks + 1)), "parent_block_hash": None,
             "token_ids": list(range(4 * blocks)), "block_size": 4}
    payload = msgspec.msgpack.encode([0.0, [event]])
    index = NativePrefixIndex(4)
    _close_during(lambda: index.apply_payload("w", payload), index._handle, index.close)
    with pytest.raises(FailedPrecondition, match="kv index: already closed"):
        index.score(list(range(8)))
    index.close()
