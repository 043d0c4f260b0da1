"""KV-event fan-out through a real nats-server with JetStream: simulated engines publish vLLM- and
SGLang-format batches over ZMQ, one relay each forwards them (five in-process, one `sidecar
kv-relay` process), and replicas (in-process `KvRouter` + `NatsFeed`, and one `sidecar serve
--kv-nats` process) must answer every Score exactly as one in-process index fed the same events
(tests/kv/fleet.py) and count the same events applied: nothing lost, nothing applied twice. Faults:
a replica replaced by a new one (catches up from a snapshot plus the stream), nats-server restarted
with its store, a relay killed mid-stream (resumed from the stream; then with the engine's replay
buffer gone, a reset as documented)."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import msgspec
import pytest
import zmq

from router_adapter import KvRouter, ModelOptions, PrefixIndex, Source
from router_adapter import fanout
from router_adapter.nats_feed import LIVE, LOADING, FeedOptions, NatsFeed, parse_snapshot
from router_adapter.relay import Relay, RelayOptions
from sidecar.v1 import kv_router_pb2 as kv
from sidecar.v1 import kv_router_pb2_grpc as kv_grpc
from sidecar.v1 import preprocessor_pb2 as pb
from tests.conftest import REPO, start_server, stop_server
from tests.kv.fleet import BS, FORMATS, SimEngine, requests, score_rows, stored_event
from tests.kv.nats_server import NatsServer, free_port
from tests.kv.publisher import FakeEnginePublisher, stored, wait_until

MODEL = "m.v1"  # a dot: subject tokens are encoded


class ThreadRelay:
    """`Relay.run()` on a thread of its own."""

    def __init__(self, source: Source, url: str) -> None:
        self.relay = Relay(source, RelayOptions(url, silence_timeout_s=None))
        self.thread = threading.Thread(target=lambda: asyncio.run(self.relay.run()), daemon=True)
        self.thread.start()
        assert self.relay.ready.wait(30), "relay did not start"

    def stop(self) -> None:
        self.relay.stop()
        self.thread.join(15)


class ProcessRelay:
    """`sidecar kv-relay` as a process."""

    def __init__(self, source: Source, url: str, log: Path) -> None:
        arg = f"{source.worker}={source.endpoint},replay={source.replay_endpoint},model={source.model}"
        with open(log, "ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "sidecar", "kv-relay", "--kv-events", arg, "--nats", url,
                 "--silence-timeout", "0"], stdout=out, stderr=subprocess.STDOUT, cwd=REPO,
            )

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(15)


def wait_for_subscription(xpub: zmq.Socket, timeout: float = 60.0) -> None:
    """Waits for a subscribe message on `xpub` (passing over the unsubscribe a killed relay left)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if xpub.poll(100) and xpub.recv()[:1] == b"\x01":
            return
    raise TimeoutError("no relay subscribed")


def replica(url: str, snapshot_period_s: float = 0.0, native: bool = False,
            silence_timeout_s: float | None = None) -> tuple[KvRouter, NatsFeed]:
    """A replica in this process, with the Python index or the native one (which the feed hands the
    engine's payloads undecoded, and whose snapshots only native replicas load)."""
    extra = {}
    if native:
        from sidecar.native.kv_index import NativePrefixIndex

        extra["index_factory"] = NativePrefixIndex
    router = KvRouter([], models={MODEL: ModelOptions(block_size=BS)}, **extra)
    feed = NatsFeed(router, FeedOptions(url, snapshot_period_s=snapshot_period_s, silence_timeout_s=silence_timeout_s))
    router.attach_feed(feed)
    router.start()
    return router, feed


class Fleet:
    def __init__(self, nats: NatsServer, tmp: Path, rng: random.Random) -> None:
        self.nats = nats
        self.tmp = tmp
        self.rng = rng
        self.ctx = zmq.Context()
        self.reference = PrefixIndex(BS)
        self.engines = [SimEngine(self.ctx, f"w{i}", FORMATS[i % 3], self.reference, rng) for i in range(6)]
        self.sources = [Source(e.worker, e.pub.endpoint, e.pub.replay_endpoint, model=MODEL) for e in self.engines]
        self.relays: list = []
        for engine, source in zip(self.engines[:5], self.sources):
            self.relays.append(ThreadRelay(source, nats.url))
            engine.pub.wait_for_subscriber(30)
        self.process_relay = self.start_process_relay()

    def start_process_relay(self) -> ProcessRelay:
        relay = ProcessRelay(self.sources[5], self.nats.url, self.tmp / "relay.log")
        wait_for_subscription(self.engines[5].pub.pub)
        return relay

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.rng.choice(self.engines).step()
        for engine in self.engines:
            engine.settle()

    def close(self) -> None:
        for relay in self.relays:
            relay.stop()
        self.process_relay.stop()
        for engine in self.engines:
            engine.close()
        self.ctx.term()


def remote_rows(stub: kv_grpc.KvRouterStub, tokens: list[int]) -> list[tuple]:
    return score_rows(stub.Score(kv.ScoreRequest(model=MODEL, token_ids=pb.TokenIds(token_ids=tokens)), timeout=10))


def remote_events(stub: kv_grpc.KvRouterStub) -> int:
    return stub.KvStatus(kv.KvStatusRequest(), timeout=10).models[0].events


