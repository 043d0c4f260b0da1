"""Values from the client that an error message repeats are cut: each field with a long value gets
its status naming the field, the message repeats 200 characters of the value and says how long it
was, and both backends (the native core and Python) say exactly the same. Messages quoted values
whole: a 16.5 KB model name made the status pass gRPC's 16 KiB metadata limit, so the client got
RESOURCE_EXHAUSTED "Stream removed" instead; a 30 MB one wrote 180 MB of log. In process, on the
embedded model, through the raw unary path each backend serves."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import grpc
import pytest

from router_adapter.errors import QUOTED_CHARS, RouterAdapterError, quoted
from sidecar.config import ServerConfig
from sidecar.errors import MAX_MESSAGE_BYTES, SidecarError, status_of
from sidecar.factory import get_hasher
from sidecar.rpc import Call
from sidecar.runtime import Offloader, Runtime
from sidecar.server import load_registry
from sidecar.servicers.render import RenderServicer
from sidecar.servicers.tokenize import TokenizeServicer
from sidecar.v1 import preprocessor_pb2 as pb

pytest.importorskip("sidecar.native.multiplex")

LONG = 100_000
HI = '[{"role": "user", "content": "Hi"}]'


def long(letter: str) -> str:
    return letter * LONG


def render(**fields: object) -> pb.RenderRequest:
    return pb.RenderRequest(**{"model": "qwen3", "messages_json": HI, **fields})


def hashing(**fields: object) -> pb.TokenizeRequest:
    spec = {"algorithm": "vllm_sha256_cbor", "block_size": 16, **fields}
    return pb.TokenizeRequest(model="qwen3", texts=["Hi"], block_hashing=pb.BlockHashing(**spec))


#: (case, RPC, request, status, the message's start). Every value is LONG characters.
CASES = [
    ("Tokenize model", "Tokenize", pb.TokenizeRequest(model=long("m"), texts=["Hi"]), grpc.StatusCode.NOT_FOUND,
     "model: unknown model 'mmm"),
    ("Render model", "Render", render(model=long("m")), grpc.StatusCode.NOT_FOUND, "model: unknown model 'mmm"),
    ("chat_template name", "Render", render(chat_template=long("t")), grpc.StatusCode.NOT_FOUND,
     'chat_template: this model has no template named "ttt'),
    ("tools[0].type", "Render",
     render(tools_json=json.dumps([{"type": long("x"), "function": {"name": "f"}}])),
     grpc.StatusCode.INVALID_ARGUMENT, 'tools[0].type: expected "function", got "xxx'),
    ("tools[0].function.strict", "Render",
     render(tools_json=json.dumps([{"type": "function", "function": {"name": "f", "strict": long("s")}}])),
     grpc.StatusCode.INVALID_ARGUMENT, 'tools[0].function.strict: expected a boolean or null, got "sss'),
    ("tool call type", "Render",
     render(messages_json=json.dumps([{"role": "user", "content": "Hi"}, {"role": "assistant", "tool_calls": [
         {"id": "c", "type": long("c"), "function": {"name": "f", "arguments": "{}"}}]}])),
     grpc.StatusCode.INVALID_ARGUMENT, 'messages[1].tool_calls[0].type: expected "function", got "ccc'),
    ("content part type", "Render",
     render(messages_json=json.dumps([{"role": "user", "content": [{"type": long("p"), "text": "x"}]}])),
     grpc.StatusCode.INVALID_ARGUMENT, 'messages[0].content[0].type: unsupported content part type "ppp'),
    ("block_hashing.algorithm", "Tokenize", hashing(algorithm=long("a")), grpc.StatusCode.INVALID_ARGUMENT,
     "block_hashing.algorithm: unknown 'aaa"),
    ("block_hashing.vllm_extra_keys", "Tokenize", hashing(vllm_extra_keys=long("k")),
     grpc.StatusCode.INVALID_ARGUMENT, "block_hashing.vllm_extra_keys: expected 'tagged' or 'legacy', got 'kkk"),
    ("block_hashing.sglang_event_format", "Tokenize",
     hashing(algorithm="sglang_sha256", sglang_event_format=long("f")), grpc.StatusCode.INVALID_ARGUMENT,
     "block_hashing.sglang_event_format: expected 'default' or 'dynamo', got 'fff"),
]

SERVICERS = {"Tokenize": TokenizeServicer, "Render": RenderServicer}


@pytest.fixture(scope="module")
def runtimes() -> Iterator[dict[str, Runtime]]:
    out = {}
    for backend in ("native", "reference"):
        config = ServerConfig(backend=backend, port=None, metrics_port=None, allow_request_templates=True)
        out[backend] = Runtime(config, load_registry(config), Offloader.for_config(config), get_hasher(backend))
    yield out
    for runtime in out.values():
        runtime.offloader.shutdown()


def refusal(runtime: Runtime, rpc: str, request: object) -> tuple[grpc.StatusCode, str]:
    """The status the call is answered with (the library's own errors mapped as the server maps them)."""
    servicer = SERVICERS[rpc](runtime)
    with pytest.raises((SidecarError, RouterAdapterError)) as refused:
        asyncio.run(getattr(servicer, f"{rpc}Raw")(request.SerializeToString(), None, Call(rpc, "test", None)))
    return status_of(refused.value)


@pytest.mark.parametrize(("case", "rpc", "request_", "code", "start"), CASES, ids=[c[0] for c in CASES])
def test_a_long_value_is_cut_in_its_fields_message_alike_on_both_backends(
    runtimes: dict[str, Runtime], case: str, rpc: str, request_: object, code: grpc.StatusCode, start: str,
) -> None:
    messages = {}
    for backend, runtime in runtimes.items():
        status, message = refusal(runtime, rpc, request_)
        assert status == code, (backend, message)
        assert message.startswith(start), (backend, message[:300])
        assert f"... ({LONG} characters)" in message, (backend, message[:400])
        # The value's first 200 characters and no more.
        letter = start[-1]
        assert letter * QUOTED_CHARS in message and letter * (QUOTED_CHARS + 1) not in message
        assert len(message) < 1000, backend
        messages[backend] = message
    assert messages["native"] == messages["reference"]


def test_a_value_at_the_bound_is_shown_whole(runtimes: dict[str, Runtime]) -> None:
    for length, cut in ((QUOTED_CHARS, False), (QUOTED_CHARS + 1, True)):
        request = pb.TokenizeRequest(model="é" * length, texts=["Hi"])
        messages = {backend: refusal(runtime, "Tokenize", request)[1] for backend, runtime in runtimes.items()}
        assert messages["native"] == messages["reference"]
        shown = "é" * QUOTED_CHARS
        expected = f"'{shown}'... ({length} characters)" if cut else f"'{shown}'"
        assert messages["native"].startswith(f"model: unknown model {expected};"), messages["native"][:300]


def test_what_a_template_raises_is_cut_to_the_message_bound(runtimes: dict[str, Runtime]) -> None:
    """Text nobody quoted (what a template raises, here a request template; a model's template may
    raise with a message's content) is cut to 4 KiB, saying so, alike on both backends."""
    source = "{{ raise_exception('ä' * 20000) }}"
    messages = {}
    for backend, runtime in runtimes.items():
        status, message = refusal(runtime, "Render", render(chat_template=source))
        assert status == grpc.StatusCode.INVALID_ARGUMENT
        assert message.startswith("chat template error: ää"), message[:100]
        assert message.endswith("... (message cut: 40021 bytes)"), message[-100:]
        assert len(message.encode()) <= MAX_MESSAGE_BYTES
        messages[backend] = message
    assert messages["native"] == messages["reference"]


def test_quoted_keeps_the_messages_style() -> None:
    assert quoted("qwen") == "'qwen'"
    assert quoted("it's") == '"it\'s"'
    assert quoted("a" * 201, json.dumps) == f'"{"a" * 200}"... (201 characters)'
    assert quoted("b" * 300, str) == "b" * 200 + "... (300 characters)"
