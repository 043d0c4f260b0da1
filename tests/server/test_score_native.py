"""Which path KvRouter.Score takes from its raw body: on the native backend a `token_ids` request
has its ids split off natively and scored from that buffer (the request is never decoded into a
protobuf message) and answers exactly as `Score` does on the same index; every other request, and
every request on the reference backend, is decoded and goes where `Score` goes (`_score`). In
process, on the embedded model."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator

import grpc
import pytest
from prometheus_client import REGISTRY

from router_adapter import KvRouter, ModelOptions
from router_adapter.events import Batch, BlockStored
from sidecar.config import ServerConfig
from sidecar.errors import SidecarError
from sidecar.factory import get_hasher, get_index_factory
from sidecar.rpc import Call
from sidecar.runtime import Offloader, Runtime
from sidecar.server import load_registry
from sidecar.servicers import kv_router
from sidecar.servicers.kv_router import KvRouterServicer
from sidecar.v1 import kv_router_pb2 as kv
from sidecar.v1 import preprocessor_pb2 as pb

pytest.importorskip("sidecar.native.kv_index")

BS = 16
MODEL = "qwen3"
MAX_IDS = 40_000
PROMPT = [random.Random(7).randrange(150_000) for _ in range(32 * 1024)]


@pytest.fixture(scope="module", params=["native", "reference"])
def servicer(request: pytest.FixtureRequest) -> Iterator[KvRouterServicer]:
    config = ServerConfig(backend=request.param, port=None, metrics_port=None, max_token_ids=MAX_IDS)
    offloader = Offloader.for_config(config)
    hasher = get_hasher(config.backend)
    runtime = Runtime(config, load_registry(config), offloader, hasher)
    router = KvRouter([], models={MODEL: ModelOptions(block_size=BS)}, hasher=hasher,
                      index_factory=get_index_factory(config.backend))
    # Two workers holding prefixes of different lengths of the 32k-token prompt.
    for worker, blocks in (("w0", 2048), ("w1", 5)):
        stored = BlockStored(list(range(1, blocks + 1)), None, PROMPT[: blocks * BS], BS)
        router.feed_batch(MODEL, worker, Batch(0.0, [stored]))
    yield KvRouterServicer(runtime, router)
    router.stop()
    offloader.shutdown()


def native(servicer: KvRouterServicer) -> bool:
    return servicer._runtime.config.backend == "native"


def raw_score(servicer: KvRouterServicer, body: bytes, call: Call | None = None) -> kv.ScoreResponse:
    return kv.ScoreResponse.FromString(asyncio.run(servicer.ScoreRaw(body, None, call or Call("Score", "t", None))))


def python_score(servicer: KvRouterServicer, request: kv.ScoreRequest) -> kv.ScoreResponse:
    return asyncio.run(servicer.Score(request, None, Call("Score", "t", None)))


@pytest.fixture
def paths(servicer: KvRouterServicer, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How many calls each path took: the native split's, the decoded request's (`Score`'s)."""
    counts = {"split": 0, "python": 0}
    split, method = kv_router.split_score, servicer._score

    def counted_split(body: bytes) -> object:
        counts["split"] += 1
        return split(body)

    async def counted_method(*args: object, **kwargs: object) -> object:
        counts["python"] += 1
        return await method(*args, **kwargs)

    if split is not None:
        monkeypatch.setattr(kv_router, "split_score", counted_split)
    monkeypatch.setattr(servicer, "_score", counted_method)
    return counts


def token_requests() -> list[kv.ScoreRequest]:
    def ids(n: int, **fields: object) -> kv.ScoreRequest:
        return kv.ScoreRequest(model=MODEL, token_ids=pb.TokenIds(token_ids=PROMPT[:n]), **fields)

    return [
        ids(len(PROMPT)),  # above the inline bound: split and scored on a worker
        ids(100),
        ids(0),
        ids(BS * 3, lora_name="l"),
        ids(BS * 3, cache_salt="s"),
        ids(BS * 8, mm_items=[pb.MultimodalItem(identifier="img", offset=1, length=2)]),
        kv.ScoreRequest(token_ids=pb.TokenIds(token_ids=PROMPT[:64])),  # the only model
    ]


def test_token_ids_are_scored_natively_as_the_python_path_scores_them(servicer: KvRouterServicer,
                                                                    paths: dict[str, int]) -> None:
    requests = token_requests()
    responses = []
    for request in requests:
        call = Call("Score", "t", None)
        responses.append(raw_score(servicer, request.SerializeToString(), call))
        assert call.model == request.model
    assert [(w.worker, w.blocks) for w in responses[0].workers] == [("w0", 2048), ("w1", 5)]
    assert paths == ({"split": len(requests), "python": 0} if native(servicer) else {"split": 0, "python": len(requests)})
    assert responses == [python_score(servicer, request) for request in requests]