def assert_same_view(fleet: Fleet, routers: list[KvRouter], stub: kv_grpc.KvRouterStub | None, rng: random.Random) -> None:
    """Every replica has applied exactly the reference's events and answers 200 Scores as it does."""
    want = fleet.reference.stats.events
    for router in routers:
        feed = router.feed.models[MODEL]
        try:
            wait_until(lambda: router.index(MODEL).stats.events >= want, 60, "a replica to apply every event")
        except AssertionError:
            raise AssertionError(f"a replica applied {router.index(MODEL).stats.events} events of {want}: {feed}; "
                                 f"relays {[r.relay.stats for r in fleet.relays]}") from None
    if stub is not None:
        wait_until(lambda: remote_events(stub) >= want, 60, "the serve replica to apply every event")
        assert remote_events(stub) == want
    for router in routers:
        assert router.index(MODEL).stats.events == want
        assert not router.warming(MODEL)
    for tokens in requests(rng, 200):
        expected = score_rows(fleet.reference.score(tokens))
        for router in routers:
            assert score_rows(router.score(MODEL, tokens)) == expected, tokens
        if stub is not None:
            assert remote_rows(stub, tokens) == expected, tokens


def assert_serve_reports_live(serve, stub: kv_grpc.KvRouterStub) -> None:  # noqa: ANN001 - LiveServer
    """Score is not flagged warming, KvStatus and /metrics report the feed."""
    response = stub.Score(kv.ScoreRequest(model=MODEL, token_ids=pb.TokenIds(token_ids=list(range(64)))), timeout=10)
    assert not response.warming
    status = stub.KvStatus(kv.KvStatusRequest(), timeout=10).models[0]
    assert status.stream_seq > 0 and status.stream_pending == 0 and status.snapshot_age_seconds == -1.0
    metrics = urllib.request.urlopen(f"http://127.0.0.1:{serve.metrics_port}/metrics", timeout=10).read().decode()
    assert f'sidecar_kv_nats_state{{model="{MODEL}",state="live"}} 1.0' in metrics
    assert f'sidecar_kv_nats_stream_seq{{model="{MODEL}"}} {float(status.stream_seq)}' in metrics
    assert f'sidecar_kv_nats_lag_seconds{{model="{MODEL}",worker="w0"}}' in metrics


@pytest.mark.e2e
def test_replicas_equal_one_index_through_faults(nats_server: NatsServer, tmp_path: Path) -> None:
    rng = random.Random(12)
    fleet = Fleet(nats_server, tmp_path, rng)
    serve = start_server(tmp_path, "--kv-nats", nats_server.url, "--kv-nats-model", MODEL, "--kv-block-size",
                         str(BS), "--kv-silence-timeout", "0", "--kv-nats-snapshot-period", "0")
    routers: list[KvRouter] = []
    try:
        stub = kv_grpc.KvRouterStub(grpc.insecure_channel(serve.tcp))
        a, feed_a = replica(nats_server.url, native=True)
        b, feed_b = replica(nats_server.url)
        routers += [a, b]
        fleet.run(300)
        assert_same_view(fleet, [a, b], stub, rng)
        assert_serve_reports_live(serve, stub)
        status = stub.KvStatus(kv.KvStatusRequest(), timeout=10)
        assert status.models[0].feed_state == LIVE and {w.worker for w in status.workers} == {e.worker for e in fleet.engines}
        assert sum(w.restarts for w in status.workers) > 0 and sum(w.gaps for w in status.workers) > 0

        # A replica replaced: the new one loads the (native) snapshot and reads the stream on from its
        # sequence; a replica with the Python index refuses that snapshot and reads the whole stream.
        b.stop()
        routers.remove(b)
        fleet.run(100)
        wait_until(lambda: feed_a.models[MODEL].pending == 0 and feed_a.state(MODEL) == LIVE, 60, "replica a live")
        assert feed_a.snapshot_now(MODEL)
        covered = feed_a.models[MODEL].stream_seq
        fleet.run(100)
        c, feed_c = replica(nats_server.url, native=True)
        d, feed_d = replica(nats_server.url)
        routers += [c, d]
        assert_same_view(fleet, [a, c, d], stub, rng)
        assert feed_c.models[MODEL].snapshot_time is not None and feed_c.models[MODEL].stream_seq > covered
        assert feed_d.models[MODEL].snapshot_time is None
        d.stop()
        routers.remove(d)

        # nats-server restarted with its store while the engines publish: nothing lost, nothing twice.
        fleet.run(50)
        nats_server.stop()
        fleet.run(50)
        nats_server.start()
        fleet.run(50)
        assert_same_view(fleet, [a, c], stub, rng)

        # A relay killed mid-stream: the restarted one resumes from the stream and replays the rest.
        w5 = fleet.engines[5]
        for _ in range(20):
            w5.step(lost_rate=0, restart_rate=0)
        fleet.process_relay.kill()
        for _ in range(20):
            w5.publish(w5.random_batch(), lost=True)  # nobody subscribed: kept for replay only
        fleet.process_relay = fleet.start_process_relay()
        fleet.run(50)
        assert_same_view(fleet, [a, c], stub, rng)
        resets_before = feed_a.models[MODEL].workers["w5"].resets
        # Killed again, and the engine's replay buffer loses what it published meanwhile: a gap reset.
        fleet.process_relay.kill()
        for _ in range(10):
            w5.publish(w5.random_batch(), lost=True)
        w5.lose_unpublished()
        fleet.process_relay = fleet.start_process_relay()
        fleet.run(50)
        assert_same_view(fleet, [a, c], stub, rng)
        assert feed_a.models[MODEL].workers["w5"].resets == resets_before + 1
        assert sum(c.duplicates for c in feed_a.models[MODEL].workers.values()) == 0
    finally:
        for router in routers:
            router.stop()
        stop_server(serve)
        fleet.close()


def test_score_answers_flagged_warming_until_the_feed_is_live() -> None:
    """No NATS to reach: the replica keeps trying, Score answers from the (empty) view, warming."""
    from tests.kv.nats_server import free_port, require_nats_tools

    require_nats_tools()  # skipped with the others: without the client the feed would not even try
    router, feed = replica(f"nats://127.0.0.1:{free_port()}")
    try:
        assert feed.state(MODEL) == LOADING and router.warming(MODEL)
        assert score_rows(router.score(MODEL, list(range(64)))) == []
    finally:
        router.stop()


