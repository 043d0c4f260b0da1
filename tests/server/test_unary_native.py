"""Which path the unary RPCs take: on the native backend Tokenize, Detokenize and Render go from
the raw body to the response bytes in the native core (the servicer's protobuf method is never
called); on the reference backend they go through that method. In process, on the embedded model."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc
import pytest

from sidecar.config import ServerConfig
from sidecar.errors import SidecarError, status_of
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


def test_lookahead_block_hashes_and_their_refusals_are_alike_on_both_paths(runtime: Runtime) -> None:
    """`BlockHashing.vllm_lookahead` (vLLM >= 0.33 with an EAGLE/MTP drafter) read by the native
    core's protobuf reader and by `sidecar.hashing`: same hashes, same spec, same refusals."""
    from router_adapter import _reference
    from router_adapter.spec import HashSpec

    model = next(iter(runtime.registry)).name
    servicer = TokenizeServicer(runtime)

    def both(hashing: pb.BlockHashing) -> tuple[object, object]:
        request = pb.TokenizeRequest(model=model, texts=["Hello world, " * 20], block_hashing=hashing)
        out = []
        for call in (lambda: pb.TokenizeResponse.FromString(raw_call(servicer, "Tokenize", request.SerializeToString())),
                     lambda: pb.TokenizeResponse.FromString(asyncio.run(servicer.Tokenize(request, None, Call(
                         "Tokenize", "test", None))))):
            try:
                out.append(call())
            except Exception as e:  # noqa: BLE001 - the status each path answers with
                out.append(status_of(e))
        return out[0], out[1]

    for lookahead in (1, 3):
        raw, python = both(pb.BlockHashing(algorithm="vllm_sha256", block_size=4, seed="0", lora_name="l",
                                           vllm_lookahead=lookahead))
        assert raw == python
        ids = list(raw.encodings[0].token_ids)
        expected = _reference.block_hashes(ids, HashSpec("vllm_sha256", 4, seed="0", lora_name="l", lookahead=lookahead))
        assert list(raw.encodings[0].block_hashes) == expected and len(expected) == (len(ids) - lookahead) // 4
        assert raw.block_hash_spec.vllm_lookahead == lookahead
    for bad, message in [
        (pb.BlockHashing(algorithm="vllm_sha256", block_size=4, vllm_extra_keys="legacy", vllm_lookahead=1),
         "block_hashing.vllm_lookahead: the legacy"),
        (pb.BlockHashing(algorithm="sglang_sha256", block_size=4, vllm_lookahead=1), "block_hashing.vllm_lookahead: only"),
        (pb.BlockHashing(algorithm="vllm_sha256", block_size=4, vllm_lookahead=2**32 - 1),
         "block_hashing.vllm_lookahead: 4294967295 is more than 256"),
        # A block size used to size SGLang's page buffer before any token was read: 16 GiB, and a
        # failed allocation aborts the process.
        (pb.BlockHashing(algorithm="sglang_sha256", block_size=2**32 - 1),
         "block_hashing.block_size: 4294967295 is more than 65536"),
        (pb.BlockHashing(algorithm="dynamo_xxh3", block_size=65537), "block_hashing.block_size: 65537 is more than"),
    ]:
        raw, python = both(bad)
        assert raw == python and raw[0] == grpc.StatusCode.INVALID_ARGUMENT and raw[1].startswith(message), raw
