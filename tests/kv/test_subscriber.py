"""The real subscriber against real ZMQ sockets on loopback: stores, removals, clears, a dropped
message (gap then replay), a gap without replay, an engine restart and a silent worker; each with
the Python index and the native one behind the router."""

from __future__ import annotations

import time
from typing import Iterator

import msgspec
import pytest
import zmq

from router_adapter import KvRouter, PrefixIndex, Source, _reference
from router_adapter.events import DecodeError, decode_batch
from router_adapter.subscriber import Subscriber, _State, payload_digest
from router_adapter.router import IndexFactory
from router_adapter.spec import HashSpec
from sidecar.factory import get_index_factory
from tests.kv.publisher import CLEARED, FakeEnginePublisher, removed, stored, wait_until

BS = 4
TOKENS = list(range(500, 532))  # 8 blocks
HASHES = _reference.block_hashes(TOKENS, HashSpec("vllm_sha256", BS))


def span(start: int, end: int) -> dict:
    parent = HASHES[start - 1] if start else None
    return stored(HASHES[start:end], TOKENS[start * BS : end * BS], BS, parent)


@pytest.fixture(params=["python", "native"])
def index_factory(request: pytest.FixtureRequest) -> IndexFactory:
    if request.param == "python":
        return PrefixIndex
    return get_index_factory("native")


@pytest.fixture
def ctx() -> Iterator[zmq.Context]:
    context = zmq.Context()
    yield context
    context.term()


def recording_subscriber(endpoint: str, replay_endpoint: str,
                         replay_timeout_s: float = 30.0) -> tuple[Subscriber, list[object]]:
    """A subscriber to source "a" recording, in order, each batch's first block hash and each reset's
    reason (not started)."""
    seen: list[object] = []
    sub = Subscriber([Source("a", endpoint, replay_endpoint)],
                     lambda worker, batch: seen.append(batch.events[0].block_hashes[0]),
                     lambda worker, reason: seen.append(reason), silence_timeout_s=None,
                     replay_timeout_s=replay_timeout_s)
    return sub, seen


def blocks(router: KvRouter, worker: str) -> int:
    return next((w.blocks for w in router.score("m", TOKENS).workers if w.worker == worker), -1)


def test_events_gaps_replay_restart(ctx: zmq.Context, index_factory: IndexFactory) -> None:
    with_replay = FakeEnginePublisher(ctx)
    no_replay = FakeEnginePublisher(ctx, replay=False)
    router = KvRouter(
        [Source("a", with_replay.endpoint, with_replay.replay_endpoint, model="m"),
         Source("b", no_replay.endpoint, model="m")],
        block_size=BS, silence_timeout_s=None, index_factory=index_factory,
    )
    router.start()
    try:
        with_replay.wait_for_subscriber()
        no_replay.wait_for_subscriber()

        # Stores and a removal.
        with_replay.publish([span(0, 4)])
        no_replay.publish([span(0, 2)])
        wait_until(lambda: blocks(router, "a") == 4 and blocks(router, "b") == 2, what="stores")
        with_replay.publish([removed([HASHES[3]])])
        wait_until(lambda: blocks(router, "a") == 3, what="removal")

        # A dropped message: the gap is filled from the replay socket, nothing is reset.
        with_replay.publish([span(3, 6)], drop=True)
        with_replay.publish([span(6, 8)])
        wait_until(lambda: blocks(router, "a") == 8, what="replayed span")
        stats = router.source_stats()["a"]
        assert (stats.gaps, stats.replayed, stats.resets) == (1, 1, 0)
        assert with_replay.replay_requests == [2]

        # Without a replay socket a gap resets the worker; the next batch is applied on a clean state.
        no_replay.publish([span(2, 4)], drop=True)
        no_replay.publish([span(0, 1)])
        wait_until(lambda: router.source_stats()["b"].resets == 1, what="reset after gap")
        wait_until(lambda: blocks(router, "b") == 1, what="state after reset")

        # Clear.
        with_replay.publish([CLEARED])
        wait_until(lambda: blocks(router, "a") == 0, what="clear")
        with_replay.publish([span(0, 3)])
        wait_until(lambda: blocks(router, "a") == 3, what="stores after clear")

        # Restart: the sequence starts again at 0; the old state is dropped first.
        with_replay.buffer.clear()
        with_replay.publish([span(0, 1)], seq=0)
        wait_until(lambda: router.source_stats()["a"].restarts == 1, what="restart detected")
        wait_until(lambda: blocks(router, "a") == 1, what="state after restart")
        assert router.source_stats()["a"].decode_errors == 0
    finally:
        router.stop()
        with_replay.close()
        no_replay.close()


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_replay_answers_of_either_engine_fill_a_gap(ctx: zmq.Context, engine: str) -> None:
    """vLLM's (and SGLang 0.5.23's) replay answers carry the topic before the sequence number,
    older SGLang's do not; both fill a gap with no reset."""
    pub = FakeEnginePublisher(ctx, engine=engine)
    got: list[int] = []
    resets: list[str] = []
    sub = Subscriber([Source("a", pub.endpoint, pub.replay_endpoint)],
                     lambda worker, batch: got.append(batch.events[0].block_hashes[0]),
                     lambda worker, reason: resets.append(reason), silence_timeout_s=None, replay_timeout_s=30.0)
    sub.start()
    try:
        pub.wait_for_subscriber()
        for block in range(4):
            pub.publish([stored([block], TOKENS[:BS], BS)], drop=block in (1, 2))
        wait_until(lambda: len(got) == 4 or resets, what="the gap filled")
        assert (got, resets, pub.replay_requests) == ([0, 1, 2, 3], [], [1])
        assert sub.stats()["a"].replayed == 2
    finally:
        sub.stop()
        pub.close()


