"""Faults a replica's feed meets in service (router_adapter/nats_feed.py), each against a real
nats-server, with messages published as a relay writes them: a stream deleted and made again, a
snapshot replaced while it is read, an unreadable snapshot, a stray message on the subjects, workers
that come and go, a deleted snapshot bucket, and a silence that only the stream's times show."""

from __future__ import annotations

import asyncio
import threading
import time

import msgspec
import pytest

from router_adapter import KvRouter, ModelOptions, fanout, nats_feed
from router_adapter.nats_feed import LIVE, FeedOptions, NatsFeed, build_snapshot
from tests.kv.nats_server import NatsServer
from tests.kv.publisher import wait_until

MODEL = "m"
BS = 16
SNAPSHOT_NAME = fanout.subject_token(MODEL)
BUCKET = fanout.DEFAULT_SNAPSHOT_BUCKET


def tokens(block: int) -> list[int]:
    return list(range(block * BS, (block + 1) * BS))


def stored(block: int) -> bytes:
    """A vLLM batch storing one block with no parent (engine hash 1000 + block)."""
    event = {"type": "BlockStored", "block_hashes": [1000 + block], "parent_block_hash": None,
             "token_ids": tokens(block), "block_size": BS, "lora_id": None, "medium": "GPU", "lora_name": None}
    return msgspec.msgpack.encode([time.time(), [event], 0])


class Publisher:
    """A NATS connection on a loop of its own, publishing on the model's subjects as a relay does."""

    def __init__(self, url: str) -> None:
        import nats

        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.nc = self.run(nats.connect(url))
        self.js = self.nc.jetstream()
        self.ensure_stream()

    def run(self, coroutine):  # noqa: ANN001, ANN201
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(30)

    def ensure_stream(self) -> None:
        self.run(fanout.ensure_stream(self.js, fanout.DEFAULT_STREAM, fanout.DEFAULT_PREFIX, 3600.0))

    def publish(self, worker: str, data: bytes, headers: dict[str, str]) -> None:
        self.run(self.js.publish(fanout.subject(fanout.DEFAULT_PREFIX, MODEL, worker), data,
                                 stream=fanout.DEFAULT_STREAM, headers=headers))

    def batches(self, worker: str, epoch: int, seqs: range, first_block: int = 0) -> None:
        for seq in seqs:
            self.publish(worker, stored(first_block + seq), fanout.batch_headers(worker, epoch, seq))

    def reset(self, worker: str, epoch: int, reason: str) -> None:
        self.publish(worker, b"", fanout.reset_headers(worker, epoch, reason))

    def close(self) -> None:
        self.run(self.nc.close())
        self.loop.call_soon_threadsafe(self.loop.stop)


@pytest.fixture
def publisher(nats_server: NatsServer):  # noqa: ANN201
    p = Publisher(nats_server.url)
    yield p
    p.close()


@pytest.fixture
def replicas(nats_server: NatsServer):  # noqa: ANN201
    """Starts replicas (`start(**feed_options)` -> (router, feed)); all stopped at the end."""
    started: list[KvRouter] = []

    def start(**options) -> tuple[KvRouter, NatsFeed]:  # noqa: ANN003
        options = {"snapshot_period_s": 0.0, "silence_timeout_s": None, **options}
        router = KvRouter([], models={MODEL: ModelOptions(block_size=BS)})
        feed = NatsFeed(router, FeedOptions(nats_server.url, **options))
        router.attach_feed(feed)
        router.start()
        started.append(router)
        return router, feed

    yield start
    for router in started:
        router.stop()


def live(feed: NatsFeed) -> bool:
    return feed.models[MODEL].state == LIVE


def blocks(router: KvRouter, worker: str) -> int:
    return router.index(MODEL).worker_blocks(worker)


def held(router: KvRouter, blocks_: range) -> list[int]:
    """The blocks of `blocks_` some worker holds."""
    return [b for b in blocks_ if any(w.blocks for w in router.score(MODEL, tokens(b)).workers)]


def on_feed_loop(feed: NatsFeed, coroutine):  # noqa: ANN001, ANN201
    return asyncio.run_coroutine_threadsafe(coroutine, feed._loop).result(30)