def test_subject_tokens_are_reversible() -> None:
    for name in ["", "w0", "Qwen/Qwen3-0.6B", "a.b*c>d e", "_", "é"]:
        token = fanout.subject_token(name)
        assert not set(token) & set(".*> ") and fanout.token_name(token) == name


def test_relay_restart_publishes_nothing_twice(nats_server: NatsServer) -> None:
    """A relay that restarts resumes the epoch and sequence of its last message; the same batch
    published again is a JetStream duplicate (same message id)."""
    ctx = zmq.Context()
    reference = PrefixIndex(BS)
    engine = SimEngine(ctx, "w0", "vllm", reference, random.Random(3))
    source = Source("w0", engine.pub.endpoint, engine.pub.replay_endpoint, model=MODEL)
    try:
        first = ThreadRelay(source, nats_server.url)
        engine.pub.wait_for_subscriber()
        for _ in range(5):
            engine.step(lost_rate=0, restart_rate=0)
        wait_until(lambda: first.relay.stats.published == 5, 30, "5 batches published")
        first.stop()
        second = ThreadRelay(source, nats_server.url)
        assert second.relay.epoch == first.relay.epoch
        # Publish the last batch again, as a relay that lost the acknowledgement would.
        seq, payload = engine.pub.buffer[-1]
        second.relay._publish_blocking(payload, fanout.batch_headers("w0", second.relay.epoch, seq))
        assert second.relay.stats.duplicates == 1 and second.relay.stats.published == 0
        second.stop()
    finally:
        engine.close()
        ctx.term()


@contextmanager
def engine_and_relay(url: str) -> Iterator[tuple[SimEngine, ThreadRelay]]:
    """A simulated vLLM engine "w0" and a relay beside it publishing to the NATS server at `url`."""
    ctx = zmq.Context()
    engine = SimEngine(ctx, "w0", "vllm", PrefixIndex(BS), random.Random(5))
    relay = ThreadRelay(Source("w0", engine.pub.endpoint, engine.pub.replay_endpoint, model=MODEL), url)
    try:
        yield engine, relay
    finally:
        relay.stop()
        engine.close()
        ctx.term()


def test_batch_within_the_headers_of_max_payload_resets_the_worker(nats_server: NatsServer) -> None:
    """A batch whose payload fits the server's max_payload but not with the relay's headers (the
    server counts both, the client only the payload) gets the same gap reset as a larger one;
    published, the server refused it and closed the connection, and the relay retried forever."""
    with engine_and_relay(nats_server.url) as (engine, relay):
        engine.pub.wait_for_subscriber()
        target = (1 << 20) - 40  # nats-server's default max_payload, 1 MiB, less 40 bytes
        event = stored_event("vllm", [11], None, list(range(BS)), "GPU")
        pad = target - len(msgspec.msgpack.encode([0.0, [event], 0])) - 5
        while len(msgspec.msgpack.encode([0.0, [{**event, "lora_name": "x" * pad}], 0])) < target:
            pad += 1
        engine.pub.publish([{**event, "lora_name": "x" * pad}])
        assert len(engine.pub.buffer[-1][1]) == target
        engine.pub.publish([stored_event("vllm", [12], None, list(range(BS, 2 * BS)), "GPU")])
        wait_until(lambda: relay.relay.stats.published == 2, 30, "the reset and the next batch")
        assert (relay.relay.stats.too_large, relay.relay.stats.resets, relay.relay.stats.retries) == (1, 1, 0)


def test_batch_over_the_streams_max_msg_size_resets_the_worker(nats_server: NatsServer) -> None:
    """A stream made beforehand with a `max_msg_size` refuses larger messages with a JetStream
    error, every time: the relay retried it for ever, its subscriber blocked behind it."""
    import nats
    from nats.js.api import StreamConfig

    async def make_stream() -> None:
        nc = await nats.connect(nats_server.url)
        await nc.jetstream().add_stream(StreamConfig(name=fanout.DEFAULT_STREAM, max_msg_size=4096,
                                                     subjects=[f"{fanout.DEFAULT_PREFIX}.>"]))
        await nc.close()

    asyncio.run(make_stream())
    with engine_and_relay(nats_server.url) as (engine, relay):
        engine.pub.wait_for_subscriber()
        event = stored_event("vllm", [11], None, list(range(BS)), "GPU")
        engine.pub.publish([{**event, "lora_name": "x" * 5000}])
        engine.pub.publish([stored_event("vllm", [12], None, list(range(BS, 2 * BS)), "GPU")])
        wait_until(lambda: relay.relay.stats.published == 2, 30, "the reset and the next batch")
        assert (relay.relay.stats.too_large, relay.relay.stats.resets, relay.relay.stats.retries) == (1, 1, 0)


def test_a_stray_last_message_does_not_stop_a_relay_from_starting(nats_server: NatsServer) -> None:
    """A relay resumes from its subject's last message; one whose headers are not a relay's (a
    stray publish) raised ValueError at every start until it aged out of the stream."""
    import nats

    async def stray() -> None:
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        await fanout.ensure_stream(js, fanout.DEFAULT_STREAM, fanout.DEFAULT_PREFIX, 0)
        await js.publish(fanout.subject(fanout.DEFAULT_PREFIX, MODEL, "w0"), b"x",
                         headers={fanout.EPOCH: "x", fanout.SEQ: "y"})
        await nc.close()

    asyncio.run(stray())
    with engine_and_relay(nats_server.url) as (engine, relay):
        engine.pub.wait_for_subscriber()
        engine.pub.publish([stored_event("vllm", [12], None, list(range(BS)), "GPU")])
        wait_until(lambda: relay.relay.stats.published == 1, 30, "the batch")
        assert relay.relay.epoch