def test_a_restart_seen_late_replays_the_new_engines_first_batches(ctx: zmq.Context) -> None:
    """A sequence number at or below the last one is an engine restart; when it is above 0 the
    new engine's earlier batches went by unseen, and its replay socket fills them in after the
    reset."""
    pub = FakeEnginePublisher(ctx)
    sub, seen = recording_subscriber(pub.endpoint, pub.replay_endpoint)
    sub.start()
    try:
        pub.wait_for_subscriber()
        for block in range(4):
            pub.publish([stored([block], TOKENS[:BS], BS)])
        wait_until(lambda: len(seen) == 4, what="the first engine's batches")
        pub.buffer.clear()  # the new engine's buffer
        for seq, block in enumerate([100, 101, 102]):
            pub.publish([stored([block], TOKENS[:BS], BS)], seq=seq, drop=block != 102)
        wait_until(lambda: len(seen) == 8, what="the restart and the new engine's batches")
        assert seen == [0, 1, 2, 3, "restart", 100, 101, 102]
        assert pub.replay_requests == [0]
        stats = sub.stats()["a"]
        assert (stats.restarts, stats.resets, stats.replayed, stats.gaps) == (1, 1, 2, 0)
    finally:
        sub.stop()
        pub.close()


@pytest.mark.parametrize("engine", ["same", "restarted", "buffer_gone"])
def test_a_resumed_source_checks_its_last_batch_with_the_engine(ctx: zmq.Context, engine: str) -> None:
    """A source resumed after batch 2 (a relay restarted) with that batch's digest: its first
    message, 5, sends for batches 2..4 in one replay request. The same batch 2 there: 3 and 4 are
    the missed ones. Another batch 2: the engine restarted since, and by number alone its batches
    would have gone on top of the old engine's; they come after a restart reset, from 0. No batch
    2 (a buffer past it): a gap reset."""
    pub = FakeEnginePublisher(ctx)
    for block in range(5):  # published while the source was away: 0..2 before, 3 and 4 after
        pub.publish([stored([block], TOKENS[:BS], BS)], drop=True)
    digest = payload_digest(pub.buffer[2][1])
    if engine == "restarted":
        pub.buffer = [(seq, msgspec.msgpack.encode([1.0, [stored([100 + seq], TOKENS[:BS], BS)], 0]))
                      for seq in range(5)]
    elif engine == "buffer_gone":
        del pub.buffer[:3]
    seen: list[object] = []
    sub = Subscriber([Source("a", pub.endpoint, pub.replay_endpoint)],
                     lambda worker, batch: seen.append(batch.events[0].block_hashes[0]),
                     lambda worker, reason: seen.append(reason), silence_timeout_s=None, replay_timeout_s=30.0,
                     resume={"a": 2}, resume_digests={"a": digest})
    sub.start()
    try:
        pub.wait_for_subscriber()
        pub.publish([stored([5], TOKENS[:BS], BS)])
        wait_until(lambda: seen and seen[-1] == 5, what="the first message")
        stats = sub.stats()["a"]
        if engine == "same":
            assert seen == [3, 4, 5] and pub.replay_requests == [2] and stats.resets == 0
        elif engine == "restarted":
            assert seen == ["restart", 100, 101, 102, 103, 104, 5] and pub.replay_requests == [2, 0]
            assert (stats.restarts, stats.resets, stats.replayed) == (1, 1, 5)
        else:
            assert seen == ["gap", 5] and pub.replay_requests == [2] and (stats.gaps, stats.resets) == (1, 1)
    finally:
        sub.stop()
        pub.close()