def test_a_stream_made_again_drops_the_view_and_reads_the_new_one(publisher: Publisher, replicas) -> None:  # noqa: ANN001
    """The new stream's sequences name other messages: a running replica that read on from its old
    position skipped the new stream's first ones (blind until the new stream passed the old
    sequence), and a snapshot of the old stream, loaded by a new replica, brought back workers of a
    stream that no longer exists."""
    publisher.batches("w0", 1, range(1, 21))
    a, feed_a = replicas()
    wait_until(lambda: live(feed_a) and blocks(a, "w0") == 20, 30, "replica a to read the first stream")
    assert feed_a.snapshot_now(MODEL)  # taken of the first stream at its sequence 20

    publisher.run(publisher.js.delete_stream(fanout.DEFAULT_STREAM))
    publisher.ensure_stream()
    publisher.batches("w1", 1, range(1, 26), first_block=100)  # past the old last sequence
    wait_until(lambda: blocks(a, "w1") == 25, 30, "replica a to read the new stream from its start")
    assert blocks(a, "w0") == 0

    b, feed_b = replicas()
    wait_until(lambda: live(feed_b) and blocks(b, "w1") == 25, 30, "replica b to read the new stream")
    assert blocks(b, "w0") == 0 and feed_b.models[MODEL].snapshot_time is None  # the snapshot was ignored
    assert held(a, range(0, 130)) == held(b, range(0, 130)) == list(range(101, 126))


def test_a_stream_made_again_drops_workers_that_have_no_cursor(publisher: Publisher, replicas) -> None:  # noqa: ANN001
    """A snapshot's index may hold workers its meta has no cursor for; a stream made again drops
    them too (only those with a cursor were, and the rest stayed for good)."""
    publisher.batches("w0", 1, range(1, 4))
    a, feed_a = replicas()
    wait_until(lambda: live(feed_a) and blocks(a, "w0") == 3, 30, "replica a to go live")
    meta = {"stream": fanout.DEFAULT_STREAM, "stream_seq": 3, "created": time.time(), "index_kind": "PrefixIndex",
            "workers": {}}
    on_feed_loop(feed_a, feed_a._store.put(SNAPSHOT_NAME, build_snapshot(meta, a.index(MODEL).snapshot())))
    b, feed_b = replicas()
    wait_until(lambda: live(feed_b) and blocks(b, "w0") == 3, 30, "replica b to load the snapshot")
    publisher.run(publisher.js.delete_stream(fanout.DEFAULT_STREAM))
    publisher.ensure_stream()
    publisher.batches("w1", 1, range(1, 2), first_block=100)
    wait_until(lambda: blocks(b, "w1") == 1, 30, "replica b to read the new stream")
    assert blocks(b, "w0") == 0


