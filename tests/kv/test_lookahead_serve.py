"""A configured lookahead (`sidecar serve --kv-lookahead`, `ModelOptions.lookahead`): a fresh server
keys requests over vLLM's lookahead windows before any store has told it L, `KvStatus` reports each
index's L (configured, or learned: unset until then), and a `--kv-nats` replica configured with
another L than a snapshot's refuses it and reads the stream; with both index kinds (the native one
and the Python `PrefixIndex`).

Data first: the stores are vLLM 0.33.0's own (tests/data/kv/events/vllm-0.33-lookahead-*.msgpack),
and each request's `engine_blocks` is what vLLM's own hasher finds held
(tests/kv/generate_lookahead_events.py); one publisher and model per scenario."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import grpc
import msgspec
import pytest
import zmq

from router_adapter import KvRouter, ModelOptions, PrefixIndex, Source
from router_adapter.nats_feed import LIVE, FeedOptions, NatsFeed
from sidecar.native.kv_index import NativePrefixIndex
from sidecar.v1 import kv_router_pb2 as kv
from sidecar.v1 import kv_router_pb2_grpc as kv_grpc
from sidecar.v1 import preprocessor_pb2 as pb
from tests.conftest import start_server, stop_server
from tests.kv.nats_server import NatsServer
from tests.kv.publisher import FakeEnginePublisher, wait_until
from tests.kv.test_lookahead import SCENARIOS, load, request_args
from tests.kv.test_nats_fanout import ThreadRelay

pytestmark = pytest.mark.e2e

BS = 4


@pytest.fixture()
def engines() -> Iterator[dict[str, FakeEnginePublisher]]:
    ctx = zmq.Context()
    pubs = {name: FakeEnginePublisher(ctx, replay=False) for name in SCENARIOS}
    yield pubs
    for p in pubs.values():
        p.close()
    ctx.term()


def score_request(model: str, r: dict) -> kv.ScoreRequest:
    return kv.ScoreRequest(
        model=model, token_ids=pb.TokenIds(token_ids=r["token_ids"]), lora_name=r["lora_name"] or "",
        cache_salt=r["cache_salt"], mm_items=[pb.MultimodalItem(identifier=i, offset=o, length=n)
                                              for i, o, n in r["mm_items"]])


def windows(r: dict, lookahead: int) -> int:
    """The request's blocks whose whole window (B tokens and the L after them) exists."""
    return max(0, (len(r["token_ids"]) - lookahead) // BS)


@pytest.mark.parametrize("flagged", [True, False], ids=["flag", "learned"])
@pytest.mark.parametrize("backend", ["native", "reference"])
def test_lookahead_before_and_after_the_first_store(
    tmp_path: Path, engines: dict[str, FakeEnginePublisher], backend: str, flagged: bool
) -> None:
    data = {name: load(name) for name in SCENARIOS}
    want = {name: expected["lookahead"] for name, (_, expected) in data.items()}
    assert set(want.values()) == {1, 3}  # the bare flag and a model's own both matter
    sources = [a for name, pub in engines.items() for a in ("--kv-events", f"w-{name}={pub.endpoint},model={name}")]
    flags = ["--kv-lookahead", "1", "--kv-lookahead", "mixed=3"] if flagged else []
    live = start_server(tmp_path, "--backend", backend, *sources, "--kv-block-size", str(BS), *flags)
    try:
        for pub in engines.values():
            pub.wait_for_subscriber(30)
        router = kv_grpc.KvRouterStub(grpc.insecure_channel(live.tcp))

        def status() -> dict[str, kv.KvModelStatus]:
            return {m.model: m for m in router.KvStatus(kv.KvStatusRequest(), timeout=10).models}

        def lookaheads() -> dict[str, int | None]:
            return {name: m.lookahead if m.HasField("lookahead") else None for name, m in status().items()}

        # Before any event: configured, or not known (unset, not 0: 0 would be a value).
        assert lookaheads() == (want if flagged else dict.fromkeys(SCENARIOS))
        before = {}
        for name, (_, expected) in data.items():
            for i, r in enumerate(expected["requests"]):
                response = router.Score(score_request(name, r), timeout=10)
                assert not response.workers
                # Keyed over the engine's windows from the start; without the flag, over bare blocks.
                assert len(response.block_hashes) == windows(r, want[name] if flagged else 0), (name, r)
                before[name, i] = list(response.block_hashes)

        for name, (payload, expected) in data.items():
            _, events, _ = msgspec.msgpack.decode(payload)
            engines[name].publish(events)
        wait_until(lambda: all(m.events == len(msgspec.msgpack.decode(data[name][0])[1]) for name, m in status().items()),
                   what="every store applied")

        assert lookaheads() == want
        for name, (_, expected) in data.items():
            for i, r in enumerate(expected["requests"]):
                response = router.Score(score_request(name, r), timeout=10)
                assert response.workers[0].blocks == r["engine_blocks"], (name, r)
                assert len(response.block_hashes) == windows(r, want[name])
                if flagged:  # the keys were right before the stores came
                    assert list(response.block_hashes) == before[name, i]
        assert all(m.skipped_events == 0 for m in status().values())
    finally:
        stop_server(live)


@pytest.mark.parametrize("factory", [PrefixIndex, NativePrefixIndex], ids=["python", "native"])
def test_a_replica_configured_with_another_lookahead_reads_the_stream_instead_of_the_snapshot(
    nats_server: NatsServer, factory, caplog: pytest.LogCaptureFixture  # noqa: ANN001
) -> None:
    """The flag wins over a snapshot: keys made over other windows would never match the requests
    it keys, so the snapshot is refused (logged) and the stream read from its start, where the
    stores of the other lookahead are skipped and counted. A replica configured with the
    snapshot's L, or with none, loads it (the latter takes its L)."""
    model = "m"
    payload, expected = load("over")  # L = 1
    ctx = zmq.Context()
    engine = FakeEnginePublisher(ctx)
    relay = ThreadRelay(Source("w0", engine.endpoint, engine.replay_endpoint, model=model), nats_server.url)
    routers = []

    def replica(lookahead: int | None) -> tuple[KvRouter, NatsFeed]:
        router = KvRouter([], models={model: ModelOptions(block_size=BS, lookahead=lookahead)}, index_factory=factory)
        feed = NatsFeed(router, FeedOptions(nats_server.url, snapshot_period_s=0.0, silence_timeout_s=None))
        router.attach_feed(feed)
        routers.append(router)
        router.start()
        wait_until(lambda: feed.models[model].state == LIVE and router.index(model).stats.events == 1, 30,
                   "the replica to apply the store")
        return router, feed

    def depths(router: KvRouter) -> list[int]:
        scores = [router.score(model, r["token_ids"], **request_args(r)) for r in expected["requests"]]
        return [score.workers[0].blocks if score.workers else 0 for score in scores]

    try:
        engine.wait_for_subscriber(30)
        _, events, _ = msgspec.msgpack.decode(payload)
        engine.publish(events)
        wait_until(lambda: relay.relay.stats.published == 1, 30, "the store relayed")
        source, source_feed = replica(None)
        assert source.index(model).lookahead == 1 and source_feed.snapshot_now(model)
        engine_answer = [r["engine_blocks"] for r in expected["requests"]]
        assert depths(source) == engine_answer

        for lookahead in (1, None):
            router, feed = replica(lookahead)
            assert feed.models[model].snapshot_time is not None, lookahead  # loaded
            assert router.index(model).lookahead == 1 and depths(router) == engine_answer

        caplog.clear()
        other, feed = replica(0)
        assert feed.models[model].snapshot_time is None  # refused: read from the stream
        (line,) = [r.getMessage() for r in caplog.records if "kv_nats_snapshot_ignored" in r.getMessage()]
        assert "refused by the index" in line and "lookahead" in line, line
        index = other.index(model)
        assert index.lookahead == 0 and index.stats.skipped_events == 1 and index.num_blocks == 0
        assert depths(other) == [0] * len(engine_answer)
    finally:
        for router in routers:
            router.stop()
        relay.stop()
        engine.close()
        ctx.term()
