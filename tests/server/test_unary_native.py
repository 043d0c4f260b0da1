"""Which path the unary RPCs take: on the native backend Tokenize, Detokenize and Render go from
the raw body to the response bytes in the native core (the servicer's protobuf method is never
called); on the reference backend they go through that method. In process, on the embedded model."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc
import pytest

from sidecar.config import ServerConfig
from sidecar.errors import SidecarError
from sidecar.factory import get_hasher
from sidecar.rpc import Call
from sidecar.runtime import Offloader, Runtime
from sidecar.server import load_registry
from sidecar.servicers.detokenize import DetokenizeServicer
from sidecar.servicers.render import RenderServicer
from sidecar.servicers.tokenize import TokenizeServicer
from sidecar.v1 import preprocessor_pb2 as pb

pytest.importorskip("sidecar.native.multiplex")

SERVICERS = {"Tokenize": TokenizeServicer, "Detokenize": DetokenizeServicer, "Render": RenderServicer}


@pytest.fixture(scope="module", params=["native", "reference"])
def runtime(request: pytest.FixtureRequest) -> Iterator[Runtime]:
    config = ServerConfig(backend=request.param, port=None, metrics_port=None)
    offloader = Offloader.for_config(config)
    yield Runtime(config, load_registry(config), offloader, get_hasher(config.backend))
    offloader.shutdown()


def requests(model: str) -> dict[str, object]:
    return {
        "Tokenize": pb.TokenizeRequest(model=model, texts=["Hello world"]),
        "Detokenize": pb.DetokenizeRequest(model=model, sequences=[pb.TokenIds(token_ids=[9906, 1917]), pb.TokenIds()]),
        "Render": pb.RenderRequest(model=model, messages_json='[{"role": "user", "content": "Hi"}]'),
    }


def raw_call(servicer: object, rpc: str, body: bytes) -> bytes:
    call = Call(rpc, "test", None)
    return asyncio.run(getattr(servicer, f"{rpc}Raw")(body, None, call))


@pytest.mark.parametrize("rpc", sorted(SERVICERS))
def test_the_raw_method_is_native_on_the_native_backend_only(runtime: Runtime, rpc: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    model = next(iter(runtime.registry)).name
    request = requests(model)[rpc]
    servicer = SERVICERS[rpc](runtime)
    python_calls = []
    python_method = getattr(servicer, rpc)

    async def counted(*args: object) -> object:
        python_calls.append(args[0])
        return await python_method(*args)

    monkeypatch.setattr(servicer, rpc, counted)
    answer = type(request).__name__.replace("Request", "Response")
    response = getattr(pb, answer).FromString(raw_call(servicer, rpc, request.SerializeToString()))
    # The Python path answers wire bytes too (serialized with its work, off the loop when large).
    expected = getattr(pb, answer).FromString(asyncio.run(python_method(request, None, Call(rpc, "test", None))))
    assert response == expected
    assert len(python_calls) == (0 if runtime.config.backend == "native" else 1)
    # A refusal comes from the same path, with the unary message.
    with pytest.raises(SidecarError) as refused:
        raw_call(servicer, rpc, type(request)(model="nope").SerializeToString())
    assert refused.value.code == grpc.StatusCode.NOT_FOUND and "nope" in refused.value.message
    assert len(python_calls) == (0 if runtime.config.backend == "native" else 2)