def test_batch_over_max_payload_resets_the_worker(nats_server: NatsServer) -> None:
    """A batch larger than the server's max_payload (1 MiB by default) cannot reach the replicas:
    the relay publishes a gap reset instead, and the worker is rebuilt from the batches after it."""
    ctx = zmq.Context()
    engine = SimEngine(ctx, "w0", "vllm", PrefixIndex(BS), random.Random(5))
    relay = ThreadRelay(Source("w0", engine.pub.endpoint, engine.pub.replay_endpoint, model=MODEL), nats_server.url)
    router, feed = replica(nats_server.url)
    try:
        engine.pub.wait_for_subscriber()
        first = [stored_event("vllm", [11], None, list(range(BS)), "GPU")]
        huge_tokens = list(range(70_000, 70_000 + 300_000 // BS * BS))
        huge = [stored_event("vllm", list(range(1, len(huge_tokens) // BS + 1)), None, huge_tokens, "GPU")]
        last = [stored_event("vllm", [12], None, list(range(BS, 2 * BS)), "GPU")]
        for events in (first, huge, last):
            engine.pub.publish(events)
        wait_until(lambda: feed.models[MODEL].workers.get("w0") is not None
                   and feed.models[MODEL].workers["w0"].batches == 2, 30, "two batches applied")
        assert relay.relay.stats.too_large == 1
        assert router.index(MODEL).worker_blocks("w0") == 1
        assert score_rows(router.score(MODEL, list(range(BS)))) == [("w0", 0, {"GPU": 0})]
        assert score_rows(router.score(MODEL, list(range(BS, 2 * BS)))) == [("w0", 1, {"GPU": 1})]
    finally:
        router.stop()
        relay.stop()
        engine.close()
        ctx.term()


def test_a_relay_follows_the_max_payload_of_a_restarted_server(nats_server: NatsServer, tmp_path: Path) -> None:
    """nats-server restarted with a smaller max_payload while a batch between the two limits
    waits to be published: the relay checks each attempt against the limit of the connection as
    it is now, and makes a new client when the server's refusal closed its own (nats-py closes for
    good on any error the server sends). Before, the batch was retried for ever, on a closed
    client."""
    ctx = zmq.Context()
    engine = SimEngine(ctx, "w0", "vllm", PrefixIndex(BS), random.Random(5))
    relay = ThreadRelay(Source("w0", engine.pub.endpoint, engine.pub.replay_endpoint, model=MODEL), nats_server.url)
    try:
        engine.pub.wait_for_subscriber()
        engine.pub.publish([stored_event("vllm", [11], None, list(range(BS)), "GPU")])
        wait_until(lambda: relay.relay.stats.published == 1, 30, "the first batch")
        config = tmp_path / "small.conf"
        config.write_text("max_payload: 200000\n")
        nats_server.extra_args = ["-c", str(config)]
        nats_server.restart()
        tokens = list(range(70_000, 70_000 + 150_000 // BS * BS))  # about 0.75 MB: within 1 MiB, over 200 kB
        engine.pub.publish([stored_event("vllm", list(range(1, len(tokens) // BS + 1)), None, tokens, "GPU")])
        engine.pub.publish([stored_event("vllm", [12], None, list(range(BS, 2 * BS)), "GPU")])
        # Published: the first batch, the gap reset that replaces the large one, the next batch.
        wait_until(lambda: relay.relay.stats.too_large == 1 and relay.relay.stats.published == 3, 30,
                   "the large batch refused by the relay, the next one published")
        assert relay.relay.stats.resets == 1
    finally:
        relay.stop()
        engine.close()
        ctx.term()


def test_a_replica_whose_client_closed_makes_a_new_one(nats_server: NatsServer) -> None:
    """nats-py closes its client for good on any error the server sends (a permissions or payload
    violation); the replica's consumers then failed for ever, the feed stuck `reconnecting`. It
    now makes a new client and reads on from where it was."""
    ctx = zmq.Context()
    engine = SimEngine(ctx, "w0", "vllm", PrefixIndex(BS), random.Random(5))
    relay = ThreadRelay(Source("w0", engine.pub.endpoint, engine.pub.replay_endpoint, model=MODEL), nats_server.url)
    router, feed = replica(nats_server.url)
    try:
        engine.pub.wait_for_subscriber()
        engine.pub.publish([stored_event("vllm", [11], None, list(range(BS)), "GPU")])
        wait_until(lambda: router.index(MODEL).worker_blocks("w0") == 1, 30, "the first batch applied")
        asyncio.run_coroutine_threadsafe(feed._nc.close(), feed._loop).result(10)
        engine.pub.publish([stored_event("vllm", [12], 11, list(range(BS, 2 * BS)), "GPU")])
        wait_until(lambda: router.index(MODEL).worker_blocks("w0") == 2 and feed.models[MODEL].state == LIVE, 30,
                   "the next batch applied on a new client")
        assert feed.models[MODEL].consumer_restarts >= 1
    finally:
        router.stop()
        relay.stop()
        engine.close()
        ctx.term()


class FailingOn12(PrefixIndex):
    """The Python index, raising (as a bug would) on every batch that stores block hash 12."""

    def apply_batch(self, worker: str, batch) -> None:  # noqa: ANN001 - events.Batch
        if any(12 in getattr(e, "block_hashes", ()) for e in batch.events):
            raise RuntimeError("an index bug")
        super().apply_batch(worker, batch)


def test_an_apply_error_resets_the_worker_and_the_feed_reads_on(nats_server: NatsServer) -> None:
    """An error other than a refused payload drops the worker (its run may be half applied) and
    the feed goes on with the batches after it (raised on, it restarted the consumer past the rest
    of the slice, keeping what was half applied)."""
    ctx = zmq.Context()
    engine = SimEngine(ctx, "w0", "vllm", PrefixIndex(BS), random.Random(7))
    relay = ThreadRelay(Source("w0", engine.pub.endpoint, engine.pub.replay_endpoint, model=MODEL), nats_server.url)
    router = KvRouter([], models={MODEL: ModelOptions(block_size=BS)}, index_factory=FailingOn12)
    feed = NatsFeed(router, FeedOptions(nats_server.url, snapshot_period_s=0.0, silence_timeout_s=None))
    router.attach_feed(feed)
    try:
        engine.pub.wait_for_subscriber()
        tokens = [list(range(i * BS, (i + 1) * BS)) for i in range(4)]
        for i, block in enumerate([11, 12, 13, 14]):
            engine.pub.publish([stored_event("vllm", [block], None, tokens[i], "GPU")])
        wait_until(lambda: relay.relay.stats.published == 4, 30, "4 batches published")
        # Started on a stream that holds them: the first pull takes one message, the next the other
        # three, which go to the index as one run.
        router.start()
        wait_until(lambda: feed.models[MODEL].state == LIVE, 30, "the feed to catch up")
        cursor = feed.models[MODEL].workers["w0"]
        # Reset for the failed run, then for its failed message; the others applied one at a time.
        assert (cursor.resets, cursor.batches, router.index(MODEL).worker_blocks("w0")) == (2, 3, 2)
        assert [score_rows(router.score(MODEL, t))[0][1] for t in tokens] == [0, 0, 1, 1]
    finally:
        router.stop()
        relay.stop()
        engine.close()
        ctx.term()


def start_relay_thread(relay: Relay, relays: list[tuple[Relay, threading.Thread]]) -> Relay:
    """Runs `relay` on a thread of its own, recorded in `relays`, once it has started."""
    thread = threading.Thread(target=lambda: asyncio.run(relay.run()), daemon=True)
    thread.start()
    relays.append((relay, thread))
    assert relay.ready.wait(30), "relay did not start"
    return relay


def stop_relay_threads(relays: list[tuple[Relay, threading.Thread]]) -> None:
    """Stops the relays `start_relay_thread` recorded, the last started first."""
    while relays:
        relay, thread = relays.pop()
        relay.stop()
        thread.join(15)


def test_relay_restarted_after_a_reset_replays_what_it_missed(nats_server: NatsServer) -> None:
    """A reset carries the engine sequence number of the last batch before it: a relay restarted
    when a reset was its last message (here an idle engine's `silent` one) fetches the batches the
    engine published meanwhile from the replay socket instead of starting from the next one."""
    ctx = zmq.Context()
    engine = SimEngine(ctx, "w0", "vllm", PrefixIndex(BS), random.Random(9))
    source = Source("w0", engine.pub.endpoint, engine.pub.replay_endpoint, model=MODEL)

    relays: list[tuple[Relay, threading.Thread]] = []

    def start_relay(silence_timeout_s: float | None) -> Relay:
        return start_relay_thread(Relay(source, RelayOptions(nats_server.url, silence_timeout_s=silence_timeout_s)),
                                  relays)

    def stop_relays() -> None:
        stop_relay_threads(relays)

    def publish(block: int) -> None:
        engine.pub.publish([stored_event("vllm", [block], None, list(range(block * BS, (block + 1) * BS)), "GPU")])

    router = None
    try:
        first = start_relay(silence_timeout_s=0.5)
        wait_for_subscription(engine.pub.pub)
        for block in range(3):
            publish(block)
        wait_until(lambda: first.stats.resets == 1, 30, "the silent reset")
        stop_relays()
        for block in range(3, 5):  # while the relay is down
            publish(block)
        second = start_relay(silence_timeout_s=None)
        wait_for_subscription(engine.pub.pub)
        publish(5)
        wait_until(lambda: second.stats.published == 3, 30, "the missed batches and the next")
        # From the last batch published, 2, which the relay checks is still the engine's.
        assert engine.pub.replay_requests == [2]
        router, feed = replica(nats_server.url)
        wait_until(lambda: feed.models[MODEL].state == LIVE, 30, "the replica to catch up")
        cursor = feed.models[MODEL].workers["w0"]
        assert (cursor.batches, cursor.resets, cursor.gaps) == (6, 1, 0)
        assert router.index(MODEL).worker_blocks("w0") == 3  # the blocks after the reset
    finally:
        stop_relays()
        if router is not None:
            router.stop()
        engine.close()
        ctx.term()


@pytest.mark.parametrize(("engine_restarted", "meanwhile", "last_is_reset"), [
    (True, 10, False),  # the new engine is past the old one's last number: a gap by number
    (True, 3, False),  # exactly as many: by number, the next batch of the old engine
    (True, 10, True),  # the relay's last message a reset (it names the batch by digest)
    (False, 10, False),  # the same engine went on: nothing reset, nothing lost or applied twice
    (False, 3, True),
])
def test_relay_restarted_across_an_engine_restart(nats_server: NatsServer, engine_restarted: bool, meanwhile: int,
                                                  last_is_reset: bool) -> None:
    """The engine published batches 0..2, then the relay stopped; the engine restarted (numbers
    from 0 again, a new replay buffer) and published `meanwhile` batches before the relay came
    back. Resuming after batch 2 by number alone, the relay took the new engine's batches for the
    missed ones (or, with exactly 3, for the next one) and published them under the old epoch:
    replicas kept the old engine's blocks. The relay now asks the engine for batch 2 too and
    compares it with the one it published: another one is a restart. The same engine going on is
    a plain relay restart, as before."""
    ctx = zmq.Context()
    pub = FakeEnginePublisher(ctx)
    source = Source("w0", pub.endpoint, pub.replay_endpoint, model=MODEL)
    relays: list[tuple[Relay, threading.Thread]] = []

    def start_relay(silence_timeout_s: float | None) -> Relay:
        relay = start_relay_thread(Relay(source, RelayOptions(nats_server.url, silence_timeout_s=silence_timeout_s)),
                                   relays)
        wait_for_subscription(pub.pub)
        return relay

    def stop_relays() -> None:
        stop_relay_threads(relays)

    def publish(block: int) -> None:
        pub.publish([stored_event("vllm", [block], None, list(range(block * BS, (block + 1) * BS)), "GPU")])

    def held() -> list[int]:
        index = router.index(MODEL)
        return [b for b in [*range(3), *range(100, 100 + meanwhile + 1)]
                if score_rows(index.score(list(range(b * BS, (b + 1) * BS)))) == [("w0", 1, {"GPU": 1})]]

    router = None
    try:
        first = start_relay(silence_timeout_s=0.5 if last_is_reset else None)
        for block in range(3):
            publish(block)
        wait_until(lambda: first.stats.published == 3 + last_is_reset, 30, "the first relay's messages")
        stop_relays()
        if engine_restarted:
            pub.seq, pub.buffer = 0, []
        for block in range(100, 100 + meanwhile):
            publish(block)
        second = start_relay(silence_timeout_s=None)
        publish(100 + meanwhile)
        # The batches the second relay published: those of the new engine (all of them) after a
        # restart reset, or those the same engine published while the relay was away.
        wait_until(lambda: second.stats.published == meanwhile + 1 + engine_restarted, 30, "the second relay")
        assert pub.replay_requests == ([2, 0] if engine_restarted else [2])
        assert second.stats.resets == engine_restarted and second.stats.duplicates == 0
        router, feed = replica(nats_server.url)
        wait_until(lambda: feed.models[MODEL].state == LIVE, 30, "the replica to catch up")
        cursor = feed.models[MODEL].workers["w0"]
        assert (cursor.batches, cursor.resets, cursor.gaps, cursor.duplicates) == (
            3 + meanwhile + 1, last_is_reset + engine_restarted, 0, 0)
        # What the engine holds: after a restart only the new engine's blocks; else all of them,
        # unless the relay's silent reset dropped the first three.
        new = list(range(100, 100 + meanwhile + 1))
        assert held() == (new if engine_restarted or last_is_reset else [0, 1, 2, *new])
    finally:
        stop_relays()
        if router is not None:
            router.stop()
        pub.close()
        ctx.term()


def test_relay_stops_while_nats_is_unreachable() -> None:
    """The first connection is retried until NATS answers, and a stop (SIGTERM) ends the wait: the
    client alone retried a first connection forever, deaf to the stop."""
    relay = Relay(Source("w0", "tcp://127.0.0.1:1", model=MODEL), RelayOptions(f"nats://127.0.0.1:{free_port()}"))
    thread = threading.Thread(target=lambda: asyncio.run(relay.run()), daemon=True)
    thread.start()
    wait_until(lambda: relay._stopped is not None, 10, "the relay to start connecting")
    time.sleep(1.5)  # past the first failed attempt: the wait is in the retry now
    relay.stop()
    thread.join(15)
    assert not thread.is_alive() and not relay.ready.is_set()


def test_a_stop_ends_a_first_connection_that_loses_a_cancel(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancel that comes as a connection attempt fails is lost inside the client (Python 3.11's
    `asyncio.wait_for` returns the attempt's error, and the client tries again): the stop waited for
    the connecting task for ever (a relay did not stop within 15 s). Here the stand-in client loses
    the first two cancels; the stop still ends the wait, and returns no connection."""
    import nats

    lost = []

    async def connect(*args: object, **kwargs: object) -> None:
        while True:
            try:
                await asyncio.sleep(0.01)
            except asyncio.CancelledError:
                if len(lost) == 2:
                    raise
                lost.append(True)

    monkeypatch.setattr(nats, "connect", connect)

    returned = []

    async def scenario() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.1, stop.set)
        returned.append(await fanout.connect_until_stopped("nats://127.0.0.1:1", stop, "test"))

    thread = threading.Thread(target=lambda: asyncio.run(scenario()), daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive(), "the stop did not end the wait"
    assert returned == [None] and len(lost) == 2


def test_chunks_of_a_snapshot_that_lost_a_race_are_swept(nats_server: NatsServer) -> None:
    """Two replicas writing a snapshot at once leave the loser's chunks behind, named by no object
    (the store's put purges only the chunks of the object it replaced). After its own put a
    replica purges such chunks once they are old enough that no write can still be going on."""
    router, feed = replica(nats_server.url)
    try:
        wait_until(lambda: feed.models[MODEL].state == LIVE, 30, "the feed to go live")
        assert feed.snapshot_now(MODEL)

        def on_loop(coroutine):  # noqa: ANN001, ANN202
            return asyncio.run_coroutine_threadsafe(coroutine, feed._loop).result(30)

        stream, chunks = f"OBJ_{fanout.DEFAULT_SNAPSHOT_BUCKET}", f"$O.{fanout.DEFAULT_SNAPSHOT_BUCKET}.C."

        def chunk_subjects() -> set[str]:
            info = on_loop(feed._js.stream_info(stream, subjects_filter=chunks + ">"))
            return set(info.state.subjects or {})

        named = chunk_subjects()
        assert len(named) == 1
        for _ in range(3):  # what a put that lost the race wrote
            on_loop(feed._js.publish(chunks + "LOSTRACE", b"x" * 1000))
        assert on_loop(feed.sweep_orphan_chunks()) == 0  # recent: maybe still being written
        assert chunk_subjects() == named | {chunks + "LOSTRACE"}
        assert on_loop(feed.sweep_orphan_chunks(min_age_s=0.0)) == 1
        assert chunk_subjects() == named
        # The snapshot left is whole (the store checks its digest) and parses.
        meta, _ = parse_snapshot(on_loop(feed._store.get(fanout.subject_token(MODEL))).data)
        assert meta["stream"] == fanout.DEFAULT_STREAM
    finally:
        router.stop()


def publish_blocks_for(engine: FakeEnginePublisher, seconds: float) -> None:
    """A busy engine: a batch storing a block of its own every 0.2 s for `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        block = engine.seq
        engine.publish([stored([1000 + block], list(range(block * BS, (block + 1) * BS)), BS)])
        time.sleep(0.2)


def test_a_nats_outage_longer_than_the_silence_timeout_drops_nothing(nats_server: NatsServer) -> None:
    """The relay holds a busy engine's batches in its socket through a NATS outage and publishes
    them all after it: no gap, no reset. The replicas judged silence by the batches' JetStream
    times, which the outage set further apart than the timeout, and dropped the worker (every
    block stored before the outage) on every replica, a replica catching up later alike. The
    relay's engine clock stands still while it waits for NATS, and goes on across a relay restart
    (here right after the outage, when the clock is behind the wall clock by the outage)."""
    silence = 2.0
    ctx = zmq.Context()
    engine = FakeEnginePublisher(ctx, send_hwm=0)
    source = Source("w0", engine.endpoint, engine.replay_endpoint, model=MODEL)
    relays: list[tuple[Relay, threading.Thread]] = []
    routers: list[KvRouter] = []

    def start_relay() -> Relay:
        return start_relay_thread(Relay(source, RelayOptions(nats_server.url, silence_timeout_s=silence)), relays)

    def start_replica() -> NatsFeed:
        router, feed = replica(nats_server.url, silence_timeout_s=silence)
        routers.append(router)
        return feed

    def applied_all(feed: NatsFeed) -> bool:
        cursor = feed.models[MODEL].workers.get("w0")
        return feed.models[MODEL].state == LIVE and cursor is not None and cursor.last_seq == engine.seq - 1

    try:
        first = start_relay()
        wait_for_subscription(engine.pub)
        live = start_replica()
        wait_until(lambda: live.models[MODEL].state == LIVE, 30, "the replica to go live")
        publish_blocks_for(engine, 1.0)
        nats_server.stop()
        publish_blocks_for(engine, 2 * silence)
        nats_server.start()
        publish_blocks_for(engine, 1.0)
        wait_until(lambda: applied_all(live), 60, "the batches held through the outage")
        stop_relay_threads(relays)
        second = start_relay()
        wait_for_subscription(engine.pub)
        publish_blocks_for(engine, 0.6)
        wait_until(lambda: applied_all(live), 60, "the batches after the relay's restart")
        assert (first.stats.resets, second.stats.resets) == (0, 0)
        later = start_replica()
        wait_until(lambda: applied_all(later), 60, "a replica catching up")
        for feed, router in zip([live, later], routers):
            cursor = feed.models[MODEL].workers["w0"]
            assert (cursor.aged_out, cursor.resets, cursor.gaps) == (0, 0, 0)
            assert router.index(MODEL).worker_blocks("w0") == engine.seq
    finally:
        stop_relay_threads(relays)
        for router in routers:
            router.stop()
        engine.close()
        ctx.term()


def test_a_relay_down_longer_than_the_silence_timeout_still_drops_its_worker(nats_server: NatsServer) -> None:
    """What the engine clock must not hide: a relay that was down (here with an idle engine)
    longer than the timeout. A live replica drops the worker by its clock (a `silent` reset in the
    stream); without one live, a replica reading the stream later drops it at the relay's next
    batch, whose clock goes on from the last message across the restart."""
    silence = 1.0
    ctx = zmq.Context()
    engine = FakeEnginePublisher(ctx, send_hwm=0)
    source = Source("w0", engine.endpoint, engine.replay_endpoint, model=MODEL)
    relays: list[tuple[Relay, threading.Thread]] = []
    router = None

    def start_relay() -> Relay:
        relay = start_relay_thread(Relay(source, RelayOptions(nats_server.url, silence_timeout_s=None)), relays)
        wait_for_subscription(engine.pub)
        return relay

    try:
        relay = start_relay()
        publish_blocks_for(engine, 0.6)
        wait_until(lambda: relay.stats.published == engine.seq, 30, "the first batches")
        stop_relay_threads(relays)
        time.sleep(2 * silence)
        relay = start_relay()
        before = engine.seq
        publish_blocks_for(engine, 0.2)
        wait_until(lambda: relay.stats.published == engine.seq - before, 30, "the batch after the restart")
        router, feed = replica(nats_server.url, silence_timeout_s=silence)
        wait_until(lambda: feed.models[MODEL].state == LIVE and feed.models[MODEL].workers["w0"].last_seq
                   == engine.seq - 1, 30, "the replica to catch up")
        assert feed.models[MODEL].workers["w0"].aged_out == 1
        assert router.index(MODEL).worker_blocks("w0") == engine.seq - before
    finally:
        stop_relay_threads(relays)
        if router is not None:
            router.stop()
        engine.close()
        ctx.term()


def test_a_relay_restarted_on_a_host_whose_clock_is_ahead_is_not_a_silence(nats_server: NatsServer,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A relay restarted at once on a host whose clock runs 10 minutes ahead of the NATS server's:
    its engine clock goes on by the time since its last message was stored, measured on the server's
    clock. Measured on the host's, the restart read as 10 minutes of silence, past the replicas'
    timeout, and every replica dropped the worker."""
    import router_adapter.relay as relay_module

    ctx = zmq.Context()
    engine = FakeEnginePublisher(ctx, send_hwm=0)
    source = Source("w0", engine.endpoint, engine.replay_endpoint, model=MODEL)
    relays: list[tuple[Relay, threading.Thread]] = []
    router = None
    try:
        relay = start_relay_thread(Relay(source, RelayOptions(nats_server.url, silence_timeout_s=None)), relays)
        wait_for_subscription(engine.pub)
        publish_blocks_for(engine, 0.6)
        wait_until(lambda: relay.stats.published == engine.seq, 30, "the first batches")
        stop_relay_threads(relays)
        ahead = type("HostClock", (), {"time": staticmethod(lambda: time.time() + 600.0),
                                       "monotonic": staticmethod(time.monotonic)})
        monkeypatch.setattr(relay_module, "time", ahead)
        relay = start_relay_thread(Relay(source, RelayOptions(nats_server.url, silence_timeout_s=None)), relays)
        wait_for_subscription(engine.pub)
        before = engine.seq
        publish_blocks_for(engine, 0.2)
        wait_until(lambda: relay.stats.published == engine.seq - before, 30, "the batch after the restart")
        router, feed = replica(nats_server.url, silence_timeout_s=60.0)
        wait_until(lambda: feed.models[MODEL].state == LIVE and feed.models[MODEL].workers["w0"].last_seq
                   == engine.seq - 1, 30, "the replica to catch up")
        assert feed.models[MODEL].workers["w0"].aged_out == 0
        assert router.index(MODEL).worker_blocks("w0") == engine.seq
    finally:
        stop_relay_threads(relays)
        if router is not None:
            router.stop()
        engine.close()
        ctx.term()


async def stream_info(url: str):  # noqa: ANN201 - nats StreamInfo
    import nats

    nc = await nats.connect(url)
    try:
        return await nc.jetstream().stream_info(fanout.DEFAULT_STREAM)
    finally:
        await nc.close()


def test_a_relay_makes_the_stream_again_when_it_is_gone(nats_server: NatsServer) -> None:
    """nats-server restarted without its store: the relay's publishes found no stream and were
    retried for ever, until some replica made the stream (with its own retention). The relay makes
    it again itself, with its settings, and publishes on."""
    import shutil

    ctx = zmq.Context()
    engine = FakeEnginePublisher(ctx, send_hwm=0)
    source = Source("w0", engine.endpoint, engine.replay_endpoint, model=MODEL)
    relays: list[tuple[Relay, threading.Thread]] = []
    try:
        options = RelayOptions(nats_server.url, silence_timeout_s=None, retention_s=1234.0)
        relay = start_relay_thread(Relay(source, options), relays)
        wait_for_subscription(engine.pub)
        publish_blocks_for(engine, 0.2)
        wait_until(lambda: relay.stats.published == engine.seq, 30, "the first batch")
        nats_server.stop()
        shutil.rmtree(nats_server.store_dir)
        nats_server.start()
        before = engine.seq
        publish_blocks_for(engine, 0.2)
        wait_until(lambda: relay.stats.published == engine.seq, 30, "the batches after the stream was gone")
        info = asyncio.run(stream_info(nats_server.url))
        assert info.state.messages == engine.seq - before
        assert info.config.max_age == 1234.0
    finally:
        stop_relay_threads(relays)
        engine.close()
        ctx.term()


def test_a_relays_silent_reset_is_counted_once(nats_server: NatsServer) -> None:
    """An idle engine's relay publishes one `silent` reset. With the replicas' timeout equal to the
    relay's (both 300 s by default), the reset came more than the timeout after the worker's last
    batch: it was counted as a silence of the stream and again as the relay's reset (aged_out and
    resets 2 on every replica; a direct subscriber counts 1)."""
    silence = 1.0
    ctx = zmq.Context()
    engine = FakeEnginePublisher(ctx, send_hwm=0)
    source = Source("w0", engine.endpoint, engine.replay_endpoint, model=MODEL)
    relays: list[tuple[Relay, threading.Thread]] = []
    router = None
    try:
        relay = start_relay_thread(Relay(source, RelayOptions(nats_server.url, silence_timeout_s=silence)), relays)
        wait_for_subscription(engine.pub)
        publish_blocks_for(engine, 0.1)
        wait_until(lambda: relay.stats.resets == 1, 30, "the relay's silent reset")
        # Read afterwards (catching up): a live replica's own clock would race the relay's.
        router, feed = replica(nats_server.url, silence_timeout_s=silence)
        wait_until(lambda: feed.models[MODEL].state == LIVE and feed.models[MODEL].stream_seq == 2, 30,
                   "the batch and the reset")
        cursor = feed.models[MODEL].workers["w0"]
        assert (cursor.aged_out, cursor.resets) == (1, 1)
        assert router.index(MODEL).worker_blocks("w0") == 0
    finally:
        stop_relay_threads(relays)
        if router is not None:
            router.stop()
        engine.close()
        ctx.term()


def test_a_nats_outage_is_a_few_log_lines_not_one_per_attempt(nats_server: NatsServer,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """Through an outage the client's reconnects (two a second) each wrote a traceback to stderr,
    and the relay logged `kv_relay_publish_retry` once a second: now the connection's changes of
    state are one line each, and a retried publish is logged at its first failure (then once a
    minute)."""
    caplog.set_level("INFO", logger="router_adapter")
    ctx = zmq.Context()
    engine = FakeEnginePublisher(ctx, send_hwm=0)
    relays: list[tuple[Relay, threading.Thread]] = []
    try:
        relay = start_relay_thread(Relay(Source("w0", engine.endpoint, engine.replay_endpoint, model=MODEL),
                                         RelayOptions(nats_server.url, silence_timeout_s=None, ack_timeout_s=0.3)),
                                   relays)
        wait_for_subscription(engine.pub)
        nats_server.stop()
        publish_blocks_for(engine, 4.0)
        nats_server.start()
        wait_until(lambda: relay.stats.published + relay.stats.duplicates == engine.seq, 60,
                   "the batches held through the outage")
        events = [r.getMessage().split(" ")[0] for r in caplog.records if r.name.startswith("router_adapter")]
        assert relay.stats.retries >= 3  # the publish was retried all along
        assert events.count("kv_relay_publish_retry") == 1, events
        assert (events.count("kv_nats_disconnected"), events.count("kv_nats_reconnected")) == (1, 1), events
        assert events.count("kv_nats_reconnect_failed") <= 2, events  # one per distinct error
    finally:
        stop_relay_threads(relays)
        engine.close()
        ctx.term()