@pytest.mark.parametrize("engine", ["same", "restarted"])
def test_after_a_lost_connection_the_last_batch_is_checked_with_the_engine(ctx: zmq.Context, engine: str) -> None:
    """The connection is lost after batch 2. The same engine back on the endpoint: batches 3..5
    it published meanwhile fill the gap, with no reset. An engine that restarted (its counter
    from 0 again) and published 0..5 before the socket connected again: by number alone 6 was a
    gap filled from its buffer over the old engine's blocks; its batch 2 is not the one handled,
    so it is a restart reset, and its batches come from 0 (vLLM's publisher counts from 0 again)."""
    pub = FakeEnginePublisher(ctx)
    sub, seen = recording_subscriber(pub.endpoint, pub.replay_endpoint)
    sub.start()
    try:
        pub.wait_for_subscriber()
        for block in range(3):
            pub.publish([stored([block], TOKENS[:BS], BS)])
        wait_until(lambda: seen == [0, 1, 2], what="the first batches")
        pub.rebind()
        wait_until(lambda: sub.stats()["a"].disconnects == 1, what="the disconnection")
        if engine == "restarted":
            pub.buffer.clear()
            pub.seq = 0
        first = 100 if engine == "restarted" else 0
        for seq in range(pub.seq, 6):  # before the subscriber is back: lost, kept for replay
            pub.publish([stored([first + seq], TOKENS[:BS], BS)], drop=True)
        pub.wait_for_subscriber()
        pub.publish([stored([first + 6], TOKENS[:BS], BS)])
        wait_until(lambda: seen[-1:] == [first + 6], what="the batch after the connection")
        stats = sub.stats()["a"]
        if engine == "same":
            assert seen == [0, 1, 2, 3, 4, 5, 6] and pub.replay_requests == [2]
            assert (stats.restarts, stats.resets, stats.gaps, stats.replayed) == (0, 0, 1, 3)
        else:
            assert seen == [0, 1, 2, "restart", 100, 101, 102, 103, 104, 105, 106]
            assert pub.replay_requests == [2, 0]
            assert (stats.restarts, stats.resets, stats.replayed) == (1, 1, 6)
    finally:
        sub.stop()
        pub.close()


