"""End to end: the real server subscribed to a real ZMQ publisher; Score over gRPC after events;
Tokenize with block hashes; errors as statuses."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import grpc
import pytest
import zmq

from router_adapter import _reference
from router_adapter.spec import HashSpec
from sidecar.v1 import kv_router_pb2 as kv
from sidecar.v1 import kv_router_pb2_grpc as kv_grpc
from sidecar.v1 import preprocessor_pb2 as pb
from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc
from tests.conftest import LiveServer, start_server, stop_server
from tests.kv.publisher import FakeEnginePublisher, removed, stored, wait_until

pytestmark = pytest.mark.e2e

BS = 16
TEXT = "The quick brown fox jumps over the lazy dog. " * 40


@pytest.fixture(scope="module")
def engines() -> Iterator[list[FakeEnginePublisher]]:
    ctx = zmq.Context()
    pubs = [FakeEnginePublisher(ctx), FakeEnginePublisher(ctx, replay=False)]
    yield pubs
    for p in pubs:
        p.close()
    ctx.term()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, engines: list[FakeEnginePublisher]) -> Iterator[LiveServer]:
    a, b = engines
    live = start_server(
        tmp_path_factory.mktemp("kv"),
        "--kv-events", f"worker-a={a.endpoint},replay={a.replay_endpoint},model=qwen3",
        "--kv-events", f"worker-b={b.endpoint},model=qwen3",
        "--kv-block-size", str(BS), "--kv-max-message-size", str(64 << 10),
    )
    a.wait_for_subscriber(30)
    b.wait_for_subscriber(30)
    yield live
    stop_server(live)


def stubs(live: LiveServer) -> tuple[pb_grpc.PreprocessorStub, kv_grpc.KvRouterStub]:
    channel = grpc.insecure_channel(live.tcp)
    return pb_grpc.PreprocessorStub(channel), kv_grpc.KvRouterStub(channel)


def test_score_after_real_events(server: LiveServer, engines: list[FakeEnginePublisher]) -> None:
    pre, router = stubs(server)
    ids = list(pre.Tokenize(pb.TokenizeRequest(model="qwen3", texts=[TEXT])).encodings[0].token_ids)
    n = len(ids) // BS
    assert n >= 8
    engine = HashSpec("vllm_sha256", BS)
    hashes = _reference.block_hashes(ids, engine)
    a, b = engines
    a.publish([stored(hashes[:n], ids[: n * BS], BS)])
    b.publish([stored(hashes[:3], ids[: 3 * BS], BS), removed([hashes[2]])])

    def score() -> kv.ScoreResponse:
        return router.Score(kv.ScoreRequest(model="qwen3", token_ids=pb.TokenIds(token_ids=ids)))

    wait_until(lambda: [(w.worker, w.blocks) for w in score().workers] == [("worker-a", n), ("worker-b", 2)],
               what="scores after events")
    response = score()
    assert response.block_size == BS and response.mode == "content" and response.num_tokens == len(ids)
    assert len(response.block_hashes) == n
    assert response.workers[0].tokens == n * BS and dict(response.workers[0].blocks_by_medium) == {"GPU": n}

    # Text input is tokenized by the server with the same tokenizer: same scores.
    by_text = router.Score(kv.ScoreRequest(model="qwen3", text=TEXT))
    assert list(by_text.block_hashes) == list(response.block_hashes) and by_text.fingerprint
    # A chat request is rendered as Render renders it: its blocks are the rendered prompt's blocks.
    chat = '[{"role": "user", "content": "Which worker has this conversation cached?"}]'
    rendered = pre.Render(pb.RenderRequest(model="qwen3", messages_json=chat))
    by_messages = router.Score(kv.ScoreRequest(model="qwen3", messages_json=chat))
    by_rendered_ids = router.Score(kv.ScoreRequest(model="qwen3", token_ids=pb.TokenIds(token_ids=rendered.token_ids)))
    assert by_messages.num_tokens == len(rendered.token_ids) and by_messages.fingerprint == rendered.fingerprint
    assert list(by_messages.block_hashes) == list(by_rendered_ids.block_hashes)
    # A salted request matches nothing those workers stored.
    salted = router.Score(kv.ScoreRequest(model="qwen3", token_ids=pb.TokenIds(token_ids=ids), cache_salt="t"))
    assert all(w.blocks == 0 for w in salted.workers)

    status = router.KvStatus(kv.KvStatusRequest())
    assert status.models[0].model == "qwen3" and status.models[0].blocks == n + 2
    assert {w.worker: w.blocks for w in status.workers} == {"worker-a": n, "worker-b": 2}

    # The index is visible to Prometheus.
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read().decode()
    assert f'sidecar_kv_blocks{{model="qwen3"}} {float(n + 2)}' in text
    assert 'sidecar_kv_sequence_gaps_total{worker="worker-b"} 0.0' in text


def test_a_message_over_the_size_bound_is_a_counted_disconnection(
        server: LiveServer, engines: list[FakeEnginePublisher]) -> None:
    """`--kv-max-message-size` bounds what the server takes from an engine: a larger batch drops
    the connection (made again) and is lost as a gap, counted as a disconnection (metric and KvStatus)
    and logged."""
    import urllib.request

    _, router = stubs(server)
    b = engines[1]

    def metrics() -> str:
        return urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=10).read().decode()

    def row() -> kv.KvStatusResponse:
        return next(w for w in router.KvStatus(kv.KvStatusRequest()).workers if w.worker == "worker-b")

    # A batch first, so that the subscriber knows the publisher's sequence whatever ran before
    # (alone, this test saw no gap: the lost message was the first it could have numbered).
    batches = row().batches
    b.publish([stored([6], list(range(60_000, 60_000 + BS)), BS)])
    wait_until(lambda: row().batches == batches + 1, what="a first batch")
    gaps = row().gaps
    tokens = list(range(70_000, 70_000 + BS))
    b.publish([stored([7], tokens, BS, lora_name="x" * (80 << 10))])
    wait_until(lambda: 'sidecar_kv_disconnects_total{worker="worker-b"} 1.0' in metrics(), what="the disconnection")
    wait_until(lambda: b.pub.poll(10) and b.pub.recv()[:1] == b"\x01", what="the subscription again")
    b.publish([stored([8], tokens, BS)])
    wait_until(lambda: row().batches == batches + 2, what="the batch after it")
    assert row().gaps == gaps + 1
    assert row().disconnects == 1
    # Logged as the server's other lines are (a JSON line), not as bare text on stderr.
    (line,) = [e for e in server.log_lines() if e.get("event") == "kv_events_disconnected"]
    assert line["level"] == "warning" and line["detail"].startswith("worker=worker-b ")


def test_score_errors(server: LiveServer) -> None:
    _, router = stubs(server)
    cases = [
        (kv.ScoreRequest(model="nope", text="x"), grpc.StatusCode.NOT_FOUND, "model"),
        (kv.ScoreRequest(model="qwen3"), grpc.StatusCode.INVALID_ARGUMENT, "input"),
        (kv.ScoreRequest(model="qwen3", messages_json="[{"), grpc.StatusCode.INVALID_ARGUMENT, "messages_json"),
    ]
    for request, code, field in cases:
        with pytest.raises(grpc.RpcError) as info:
            router.Score(request)
        assert info.value.code() == code and field in info.value.details()


def test_tokenize_returns_engine_block_hashes(server: LiveServer) -> None:
    pre, _ = stubs(server)
    hashing = pb.BlockHashing(algorithm="vllm_sha256_cbor", block_size=BS, seed="0", cache_salt="s")
    response = pre.Tokenize(pb.TokenizeRequest(model="qwen3", texts=[TEXT, "short"], block_hashing=hashing))
    spec = response.block_hash_spec
    assert (spec.algorithm, spec.block_size, spec.seed, spec.event_value, spec.vllm_extra_keys) == (
        "vllm_sha256_cbor", BS, "0", "last8_be_unsigned", "tagged")
    ids = list(response.encodings[0].token_ids)
    expected = _reference.block_hashes(ids, HashSpec("vllm_sha256_cbor", BS, seed="0", cache_salt="s"))
    assert list(response.encodings[0].block_hashes) == expected and len(expected) == len(ids) // BS
    assert list(response.encodings[1].block_hashes) == []
    # The default seed is reported when none is given.
    unset = pre.Tokenize(pb.TokenizeRequest(model="qwen3", texts=["x"], block_hashing=pb.BlockHashing(
        algorithm="vllm_sha256", block_size=BS)))
    assert unset.block_hash_spec.seed == "vllm-none-hash"
    for bad, field in [(pb.BlockHashing(algorithm="vllm_xxhash", block_size=BS), "block_hashing.seed"),
                       (pb.BlockHashing(algorithm="md5", block_size=BS), "block_hashing.algorithm"),
                       (pb.BlockHashing(algorithm="vllm_sha256"), "block_hashing.block_size")]:
        with pytest.raises(grpc.RpcError) as info:
            pre.Tokenize(pb.TokenizeRequest(model="qwen3", texts=["x"], block_hashing=bad))
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT and field in info.value.details()


def test_kv_router_without_sources_is_failed_precondition(tmp_path: Path) -> None:
    live = start_server(tmp_path)
    try:
        _, router = stubs(live)
        with pytest.raises(grpc.RpcError) as info:
            router.Score(kv.ScoreRequest(text="x"))
        assert info.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    finally:
        stop_server(live)


def test_engine_mode_scores_a_lora_request_by_its_adapters_path(
    tmp_path: Path, engines: list[FakeEnginePublisher]
) -> None:
    """vLLM >= 0.31 hashes the adapter's path into every block: Score's `lora_path` reaches the
    request's hashing on both paths (token ids, answered natively; text, through Python)."""
    publisher = FakeEnginePublisher(engines[0].pub.context, replay=False)
    live = start_server(tmp_path, "--kv-events", f"worker-a={publisher.endpoint},model=qwen3",
                        "--kv-block-size", str(BS), "--kv-engine-hash", "qwen3=vllm_sha256_cbor,seed=0")
    try:
        publisher.wait_for_subscriber(30)
        pre, router = stubs(live)
        ids = list(pre.Tokenize(pb.TokenizeRequest(model="qwen3", texts=[TEXT])).encodings[0].token_ids)
        n = len(ids) // BS
        lora = {"lora_name": "sql", "lora_path": "/adapters/sql"}
        hashes = _reference.block_hashes(ids, HashSpec("vllm_sha256_cbor", BS, seed="0", **lora))
        publisher.publish([stored(hashes[:n], ids[: n * BS], BS, lora_name="sql")])

        def depth(**request: object) -> int:
            # No workers until the subscriber has applied the store: 0 then, and wait on.
            workers = router.Score(kv.ScoreRequest(model="qwen3", **request)).workers
            return workers[0].blocks if workers else 0

        by_ids = {"token_ids": pb.TokenIds(token_ids=ids)}
        wait_until(lambda: depth(**by_ids, **lora) == n, what="the adapter's blocks")
        assert depth(text=TEXT, add_special_tokens=False, **lora) == n
        assert depth(**by_ids, lora_name="sql") == 0 and depth(text=TEXT, lora_name="sql") == 0
    finally:
        stop_server(live)
        publisher.close()