def test_other_inputs_go_through_the_python_path(servicer: KvRouterServicer, paths: dict[str, int]) -> None:
    ids = pb.TokenIds(token_ids=PROMPT[:64])
    requests = [
        kv.ScoreRequest(model=MODEL, text="Hello world"),
        kv.ScoreRequest(model=MODEL, messages_json='[{"role": "user", "content": "Hi"}]'),
        # The last member of the oneof wins: token ids then text is a text request.
        kv.ScoreRequest(model=MODEL, token_ids=ids).SerializeToString() + kv.ScoreRequest(text="Hi").SerializeToString(),
    ]
    for request in requests:
        body = request if isinstance(request, bytes) else request.SerializeToString()
        assert raw_score(servicer, body) == python_score(servicer, kv.ScoreRequest.FromString(body))
    assert paths["split"] == (len(requests) if native(servicer) else 0)
    assert paths["python"] == 2 * len(requests)


def refusal(servicer: KvRouterServicer, body: bytes) -> tuple[grpc.StatusCode, str, str]:
    call = Call("Score", "t", None)
    with pytest.raises(SidecarError) as refused:
        raw_score(servicer, body, call)
    return refused.value.code, refused.value.message, call.model


def test_refusals_are_the_python_paths(servicer: KvRouterServicer) -> None:
    for request, code in [
        (kv.ScoreRequest(model="nope", token_ids=pb.TokenIds(token_ids=[1])), grpc.StatusCode.NOT_FOUND),
        (kv.ScoreRequest(model=MODEL, token_ids=pb.TokenIds(token_ids=[1]), mm_items=[pb.MultimodalItem()]),
         grpc.StatusCode.INVALID_ARGUMENT),
        (kv.ScoreRequest(model=MODEL, token_ids=pb.TokenIds(token_ids=PROMPT + PROMPT)), grpc.StatusCode.RESOURCE_EXHAUSTED),
        # offset + length past 2^64: the native index refused it naming another message's field.
        (kv.ScoreRequest(model=MODEL, token_ids=pb.TokenIds(token_ids=[1]),
                         mm_items=[pb.MultimodalItem(identifier="img", offset=2**63, length=2**63)]),
         grpc.StatusCode.INVALID_ARGUMENT),
        (kv.ScoreRequest(model=MODEL, text="hello",
                         mm_items=[pb.MultimodalItem(identifier="img", offset=2**63, length=2**63)]),
         grpc.StatusCode.INVALID_ARGUMENT),
        # An offset past the engine's int64 positions: either index's spec refused it, naming
        # `block_hashing.mm_items`, which a Score request has not.
        (kv.ScoreRequest(model=MODEL, token_ids=pb.TokenIds(token_ids=[1]),
                         mm_items=[pb.MultimodalItem(identifier="img", offset=2**63, length=0)]),
         grpc.StatusCode.INVALID_ARGUMENT),
        # Items out of order: content keys now walk them as the engine does, and refuse them.
        (kv.ScoreRequest(model=MODEL, token_ids=pb.TokenIds(token_ids=[1]),
                         mm_items=[pb.MultimodalItem(identifier="b", offset=5, length=1),
                                   pb.MultimodalItem(identifier="a", offset=1, length=1)]),
         grpc.StatusCode.INVALID_ARGUMENT),
        (kv.ScoreRequest(model=MODEL), grpc.StatusCode.INVALID_ARGUMENT),
    ]:
        with pytest.raises(SidecarError) as expected:
            python_score(servicer, request)
        assert refusal(servicer, request.SerializeToString()) == (code, expected.value.message, request.model)
        assert expected.value.code == code
        assert "block_hashing" not in expected.value.message


def test_a_malformed_body_is_refused_and_counted_as_before(servicer: KvRouterServicer) -> None:
    def malformed() -> float:
        return REGISTRY.get_sample_value("sidecar_malformed_requests_total", {"rpc": "Score"}) or 0.0

    body = kv.ScoreRequest(model=MODEL, token_ids=pb.TokenIds(token_ids=[1, 2, 300])).SerializeToString()
    for bad in (body[:-1], b"\x0a\x02\xff\xfe" + body):  # cut short; a model that is not UTF-8
        before = malformed()
        code, message, _ = refusal(servicer, bad)
        assert (code, message.split(" (")[0]) == (
            grpc.StatusCode.INVALID_ARGUMENT, "ScoreRequest: the request body is not a valid ScoreRequest")
        assert malformed() == before + 1