def test_a_message_over_the_size_bound_is_a_counted_disconnection_and_a_gap(ctx: zmq.Context) -> None:
    """The SUB socket queued up to 100,000 messages of any size. Over `max_message_bytes`, libzmq
    drops the connection instead of taking the message (the socket connects again by itself); the
    replay socket, bound alike, cannot bring it either, so it is a gap reset. The disconnection is
    counted, so the cause of the gap shows."""
    pub = FakeEnginePublisher(ctx)
    seen: list[object] = []
    sub = Subscriber([Source("a", pub.endpoint, pub.replay_endpoint)],
                     lambda worker, batch: seen.append(batch.events[0].block_hashes[0]),
                     lambda worker, reason: seen.append(reason), silence_timeout_s=None, replay_timeout_s=0.5,
                     max_message_bytes=4096)
    sub.start()
    try:
        pub.wait_for_subscriber()
        pub.publish([stored([0], TOKENS[:BS], BS)])
        wait_until(lambda: seen == [0], what="the first batch")
        pub.publish([stored([1], TOKENS[:BS], BS, lora_name="x" * 5000)])
        wait_until(lambda: sub.stats()["a"].disconnects == 1, what="the disconnection")
        # The subscription of the socket made again (passed on though the dropped one's may still
        # be counted: verbose).
        wait_until(lambda: pub.pub.poll(10) and pub.pub.recv()[:1] == b"\x01", what="the connection again")
        pub.publish([stored([2], TOKENS[:BS], BS)])
        wait_until(lambda: seen[-1:] == [2], what="the batch after it")
        stats = sub.stats()["a"]
        # Lost connection: batch 0, handled before, is asked for too (the engine may have
        # restarted); the answer, with batch 1 over the bound, drops too: unverified, a gap.
        assert seen == [0, "gap", 2] and pub.replay_requests == [0]
        assert (stats.disconnects, stats.gaps, stats.resets, stats.replayed) == (1, 1, 1, 0)
        with pytest.raises(ValueError, match="max_message_bytes"):
            Subscriber([], print, print, max_message_bytes=0)
    finally:
        sub.stop()
        pub.close()


def test_an_engine_that_went_away_is_followed_on_its_endpoint_again(ctx: zmq.Context) -> None:
    """A lost connection makes the SUB socket again (after one over the size bound libzmq would
    never reconnect): an engine that closed its socket and bound the endpoint again, restarted,
    is followed on it, each of its messages taken once."""
    pub = ctx.socket(zmq.XPUB)
    pub.setsockopt(zmq.LINGER, 0)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    seen: list[object] = []
    sub = Subscriber([Source("a", f"tcp://127.0.0.1:{port}")],
                     lambda worker, batch: seen.append(batch.events[0].block_hashes[0]),
                     lambda worker, reason: seen.append(reason), silence_timeout_s=None)

    def publish(socket: zmq.Socket, seq: int, block: int) -> None:
        payload = msgspec.msgpack.encode([0.0, [stored([block], TOKENS[:BS], BS)], 0])
        socket.send_multipart([b"", seq.to_bytes(8, "big"), payload])

    sub.start()
    try:
        assert pub.poll(10_000) and pub.recv()[:1] == b"\x01"
        publish(pub, 0, 10)
        wait_until(lambda: seen == [10], what="the first engine's batch")
        pub.close(0)
        wait_until(lambda: sub.stats()["a"].disconnects == 1, what="the disconnection")
        pub = ctx.socket(zmq.XPUB)
        pub.setsockopt(zmq.LINGER, 0)
        pub.bind(f"tcp://127.0.0.1:{port}")
        assert pub.poll(10_000) and pub.recv()[:1] == b"\x01"
        for seq, block in enumerate([20, 21]):
            publish(pub, seq, block)
        wait_until(lambda: seen[-1:] == [21], what="the new engine's batches")
        assert seen == [10, "restart", 20, 21] and sub.stats()["a"].disconnects == 1
    finally:
        sub.stop()
        pub.close(0)


def test_replay_that_cannot_fill_the_gap_resets(ctx: zmq.Context, index_factory: IndexFactory) -> None:
    pub = FakeEnginePublisher(ctx)
    router = KvRouter([Source("a", pub.endpoint, pub.replay_endpoint, model="m")], block_size=BS,
                      silence_timeout_s=None, index_factory=index_factory)
    router.start()
    try:
        pub.wait_for_subscriber()
        pub.publish([span(0, 4)])
        wait_until(lambda: blocks(router, "a") == 4)
        pub.publish([span(4, 6)], drop=True)
        pub.buffer.clear()  # the engine's replay buffer no longer holds it
        pub.publish([span(0, 2)])
        wait_until(lambda: router.source_stats()["a"].resets == 1, what="reset")
        wait_until(lambda: blocks(router, "a") == 2, what="state after reset")
    finally:
        router.stop()
        pub.close()