def test_a_snapshot_replaced_while_it_is_read_is_read_again(publisher: Publisher, replicas, monkeypatch) -> None:  # noqa: ANN001
    """Another replica's put purges the chunks of the snapshot it replaces; a replica reading the old
    one waited for them for ever (the client's `get`), stuck loading. Here the reader is handed the
    replaced object's description, as if the put came right after it looked."""
    monkeypatch.setattr(nats_feed, "SNAPSHOT_STALL_S", 1.0)
    publisher.batches("w0", 1, range(1, 4))
    a, feed_a = replicas()
    wait_until(lambda: live(feed_a) and blocks(a, "w0") == 3, 30, "replica a to go live")
    assert feed_a.snapshot_now(MODEL)
    replaced = on_feed_loop(feed_a, feed_a._store.get_info(SNAPSHOT_NAME))
    publisher.batches("w0", 1, range(4, 5))
    wait_until(lambda: blocks(a, "w0") == 4, 30, "the fourth batch")
    assert feed_a.snapshot_now(MODEL)  # purges the first one's chunks
    newest = feed_a.models[MODEL].snapshot_time

    from nats.js.object_store import ObjectStore

    real_get_info, handed_out = ObjectStore.get_info, []

    async def stale_first(self, name, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if name == SNAPSHOT_NAME and not handed_out:
            handed_out.append(name)
            return replaced
        return await real_get_info(self, name, *args, **kwargs)

    monkeypatch.setattr(ObjectStore, "get_info", stale_first)
    b, feed_b = replicas()
    wait_until(lambda: live(feed_b), 30, "replica b to load the newest snapshot and go live")
    assert handed_out and feed_b.models[MODEL].snapshot_time == newest
    assert held(b, range(0, 6)) == held(a, range(0, 6)) == [1, 2, 3, 4]


def _without_workers(feed: NatsFeed) -> None:
    """A meta with no cursors, ahead of a sound snapshot of the index."""
    meta = {"stream": fanout.DEFAULT_STREAM, "stream_seq": 3, "created": time.time(), "index_kind": "PrefixIndex"}
    index_bytes = feed.router.index(MODEL).snapshot()
    on_feed_loop(feed, feed._store.put(SNAPSHOT_NAME, build_snapshot(meta, index_bytes)))


def _other_bytes_under_the_digest(feed: NatsFeed) -> None:
    """The object's one chunk replaced by other bytes of its length (as a damaged store would)."""
    assert feed.snapshot_now(MODEL)
    info = on_feed_loop(feed, feed._store.get_info(SNAPSHOT_NAME))
    assert info.chunks == 1
    subject = f"$O.{BUCKET}.C.{info.nuid}"
    on_feed_loop(feed, feed._js.purge_stream(f"OBJ_{BUCKET}", subject=subject))
    on_feed_loop(feed, feed._js.publish(subject, b"\0" * info.size))


def _snapshot_meta(**fields: object):  # noqa: ANN202
    """Damage: a snapshot of the index under a meta with `fields` changed."""
    def damage(feed: NatsFeed) -> None:
        meta = {"stream": fanout.DEFAULT_STREAM, "stream_seq": 3, "created": time.time(),
                "index_kind": "PrefixIndex", "workers": {"w0": [1, 3, time.time()]}, **fields}
        index_bytes = feed.router.index(MODEL).snapshot()
        on_feed_loop(feed, feed._store.put(SNAPSHOT_NAME, build_snapshot(meta, index_bytes)))
    damage.__name__ = "meta_" + "_".join(f"{k}={str(v)[:12]}" for k, v in fields.items())
    return damage


def _object_meta(**fields: object):  # noqa: ANN202
    """Damage: the object's meta (which any client of the bucket may write) with `fields` changed."""
    def damage(feed: NatsFeed) -> None:
        import base64
        import json

        subject = f"$O.{BUCKET}.M." + base64.urlsafe_b64encode(SNAPSHOT_NAME.encode()).decode()
        meta = {"name": SNAPSHOT_NAME, "bucket": BUCKET, "nuid": "abc", "size": 1, "chunks": 1,
                "digest": "SHA-256=" + base64.urlsafe_b64encode(b"\0" * 32).decode(), **fields}
        on_feed_loop(feed, feed._js.publish(subject, json.dumps(meta).encode(), headers={"Nats-Rollup": "sub"}))
    damage.__name__ = "object_" + "_".join(f"{k}={v}" for k, v in fields.items())
    return damage


#: A JSON integer `json.loads` keeps exact, past a float's range (`math.isfinite` raises on it).
HUGE = 10 ** 400


@pytest.mark.parametrize("damage", [
    _without_workers, _other_bytes_under_the_digest,
    # A cursor's last message time NaN (`json.loads` reads it): that worker never aged out.
    _snapshot_meta(workers={"w0": [1, 3, float("nan")]}),
    _snapshot_meta(created=HUGE), _snapshot_meta(workers={"w0": [1, 3, HUGE]}),
    _snapshot_meta(stream_seq=1 << 64), _snapshot_meta(workers={"w0": [1, -3, time.time()]}),
    _snapshot_meta(engine_clocks={"w0": HUGE}), _snapshot_meta(engine_clocks=[1.5]),
    # A digest that is a number: `.split` on it raised.
    _object_meta(digest=5, size=0, chunks=0),
    # A chunks' id that is no subject token (the client or the server refuses the pull), a count
    # that is no count.
    _object_meta(nuid="a b"), _object_meta(nuid="a..b"), _object_meta(nuid=7), _object_meta(chunks=1.5),
    _object_meta(chunks=-1), _object_meta(chunks=10 ** 9),
], ids=lambda damage: damage.__name__)
def test_an_unreadable_snapshot_is_ignored(publisher: Publisher, replicas, damage) -> None:  # noqa: ANN001
    """The documented fallback: ignored, the stream read from its start. Before, these raised past
    the snapshot's checks (TypeError, OverflowError, the client's and the server's refusals of a
    subject), and the replica fetched the snapshot again for ever, never reading the stream."""
    publisher.batches("w0", 1, range(1, 4))
    a, feed_a = replicas()
    wait_until(lambda: live(feed_a) and blocks(a, "w0") == 3, 30, "replica a to go live")
    damage(feed_a)
    b, feed_b = replicas()
    wait_until(lambda: live(feed_b), 30, "replica b to go live from the stream")
    assert feed_b.models[MODEL].snapshot_time is None and held(b, range(0, 5)) == [1, 2, 3]


def test_a_snapshot_larger_than_the_index_can_take_is_not_read(publisher: Publisher, replicas,  # noqa: ANN001
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """An object is read into memory whole before its digest and contents are checked: one that
    claims more than this replica's `max_blocks` could hold is ignored before any chunk is read."""
    publisher.batches("w0", 1, range(1, 4))
    a, feed_a = replicas()
    wait_until(lambda: live(feed_a) and blocks(a, "w0") == 3, 30, "replica a to go live")
    assert feed_a.snapshot_now(MODEL)
    size = on_feed_loop(feed_a, feed_a._store.get_info(SNAPSHOT_NAME)).size
    monkeypatch.setattr(nats_feed, "SNAPSHOT_FIXED_BYTES", size - 1)
    monkeypatch.setattr(nats_feed, "SNAPSHOT_BYTES_PER_BLOCK", 0)
    b, feed_b = replicas()
    wait_until(lambda: live(feed_b), 30, "replica b to go live from the stream")
    assert feed_b.models[MODEL].snapshot_time is None and held(b, range(0, 5)) == [1, 2, 3]


@pytest.mark.parametrize("description", ["not json", "[1]", '{"created": "x"}', '{"created": 1e300}',
                                         '{"created": 1%s}' % ("0" * 400)], ids=lambda d: d[:20])
def test_a_snapshot_whose_time_cannot_be_read_is_overwritten(replicas, description: str) -> None:  # noqa: ANN001
    """Any client of the bucket may write an object's meta: a description that is not JSON, not an
    object, whose time is not a number or is far in the future raised (or returned "fresh") at
    every period on every replica, and no snapshot was written again."""
    from nats.js.api import ObjectMeta

    _, feed = replicas(snapshot_period_s=60.0)
    wait_until(lambda: live(feed), 30, "the feed to go live")
    on_feed_loop(feed, feed._store.put(SNAPSHOT_NAME, b"junk",
                                       meta=ObjectMeta(name=SNAPSHOT_NAME, description=description)))
    assert on_feed_loop(feed, feed.publish_snapshot(feed.models[MODEL]))
    assert feed.models[MODEL].snapshots_written == 1


def test_messages_dropped_on_the_way_are_read_again(publisher: Publisher, replicas,  # noqa: ANN001
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A message the client drops after the server delivered it (nats-py's pending limits, a slow
    consumer) is never redelivered with no acks: it was lost with no gap noticed when it was a
    worker's last batch. A skipped consumer sequence number restarts the consumer from the last
    message applied."""
    from nats.js.client import JetStreamContext

    real_fetch = JetStreamContext.PullSubscription.fetch
    dropped: list[int] = []

    async def dropping(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        msgs = await real_fetch(self, *args, **kwargs)
        if not dropped and len(msgs) > 2:
            dropped.append(msgs[1].metadata.sequence.stream)
            return msgs[:1] + msgs[2:]
        return msgs

    monkeypatch.setattr(JetStreamContext.PullSubscription, "fetch", dropping)
    publisher.batches("w0", 1, range(1, 11))
    publisher.batches("w1", 1, range(1, 4), first_block=100)
    router, feed = replicas()
    wait_until(lambda: live(feed) and blocks(router, "w1") == 3, 30, "the feed to go live")
    assert dropped
    assert held(router, range(0, 12)) == list(range(1, 11))
    assert feed.models[MODEL].workers["w0"].gaps == 0


def test_a_snapshot_from_a_replica_whose_clock_runs_a_little_ahead_is_fresh(replicas) -> None:  # noqa: ANN001
    """Times up to a period ahead are clock skew between replicas, not the future: overwritten, a
    fresh snapshot would be written again by every other replica at each period."""
    import json

    from nats.js.api import ObjectMeta

    _, feed = replicas(snapshot_period_s=60.0)
    wait_until(lambda: live(feed), 30, "the feed to go live")
    ahead = json.dumps({"created": time.time() + 30})
    on_feed_loop(feed, feed._store.put(SNAPSHOT_NAME, b"x", meta=ObjectMeta(name=SNAPSHOT_NAME, description=ahead)))
    assert not on_feed_loop(feed, feed.publish_snapshot(feed.models[MODEL]))
    assert feed.models[MODEL].snapshots_written == 0


@pytest.mark.parametrize("worker, headers", [
    ("w9", {fanout.KIND: fanout.BATCH, fanout.EPOCH: "x", fanout.SEQ: "1"}),  # raised past the pull
    ("w0", None),  # `nats pub` on a worker's subject: read as epoch 0, it reset w0 twice
    ("w0", {fanout.KIND: fanout.BATCH, fanout.EPOCH: "1"}),  # a batch without its sequence
    ("w0", {fanout.EPOCH: "1", fanout.SEQ: "11"}),  # no kind
])
def test_a_stray_message_is_skipped_and_the_rest_of_its_pull_applied(publisher: Publisher, replicas,  # noqa: ANN001
                                                                     worker: str, headers) -> None:  # noqa: ANN001
    """A message whose headers are not a relay's (a stray publish) is skipped and counted: it used
    to raise after the batches before it in the same pull had been planned, losing them unnoticed
    (no gap, no reset), or, with no headers at all, to read as a batch of epoch 0 that reset the
    worker and then again at the relay's next batch (blocks lost on every replica)."""
    publisher.batches("w0", 1, range(1, 11))
    publisher.publish(worker, b"x", headers)
    publisher.batches("w0", 1, range(11, 21))
    router, feed = replicas()
    wait_until(lambda: live(feed), 30, "the feed to go live")
    model = feed.models[MODEL]
    assert held(router, range(0, 22)) == list(range(1, 21))
    cursor = model.workers["w0"]
    assert (model.malformed, cursor.gaps, cursor.resets, "w9" in model.workers) == (1, 0, 0, False)


def test_workers_reset_and_silent_are_forgotten(publisher: Publisher, replicas) -> None:  # noqa: ANN001
    """A pod that goes away leaves a reset; its cursor (and its rows in KvStatus, the metrics and
    every snapshot) stayed for good, one per pod name ever seen."""
    router, feed = replicas(silence_timeout_s=1.0)
    for w in range(5):
        publisher.batches(f"w{w}", 1, range(1, 2), first_block=w)
        publisher.reset(f"w{w}", 1, "silent")
    wait_until(lambda: feed.models[MODEL].stream_seq == 10, 30, "the ten messages")
    wait_until(lambda: not feed.models[MODEL].workers, 30, "the workers' cursors to be forgotten")
    publisher.batches("w0", 2, range(1, 2), first_block=50)  # a worker back: applied as a new one
    wait_until(lambda: blocks(router, "w0") == 1, 30, "w0's new batch")
    assert held(router, range(0, 60)) == [51]


def test_a_deleted_snapshot_bucket_is_made_again(replicas) -> None:  # noqa: ANN001
    router, feed = replicas()
    wait_until(lambda: live(feed), 30, "the feed to go live")
    on_feed_loop(feed, feed._js.delete_object_store(BUCKET))
    assert feed.snapshot_now(MODEL)
    assert on_feed_loop(feed, feed._store.get_info(SNAPSHOT_NAME)).size > 0


def test_a_silence_seen_in_the_stream_resets_as_it_did_on_a_live_replica(publisher: Publisher, replicas) -> None:  # noqa: ANN001
    """A live replica drops a worker silent for `silence_timeout_s` by its clock; one that read the
    same messages later (catching up, where nothing ages out) kept it: two views of one stream.
    Each view is read as soon as it holds the fourth batch, before its own clock ages w0 out again."""
    silence = 3.0
    a, feed_a = replicas(silence_timeout_s=silence)
    wait_until(lambda: live(feed_a), 30, "replica a to go live")
    publisher.batches("w0", 1, range(1, 4))
    wait_until(lambda: blocks(a, "w0") == 3, 30, "the first three batches")
    wait_until(lambda: blocks(a, "w0") == 0, 30, "replica a to age w0 out")
    time.sleep(0.5)  # the next message's stream time well past the timeout
    publisher.batches("w0", 1, range(4, 5))
    # Stream sequences: batches 1-3, the silent reset replica a published, batch 4.
    wait_until(lambda: feed_a.models[MODEL].stream_seq == 5, 30, "the fourth batch on replica a")
    view_a = held(a, range(0, 6))
    b, feed_b = replicas(silence_timeout_s=silence)
    wait_until(lambda: live(feed_b) and feed_b.models[MODEL].stream_seq == 5, 30, "replica b to catch up")
    assert held(b, range(0, 6)) == view_a == [4]


def test_a_live_replica_whose_clock_runs_ahead_drops_a_worker_where_every_replica_does(
    publisher: Publisher, replicas, monkeypatch,  # noqa: ANN001
) -> None:
    """A live replica's clock sees the silence before the stream does (its clock ahead of the
    server's here; applying a message late does the same). It used to drop the worker on its own,
    where a replica reading the stream later, with the worker's next batch inside the timeout,
    kept it. The drop is now a reset in the stream, applied by every replica at the same point."""
    silence = 3.0
    a, feed_a = replicas(silence_timeout_s=silence)
    wait_until(lambda: live(feed_a), 30, "replica a to go live")
    import types

    monkeypatch.setattr(nats_feed, "time", types.SimpleNamespace(time=lambda: time.time() + 2.5,
                                                                  monotonic=time.monotonic))
    publisher.batches("w0", 1, range(1, 4))
    wait_until(lambda: feed_a.models[MODEL].workers.get("w0") is not None, 30, "the first batches")
    wait_until(lambda: blocks(a, "w0") == 0, 30, "replica a to age w0 out by its clock")
    monkeypatch.setattr(nats_feed, "time", time)
    publisher.batches("w0", 1, range(4, 5))  # well inside the timeout by the stream's times
    wait_until(lambda: blocks(a, "w0") == 1, 30, "the fourth batch on replica a")
    view_a = held(a, range(0, 6))
    b, feed_b = replicas(silence_timeout_s=silence)
    wait_until(lambda: live(feed_b) and blocks(b, "w0") >= 1, 30, "replica b to catch up")
    assert held(b, range(0, 6)) == view_a == [4]


def test_a_consumer_whose_first_question_fails_is_let_go(monkeypatch: pytest.MonkeyPatch) -> None:
    """The consumer is asked what it has pending as soon as it is made; a failure there (a timeout
    of a busy server) left the client's subscription registered, one more at each restart of the
    model's consumer."""
    made, let_go = [], []

    class Subscription:
        async def consumer_info(self) -> None:
            raise asyncio.TimeoutError

        async def unsubscribe(self) -> None:
            let_go.append(self)

    class JetStream:
        async def pull_subscribe(self, *args: object, **kwargs: object) -> Subscription:
            made.append(Subscription())
            return made[-1]

    feed = NatsFeed(KvRouter([], models={MODEL: ModelOptions(block_size=BS)}), FeedOptions("nats://127.0.0.1:1"))
    monkeypatch.setattr(feed, "_js", JetStream())
    for _ in range(3):
        with pytest.raises(asyncio.TimeoutError):
            asyncio.run(feed._consume(nats_feed.ModelFeed(MODEL)))
    assert len(made) == 3 and let_go == made


def test_a_pull_asks_for_no_more_than_fetch_bytes_of_the_largest_messages(publisher: Publisher, replicas,  # noqa: ANN001
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Pulls ask for a count of messages, and a pull's messages are all held at once: a count sized
    for small messages (256) asked a server whose max_payload was raised for up to 256 of its
    largest. A pull now asks for no more than `fetch_bytes` of the server's largest message (here 2
    MiB of 1 MiB: two), and a backlog of 600 KB messages comes through whole, no consumer made
    again."""
    from nats.js.client import JetStreamContext

    asked: list[int] = []
    fetch = JetStreamContext.PullSubscription.fetch

    async def counted(self, batch: int = 1, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        asked.append(batch)
        return await fetch(self, batch, *args, **kwargs)

    monkeypatch.setattr(JetStreamContext.PullSubscription, "fetch", counted)
    padding = b"x" * 600_000
    for seq in range(24):
        event = {"type": "BlockStored", "block_hashes": [1000 + seq], "parent_block_hash": None,
                 "token_ids": tokens(seq), "block_size": BS, "lora_id": None, "medium": "GPU", "lora_name": None,
                 "padding": padding}
        publisher.publish("w0", msgspec.msgpack.encode([time.time(), [event], 0]), fanout.batch_headers("w0", 1, seq))
    router, feed = replicas(fetch_bytes=2 << 20)
    wait_until(lambda: live(feed) and blocks(router, "w0") == 24, 60, "the backlog to be read")
    model = feed.models[MODEL]
    assert (model.consumer_restarts, model.workers["w0"].gaps, model.workers["w0"].batches) == (0, 0, 24)
    assert held(router, range(24)) == list(range(24))
    assert max(asked) == 2, asked


def test_a_replica_back_from_an_outage_waits_a_timeout_for_the_relays(nats_server: NatsServer, publisher: Publisher,
                                                                     replicas) -> None:  # noqa: ANN001
    """After a NATS outage longer than the timeout a live replica saw every worker silent by its
    clock (the last message's stream time) as soon as it was back, and published their `silent`
    resets before the relays, back too, had published what they held meanwhile. Here the relay's
    batch comes a while after the replica is live again, well inside the timeout of its return,
    its engine clock just after the last one's (the engine was never silent)."""
    silence = 6.0
    router, feed = replicas(silence_timeout_s=silence)
    wait_until(lambda: live(feed), 30, "the replica to go live")
    clock = time.time()
    publisher.publish("w0", stored(1), {**fanout.batch_headers("w0", 1, 1), fanout.ENGINE_CLOCK: f"{clock:.3f}"})
    wait_until(lambda: blocks(router, "w0") == 1, 30, "the first batch")
    nats_server.stop()
    time.sleep(silence + 1.0)
    nats_server.start()
    wait_until(lambda: feed._connection >= 1 and live(feed), 60, "the replica to be back and live")
    time.sleep(2.5)  # the replica's age-out ran twice meanwhile
    relay = Publisher(nats_server.url)  # as a relay reconnected: a connection of its own
    try:
        relay.publish("w0", stored(2), {**fanout.batch_headers("w0", 1, 2), fanout.ENGINE_CLOCK: f"{clock + 0.2:.3f}"})
    finally:
        relay.close()
    wait_until(lambda: feed.models[MODEL].workers["w0"].last_seq == 2, 30, "the relay's batch")
    cursor = feed.models[MODEL].workers["w0"]
    assert (cursor.aged_out, cursor.resets) == (0, 0)
    assert held(router, range(0, 4)) == [1, 2]


def test_a_failed_reset_leaves_the_rest_of_its_slice_applied(publisher: Publisher, replicas,  # noqa: ANN001
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropping a worker that fails (a bug, memory) raised out of the slice, whose messages were
    all planned (the stream sequence past them): the consumer, made again from there, never
    applied the messages after the reset."""
    publisher.batches("w0", 1, range(1, 4))
    publisher.reset("w0", 2, "restart")
    publisher.batches("w0", 2, range(1, 4), first_block=10)
    failures = []

    def feed_reset(self, model: str, worker: str, reason: str) -> None:  # noqa: ANN001
        if not failures:
            failures.append(reason)
            raise MemoryError("dropping the worker")
        original(self, model, worker, reason)

    original = KvRouter.feed_reset
    monkeypatch.setattr(KvRouter, "feed_reset", feed_reset)
    router, feed = replicas()  # catching up: the seven messages in one pull
    wait_until(lambda: live(feed) and feed.models[MODEL].stream_seq == 7, 30, "the replica to catch up")
    assert failures == ["relay_restart"]
    assert held(router, range(10, 14)) == [11, 12, 13]


def test_a_snapshot_keeps_the_workers_engine_clocks(publisher: Publisher, replicas) -> None:  # noqa: ANN001
    """A replica starting from a snapshot judges the silence before each worker's next message by
    the relay's clock as one that read the whole stream: the snapshot carries the last one."""
    for seq in range(1, 4):
        publisher.publish("w0", stored(seq), {**fanout.batch_headers("w0", 1, seq), fanout.ENGINE_CLOCK: f"{seq}.5"})
    a, feed_a = replicas()
    wait_until(lambda: live(feed_a) and blocks(a, "w0") == 3, 30, "replica a to go live")
    assert feed_a.snapshot_now(MODEL)
    b, feed_b = replicas()
    wait_until(lambda: live(feed_b), 30, "replica b to go live")
    assert feed_b.models[MODEL].snapshot_time is not None and feed_b.models[MODEL].workers["w0"].engine_clock == 3.5


def test_a_worker_whose_first_batches_are_gone_from_the_stream_is_counted_as_a_gap(
    publisher: Publisher, replicas, caplog: pytest.LogCaptureFixture,  # noqa: ANN001
) -> None:
    """A replica that reads the stream from a start whose first messages were deleted (retention;
    a purge here) applied a worker's first batch read as if it were the worker's first ever: the
    blocks of the deleted batches were missing from its view for good while it reported live with
    no gap, no reset and nothing logged but `kv_nats_no_snapshot`. A worker whose first message
    read starts its epoch (a relay's reset) lost nothing and is not counted."""
    publisher.batches("w0", 1, range(1, 6))              # stream 1-5
    publisher.reset("w1", 7, "restart")                  # stream 6: w1's epoch starts here, kept
    publisher.batches("w1", 7, range(1, 3), first_block=20)
    assert publisher.run(publisher.js.purge_stream(fanout.DEFAULT_STREAM, seq=4))  # keeps 4 on
    caplog.set_level("WARNING", logger="router_adapter.nats_feed")
    router, feed = replicas()
    wait_until(lambda: live(feed) and feed.models[MODEL].stream_seq == 8, 30, "the feed to read what is left")
    model = feed.models[MODEL]
    w0, w1 = model.workers["w0"], model.workers["w1"]
    assert (w0.gaps, w0.resets, w1.gaps, w1.resets) == (1, 1, 0, 1)  # w1's one reset is its relay's
    assert held(router, range(0, 30)) == [4, 5, 21, 22]  # what a gap leaves: the batches after it
    assert "kv_nats_messages_gone model=m stream_seq=0 first_seq=4" in caplog.text
    assert "kv_nats_gap_after_messages_gone model=m worker=w0" in caplog.text
    assert "kv_nats_gap_after_messages_gone model=m worker=w1" not in caplog.text


def test_a_worker_whose_messages_after_the_snapshot_are_gone_is_counted_as_a_gap(publisher: Publisher, replicas) -> None:  # noqa: ANN001
    """The same past a snapshot older than the retention: w0's reset and first batches of a new
    epoch are gone, and its next batch read was applied after a `new_epoch` reset, uncounted."""
    a, feed_a = replicas()
    publisher.batches("w0", 1, range(1, 3))
    wait_until(lambda: feed_a.models[MODEL].stream_seq == 2, 30, "replica a to read w0's batches")
    assert feed_a.snapshot_now(MODEL)
    publisher.reset("w0", 2, "restart")                             # stream 3
    publisher.batches("w0", 2, range(1, 4), first_block=10)         # stream 4-6
    assert publisher.run(publisher.js.purge_stream(fanout.DEFAULT_STREAM, seq=5))
    b, feed_b = replicas()
    wait_until(lambda: live(feed_b) and feed_b.models[MODEL].stream_seq == 6, 30, "replica b to read on")
    w0 = feed_b.models[MODEL].workers["w0"]
    assert (feed_b.models[MODEL].snapshot_time is not None, w0.gaps, w0.resets) == (True, 1, 1)
    assert held(b, range(0, 20)) == [12, 13]


def test_a_live_replica_far_behind_the_stream_reports_catching_up(publisher: Publisher, replicas,  # noqa: ANN001
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    """Live stayed live (Score not flagged warming) with thousands of messages pending: the state
    went back from live only on a reconnection. A burst past `BEHIND_PENDING` (a relay flushing
    what it buffered through an outage) is reported once, until nothing is pending again."""
    caplog.set_level("INFO", logger="router_adapter.nats_feed")
    router, feed = replicas()
    wait_until(lambda: live(feed), 30, "the feed to go live")
    applying = router.feed_payloads
    # The replica applies nothing until the whole burst is in the stream: a publisher starved of
    # CPU (cargo building on both cores beside the tests) once never got 1,000 messages ahead of a
    # replica applying 1 ms a message, and the test then saw no burst at all.
    stored_all = threading.Event()

    def slowly(model: str, items: list) -> list:  # a replica short of CPU: 1 ms a message
        stored_all.wait(30)
        time.sleep(0.001 * len(items))
        return applying(model, items)

    router.feed_payloads = slowly
    burst = 3 * nats_feed.BEHIND_PENDING // 2
    subject = fanout.subject(fanout.DEFAULT_PREFIX, MODEL, "w0")

    async def publish_burst() -> None:  # core publishes, not waiting for acks: faster than it applies
        for seq in range(1, burst + 1):
            await publisher.nc.publish(subject, stored(seq % 50), headers=fanout.batch_headers("w0", 1, seq))
        await publisher.nc.flush()

    publisher.run(publish_burst())
    wait_until(lambda: publisher.run(publisher.js.stream_info(fanout.DEFAULT_STREAM)).state.last_seq == burst, 30,
               "the stream to store the burst")
    stored_all.set()
    wait_until(lambda: feed.models[MODEL].state == nats_feed.CATCHING_UP and router.warming(MODEL), 30,
               "the replica to report it is behind")
    wait_until(lambda: live(feed) and feed.models[MODEL].stream_seq == burst, 60, "the replica to catch up")
    assert not router.warming(MODEL) and feed.models[MODEL].workers["w0"].batches == burst
    assert caplog.text.count("kv_nats_behind model=m") == 1
    assert caplog.text.count("kv_nats_live model=m") == 1  # once caught up (not flapping)


def test_kv_status_and_metrics_show_what_the_feed_counts(publisher: Publisher, replicas) -> None:  # noqa: ANN001
    """Malformed messages and consumer restarts were counted per model but shown nowhere, and the
    gaps and resets of workers fed from the stream only in KvStatus: `sidecar_kv_sequence_gaps` and
    `sidecar_kv_worker_resets` covered direct sources only."""
    from sidecar.servicers.kv_router import KvMetricsCollector, _status

    publisher.batches("w0", 1, range(1, 3))
    publisher.publish("w0", b"x", {"Sidecar-Kind": "batch"})  # no epoch: not a relay's
    publisher.batches("w0", 1, range(4, 5))                     # seq 3 lost: a gap
    router, feed = replicas()
    wait_until(lambda: live(feed) and feed.models[MODEL].stream_seq == 4, 30, "the feed to read the four")
    feed.models[MODEL].consumer_restarts = 2  # as `_run_model` counts them
    status = _status(router)
    row = status.models[0]
    assert (row.malformed_messages, row.consumer_restarts) == (1, 2)
    assert [(w.worker, w.gaps, w.resets) for w in status.workers] == [("w0", 1, 1)]
    metrics = {m.name: {tuple(s.labels.values()): s.value for s in m.samples}
               for m in KvMetricsCollector(router).collect()}
    assert metrics["sidecar_kv_sequence_gaps"][("w0",)] == 1
    assert metrics["sidecar_kv_worker_resets"][("w0",)] == 1
    assert metrics["sidecar_kv_decode_errors"][("w0",)] == 0
    assert metrics["sidecar_kv_nats_malformed_messages"][(MODEL,)] == 1
    assert metrics["sidecar_kv_nats_consumer_restarts"][(MODEL,)] == 2