def test_an_id_above_32_bits_is_refused_natively_not_truncated(servicer: KvRouterServicer) -> None:
    # token_ids { 7, 2^32 (packed) }
    body = kv.ScoreRequest(model=MODEL).SerializeToString() + b"\x22\x09\x0a\x07\x07\x80\x80\x80\x80\x10\x09"
    if not native(servicer):
        assert raw_score(servicer, body).num_tokens == 3  # protobuf truncates it to token 0
        return
    assert refusal(servicer, body) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        "token_ids.token_ids[1]: 4294967296 is not a token id (token ids are below 2^32)", MODEL,
    )


def test_an_id_whose_varint_runs_past_64_bits_is_refused_not_truncated(servicer: KvRouterServicer) -> None:
    """A tenth varint byte above 1: the native split called the body malformed and fell back to
    protobuf, which drops the extra bits and scored the id as 4294967295."""
    # token_ids { 7, <10-byte varint whose last byte is 0x7f> } (packed)
    ids = b"\x07" + b"\xff" * 9 + b"\x7f"
    body = kv.ScoreRequest(model=MODEL).SerializeToString() + b"\x22" + bytes([len(ids) + 2, 0x0a, len(ids)]) + ids
    assert list(kv.ScoreRequest.FromString(body).token_ids.token_ids) == [7, 4294967295]  # what protobuf reads
    if not native(servicer):
        return  # the reference path reads ids as protobuf does (see the test above)
    code, message, _ = refusal(servicer, body)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert message.startswith("token_ids.token_ids[1]: a varint past 64 bits is not a token id")


def test_an_empty_model_names_the_only_kv_model_for_every_input(servicer: KvRouterServicer) -> None:
    """The contract: an empty `model` means the only KV model, whatever the input; text and
    messages were looked up under the empty name (NOT_FOUND) while token ids were scored."""
    ids = pb.TokenIds(token_ids=PROMPT[:64])
    for named in (kv.ScoreRequest(model=MODEL, text="Hello world"), kv.ScoreRequest(model=MODEL, token_ids=ids),
                  kv.ScoreRequest(model=MODEL, messages_json='[{"role": "user", "content": "Hi"}]')):
        unnamed = kv.ScoreRequest()
        unnamed.CopyFrom(named)
        unnamed.model = ""
        assert python_score(servicer, unnamed) == python_score(servicer, named)


def test_kv_status_reads_the_index_on_a_worker(servicer: KvRouterServicer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The event rate and the per-worker counts take the index's lock, which an apply or a restore
    holds for as long as its payload takes: read on the event loop, KvStatus stalled every RPC."""
    import threading

    index = servicer._router.index(MODEL)
    loop_thread = threading.current_thread()
    read_on: list[bool] = []
    real = type(index).events_per_second

    def recording(self):  # noqa: ANN001, ANN202
        read_on.append(threading.current_thread() is loop_thread)
        return real(self)

    monkeypatch.setattr(type(index), "events_per_second", recording)
    offloader = servicer._runtime.offloader
    real_run, runs = offloader.run, []

    async def run(fn, cost, rpc, bounded=True, stage="native"):  # noqa: ANN001, ANN202
        runs.append((cost <= offloader._huge_bytes, bounded))
        return await real_run(fn, cost, rpc, bounded, stage)

    monkeypatch.setattr(offloader, "run", run)
    status = asyncio.run(servicer.KvStatus(kv.KvStatusRequest(), None, Call("KvStatus", "t", None)))
    assert read_on == [False]
    # Not in the huge lane (half the workers, behind template renders) and never refused by a full
    # queue: monitoring answers when the server is busy.
    assert runs == [(True, False)]
    assert [(m.model, m.blocks) for m in status.models] == [(MODEL, 2048 + 5)]


def test_a_small_score_by_messages_renders_off_the_loop(servicer: KvRouterServicer) -> None:
    """A template's prompt can be many times its request (mistral-nemo's: a 13.6 KB request rendered
    723K characters, 10 ms on the loop per Score): a Score of `messages_json` renders on a worker
    whatever its size, as Render's Python path does."""
    import threading

    loop_thread = threading.current_thread()
    rendered_on: list[bool] = []
    renderer = servicer._runtime.registry.get(MODEL).renderer
    real = renderer.render

    def recording(opts):  # noqa: ANN001, ANN202
        rendered_on.append(threading.current_thread() is loop_thread)
        return real(opts)

    renderer.render = recording  # type: ignore[method-assign]
    try:
        body = kv.ScoreRequest(model=MODEL, messages_json='[{"role": "user", "content": "Hi"}]').SerializeToString()
        assert len(body) < servicer._runtime.config.inline_bytes
        assert raw_score(servicer, body).workers is not None
    finally:
        del renderer.render
    assert rendered_on == [False]