def test_a_jump_past_any_replay_buffer_is_a_gap_without_asking(ctx: zmq.Context) -> None:
    """A sequence number that jumps by 10^12 (a broken publisher) used to build the list of every
    number in between to check the replay's answer: gigabytes, or the process killed."""
    pub = FakeEnginePublisher(ctx)
    sub, seen = recording_subscriber(pub.endpoint, pub.replay_endpoint)
    sub.start()
    try:
        pub.wait_for_subscriber()
        pub.publish([stored([0], TOKENS[:BS], BS)], seq=0)
        pub.publish([stored([1], TOKENS[:BS], BS)], seq=10**12)
        wait_until(lambda: len(seen) == 3, what="the gap and the batch after it")
        assert seen == [0, "gap", 1] and pub.replay_requests == []
    finally:
        sub.stop()
        pub.close()


def test_a_replay_socket_that_does_not_answer_is_not_asked_again_at_once(ctx: zmq.Context) -> None:
    """Each replay blocks the subscriber's thread (every source's) for up to the replay timeout: an
    engine skipping every other number with a replay socket that never answers held another
    source's batches back for 9 s. After a failed replay the source's gaps are resets for a while."""
    pub = FakeEnginePublisher(ctx, replay=False)
    silent = ctx.socket(zmq.ROUTER)
    silent.setsockopt(zmq.LINGER, 0)
    port = silent.bind_to_random_port("tcp://127.0.0.1")
    sub, seen = recording_subscriber(pub.endpoint, f"tcp://127.0.0.1:{port}", replay_timeout_s=0.3)
    sub.start()
    try:
        pub.wait_for_subscriber()
        for block, seq in enumerate([0, 2, 4, 6]):
            pub.publish([stored([block], TOKENS[:BS], BS)], seq=seq)
        wait_until(lambda: len(seen) == 7, what="three gaps and four batches")
        assert seen == [0, "gap", 1, "gap", 2, "gap", 3]
        requests = 0
        while silent.poll(0):
            silent.recv_multipart()
            requests += 1
        assert requests == 1
    finally:
        sub.stop()
        pub.close()
        silent.close(0)


def test_replay_backoff_doubles_while_failures_repeat_and_starts_afresh_long_after(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay that times out holds every source's thread: the next is not asked for 1 s, then 2,
    4, ... up to 60; a failure long after the last one waits 1 s again, not the old 60."""
    from router_adapter import subscriber as module

    now = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    source = Source("a", "tcp://127.0.0.1:1", "tcp://127.0.0.1:2")
    sub = Subscriber([source], lambda w, b: None, lambda w, r: None, silence_timeout_s=None)
    asked: list[float] = []
    monkeypatch.setattr(sub, "_fetch_replay", lambda state, start, until: asked.append(now[0]))  # None: timed out
    state = _State(source, None)  # type: ignore[arg-type] - no socket: the fetch is replaced
    waits = []
    for _ in range(8):
        assert not sub._replay(state, 1, 2)
        waits.append(state.replay_after - now[0])
        assert not sub._replay(state, 1, 2)  # within the wait: not asked
        now[0] = state.replay_after + 0.001
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0] and len(asked) == 8
    now[0] += 3600
    assert not sub._replay(state, 1, 2)
    assert state.replay_after - now[0] == 1.0


def test_undecodable_payloads_are_counted_and_skipped(ctx: zmq.Context, index_factory: IndexFactory) -> None:
    pub = FakeEnginePublisher(ctx, replay=False)
    router = KvRouter([Source("a", pub.endpoint, model="m")], block_size=BS, silence_timeout_s=None,
                      index_factory=index_factory)
    router.start()
    try:
        pub.wait_for_subscriber()
        pub.pub.send_multipart([b"", (0).to_bytes(8, "big"), b"\xc1not msgpack"])
        pub.pub.send_multipart([b"", b"short"])
        pub.publish([span(0, 2)], seq=1)
        wait_until(lambda: blocks(router, "a") == 2, what="store after bad payloads")
        stats = router.source_stats()["a"]
        assert stats.decode_errors == 2 and stats.resets == 0
    finally:
        router.stop()
        pub.close()


def test_silent_worker_is_aged_out(ctx: zmq.Context, index_factory: IndexFactory) -> None:
    pub = FakeEnginePublisher(ctx, replay=False)
    router = KvRouter([Source("a", pub.endpoint, model="m")], block_size=BS, silence_timeout_s=0.3,
                      index_factory=index_factory)
    router.start()
    try:
        pub.wait_for_subscriber()
        pub.publish([span(0, 3)])
        wait_until(lambda: router.source_stats()["a"].aged_out == 1, what="age-out")
        assert router.index("m").num_blocks == 0
        # It comes back: its next batch is applied from a clean state.
        pub.publish([span(0, 2)])
        wait_until(lambda: blocks(router, "a") == 2, what="state after return")
    finally:
        router.stop()
        pub.close()


def test_source_parsing() -> None:
    s = Source.parse("w1=tcp://10.0.0.1:5557,replay=tcp://10.0.0.1:5558,model=qwen3,topic=kv")
    assert (s.worker, s.endpoint, s.replay_endpoint, s.model, s.topic) == (
        "w1", "tcp://10.0.0.1:5557", "tcp://10.0.0.1:5558", "qwen3", "kv")
    assert Source.parse("w1=ipc:///tmp/kv.sock").endpoint == "ipc:///tmp/kv.sock"
    for bad in ["w1", "=tcp://x:1", "w1=localhost:5557", "w1=tcp://x:1,color=red", "w1=tcp://10.0.0.5",
                "w1=tcp://x:1,replay=tcp://x", "w1=tcp://x:port"]:
        with pytest.raises(ValueError):
            Source.parse(bad)


def test_a_source_zmq_refuses_fails_the_start() -> None:
    """An address ZMQ will not connect to ends the start with an error naming the source, instead
    of a subscriber thread that died unseen."""
    sub = Subscriber([Source("w1", "tcp://127.0.0.1:1"), Source("w2", "nosuch://x")], lambda *a: None,
                     lambda *a: None)
    with pytest.raises(ValueError, match="w2: cannot connect to 'nosuch://x'"):
        sub.start()
    sub.stop()


def test_native_index_gets_raw_payloads(ctx: zmq.Context, monkeypatch: pytest.MonkeyPatch) -> None:
    """Over the native index the subscriber decodes nothing in Python: the payload goes to
    `apply_payload` as the engine published it (a refused one is still counted)."""
    def no_python_decoding(payload: bytes) -> None:
        raise AssertionError("decoded in Python")

    monkeypatch.setattr("router_adapter.subscriber.decode_batch", no_python_decoding)
    pub = FakeEnginePublisher(ctx, replay=False)
    router = KvRouter([Source("a", pub.endpoint, model="m")], block_size=BS, silence_timeout_s=None,
                      index_factory=get_index_factory("native"))
    router.start()
    try:
        pub.wait_for_subscriber()
        pub.publish([span(0, 3)])
        wait_until(lambda: blocks(router, "a") == 3, what="stores")
        pub.pub.send_multipart([b"", (1).to_bytes(8, "big"), b"\xc1not msgpack"])
        pub.publish([removed([HASHES[2]])], seq=2)
        wait_until(lambda: blocks(router, "a") == 2, what="removal after a bad payload")
        stats = router.source_stats()["a"]
        assert (stats.batches, stats.decode_errors, stats.gaps, stats.resets) == (2, 1, 0, 0)
    finally:
        router.stop()
        pub.close()


def test_payload_runs_keep_order_and_flush_before_a_reset(ctx: zmq.Context) -> None:
    """`on_payloads` gets each drain of a source's socket as one run: batches in order, a reset
    only after every batch before it was handed on, refused payloads counted as decode errors."""
    pub = FakeEnginePublisher(ctx, replay=False)
    seen: list[tuple[str, object]] = []
    runs: list[int] = []

    def sink(worker: str, items: list[tuple[int, bytes]]) -> list[tuple[int, DecodeError]]:
        if not runs:
            time.sleep(0.3)  # the messages behind the first queue up meanwhile: later drains are runs
        runs.append(len(items))
        seen.extend(("batch", seq) for seq, _ in items)
        return [(i, DecodeError("refused")) for i, (_, payload) in enumerate(items) if payload == b"bad"]

    sub = Subscriber([Source("a", pub.endpoint)], None, lambda worker, reason: seen.append(("reset", reason)),
                     on_payloads=sink, silence_timeout_s=None)
    sub.start()
    try:
        pub.wait_for_subscriber()
        sent = [*range(10), 3, 4, 5]  # an engine restart after seq 9
        for i, seq in enumerate(sent):
            payload = b"bad" if i == 5 else f"p{seq}".encode()  # the first seq 5 is refused
            pub.pub.send_multipart([b"", seq.to_bytes(8, "big"), payload])
        wait_until(lambda: len(seen) == len(sent) + 1, what="every batch and the reset")
        assert seen == [*(("batch", s) for s in range(10)), ("reset", "restart"), *(("batch", s) for s in (3, 4, 5))]
        assert max(runs) > 1
        stats = sub.stats()["a"]
        assert (stats.batches, stats.decode_errors, stats.restarts, stats.resets) == (len(sent) - 1, 1, 1, 1)
    finally:
        sub.stop()
        pub.close()


def test_exactly_one_sink() -> None:
    for sinks in [{}, {"on_payload": lambda *a: None, "on_payloads": lambda *a: []}]:
        with pytest.raises(ValueError, match="exactly one"):
            Subscriber([], None, lambda worker, reason: None, **sinks)


@pytest.mark.parametrize("sink_kind", ["on_batch", "on_payload", "on_payloads"])
@pytest.mark.parametrize("reset_fails", [False, True])
def test_a_failing_sink_resets_its_source_and_the_thread_goes_on(
    ctx: zmq.Context, sink_kind: str, reset_fails: bool,
) -> None:
    """A sink that raises something other than DecodeError (a bug, memory) must not end the
    subscriber thread: the failing source is reset ("apply_error") and everything else goes on,
    even when the reset callback fails too."""
    pubs = {name: FakeEnginePublisher(ctx, replay=False) for name in ("a", "b")}
    seen: list[tuple[str, int]] = []
    resets: list[tuple[str, str]] = []
    failed: list[str] = []

    def take(worker: str, seq: int) -> None:
        if worker == "a" and seq == 2 and not failed:
            failed.append(worker)
            raise RuntimeError("a sink bug")
        seen.append((worker, seq))

    def on_reset(worker: str, reason: str) -> None:
        resets.append((worker, reason))
        if reset_fails:
            raise RuntimeError("a reset callback bug")

    def first_hash(payload: bytes) -> int:
        return decode_batch(payload).events[0].block_hashes[0]

    sinks = {
        "on_batch": {"on_batch": lambda worker, batch: take(worker, batch.events[0].block_hashes[0])},
        "on_payload": {"on_payload": lambda worker, seq, payload: take(worker, first_hash(payload))},
        "on_payloads": {"on_payloads": lambda worker, items: [take(worker, first_hash(p)) for _, p in items] and []},
    }[sink_kind]
    sub = Subscriber([Source(name, pub.endpoint) for name, pub in pubs.items()], sinks.pop("on_batch", None),
                     on_reset, silence_timeout_s=None, **sinks)
    sub.start()
    try:
        for pub in pubs.values():
            pub.wait_for_subscriber()
        def publish(seqs: range) -> None:
            for seq in seqs:
                for pub in pubs.values():
                    pub.publish([stored([seq], TOKENS[:BS], BS)])  # the block hash names the batch

        publish(range(3))
        wait_until(lambda: resets, what="the failure")
        publish(range(3, 6))
        wait_until(lambda: ("a", 5) in seen and ("b", 5) in seen, what="the batches after the failure")
        assert sub._thread is not None and sub._thread.is_alive()
        assert resets == [("a", "apply_error")]
        assert [s for w, s in seen if w == "b"] == list(range(6))
        # The failed batch is lost; a run that held it is handed on again one batch at a time.
        assert [s for w, s in seen if w == "a"][-3:] == [3, 4, 5]
        assert ("a", 2) not in seen or sink_kind == "on_payloads"
        stats = sub.stats()
        assert (stats["a"].resets, stats["b"].resets) == (1, 0)
    finally:
        sub.stop()
        for pub in pubs.values():
            pub.close()


def test_a_failed_run_is_handed_on_again_one_batch_at_a_time() -> None:
    """A run that fails may be half applied: the source is reset, then each of its batches is
    handed on alone, and only the one that fails again is lost (with a reset of its own)."""
    calls: list[list[int]] = []
    resets: list[str] = []

    def sink(worker: str, items: list[tuple[int, bytes]]) -> list[tuple[int, DecodeError]]:
        calls.append([seq for seq, _ in items])
        if any(seq == 2 for seq, _ in items):
            raise MemoryError("a failure that is not a refused payload")
        return [(i, DecodeError("refused")) for i, (_, payload) in enumerate(items) if payload == b"bad"]

    sub = Subscriber([], None, lambda worker, reason: resets.append(reason), on_payloads=sink)
    state = _State(Source("a", "tcp://127.0.0.1:1"), socket=None, last_seq=4)
    state.pending = [(0, b"p"), (1, b"bad"), (2, b"p"), (3, b"p"), (4, b"p")]
    sub._guarded(state, sub._flush)
    sub.stop()
    assert calls == [[0, 1, 2, 3, 4], [0], [1], [2], [3], [4]]
    assert resets == ["apply_error", "apply_error"]
    assert (state.stats.batches, state.stats.decode_errors, state.stats.resets) == (3, 1, 2)
    # The sequence is where the run ended: the engine's next message is checked against it. Here
    # the engine restarted (back to 0), and the restart is seen.
    assert state.pending == [] and state.last_seq == 4
    sub._handle(state, [b"", (0).to_bytes(8, "big"), b"p"])
    assert resets == ["apply_error", "apply_error", "restart"] and state.stats.restarts == 1


@pytest.mark.parametrize("next_seq, outcome", [(0, "restart"), (9, "gap")])
def test_a_failed_batch_keeps_the_sequence_checked(next_seq: int, outcome: str) -> None:
    """A sink that fails on a batch resets the worker; the batch's number is still the last one
    seen, so what comes next is checked against it: an engine restart, or a gap (no replay
    socket here), resets the worker again rather than going by as a continuation."""
    resets: list[str] = []
    calls: list[object] = []

    def sink(worker: str, batch: object) -> None:
        calls.append(batch)
        if len(calls) == 1:
            raise MemoryError("a failure that is not a refused payload")

    sub = Subscriber([], sink, lambda worker, reason: resets.append(reason))
    state = _State(Source("a", "tcp://127.0.0.1:1"), socket=None)
    payload = msgspec.msgpack.encode([0.0, [span(0, 1)], 0])
    for seq in (5, next_seq):
        sub._guarded(state, lambda st: sub._handle(st, [b"", seq.to_bytes(8, "big"), payload]))
    sub.stop()
    assert resets == ["apply_error", outcome] and state.last_seq == next_seq and len(calls) == 2
    assert (state.stats.restarts, state.stats.gaps) == ((1, 0) if outcome == "restart" else (0, 1))


def test_stopping_behind_a_backlog_resets_nothing(ctx: zmq.Context) -> None:
    """`stop()` with batches still queued behind a slow sink (a relay waiting on JetStream acks)
    ends the thread without a reset: a relay would publish one to every replica."""
    pub = FakeEnginePublisher(ctx)
    handed: list[int] = []
    resets: list[str] = []

    def slow_sink(worker: str, seq: int, payload: bytes) -> None:
        time.sleep(0.05)
        handed.append(seq)

    sub = Subscriber([Source("a", pub.endpoint, pub.replay_endpoint)], None,
                     lambda worker, reason: resets.append(reason), on_payload=slow_sink, silence_timeout_s=None)
    sub.start()
    try:
        pub.wait_for_subscriber()
        for block in range(200):
            pub.publish([stored([block], TOKENS[:BS], BS)])
        wait_until(lambda: handed, what="the first batch")
        sub.stop(timeout=1.0)
        assert sub._thread is not None and not sub._thread.is_alive()
        assert resets == [] and 0 < len(handed) < 200
    finally:
        pub.close()
