"""A replica's KV view fed from NATS JetStream (`sidecar serve --kv-nats`), with catch-up.

`NatsFeed(router, options)` runs one thread with its own asyncio loop (nothing here runs on the
server's loop). Per model of the router it:

1. loads the model's newest snapshot from the JetStream object store (`SIDECAR_KV_SNAPSHOTS`): the
   index state plus each worker's cursor, tagged with the stream sequence it covers; a snapshot that
   is missing, unreadable, of another index implementation, or of another stream incarnation is
   ignored and the stream is read from its first message;
2. reads the model's subjects (`<prefix>.<model>.*`) from the next stream sequence on through an
   ephemeral pull consumer, applying every message in stream order through the router
   (`KvRouter.feed_payloads` / `feed_reset`) with the per-worker rules of `router_adapter.fanout`.
   The payloads (the engine's bytes, as they came) go to the index undecoded: the native index
   decodes and applies each in one call with the GIL released, so a Score (on the server's
   threads) waits for one message's application at most. A pull's messages are applied in slices
   of at most `APPLY_SLICE`, with a turn of this loop between two slices;
3. is *catching up* until the consumer reports nothing pending, then *live*; a live replica with
   more than `BEHIND_PENDING` messages pending is catching up again. After a lost connection
   it reconnects and re-reads from the last applied stream sequence + 1 (catching up again); a
   stream that was deleted and made again meanwhile (or a nats-server restarted without its store)
   is a new incarnation: the model's view is dropped and the new stream read from its start;
4. every `snapshot_period_s`, when live, publishes a snapshot unless another replica published one
   less than a period ago (so N replicas write about one snapshot per period between them).

Score answers all along; `warming` (`state != live`) tells the caller the view may be behind.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
import math
import random
import re
import struct
import threading
import time
from dataclasses import dataclass, field


from router_adapter import fanout

_log = logging.getLogger("router_adapter.nats_feed")

LOADING = "loading_snapshot"
CATCHING_UP = "catching_up"
LIVE = "live"
RECONNECTING = "reconnecting"
STATES = (LOADING, CATCHING_UP, LIVE, RECONNECTING)

#: The snapshot object (docs/kv_fanout.md, "Snapshot format"): this header, `meta_len` bytes of
#: JSON (stream, stream_seq, created, index_kind, workers), then the index's own snapshot bytes
#: (the native index's `SCKVIDX1` binary, or the Python index's msgpack), restored in one call.
SNAPSHOT_MAGIC = b"SCKVSNAP"
SNAPSHOT_VERSION = 2
_SNAPSHOT_HEADER = struct.Struct("<8sII")  # magic, version, meta_len

#: Messages applied between two turns of the feed's loop (its NATS reads, pings, snapshot uploads).
#: The index's write lock is taken per message, so this does not bound a Score's wait; it bounds how
#: long the loop's other work waits for a pull's application.
APPLY_SLICE = 64

#: A snapshot read that receives no chunk for this long (seconds) is given up and started again: the
#: object was replaced meanwhile (a put purges the chunks of the object it replaces), or deleted.
SNAPSHOT_STALL_S = 10.0
#: Reads of a snapshot before the replica gives up on it and reads the stream from its start.
SNAPSHOT_READS = 3
#: The largest snapshot a replica reads, per entry its index may hold (`--kv-max-blocks`), plus a
#: fixed allowance for the cursors: a snapshot is about 20 bytes per entry, and an object claiming
#: more would be read into memory whole before anything checks it.
SNAPSHOT_BYTES_PER_BLOCK = 64
SNAPSHOT_FIXED_BYTES = 64 << 20
#: The id of a snapshot's chunks as NATS clients write it (a NUID: 22 base-62 characters; a little
#: wider here), a token of the chunks' subject.
_CHUNKS_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")

#: Waits before a model's consumer is made again after a failure: doubling from the first to the
#: last while failures repeat (a server refusing every attempt is not asked twice a second for ever).
RESTART_DELAYS_S = (0.5, 30.0)

#: Chunks of the snapshot bucket that no object names any more are purged once their last write is
#: this old (seconds): far past any upload, so a snapshot another replica is still writing is never
#: touched. Two replicas writing at once each purge only the chunks of the object they replaced,
#: which leaves the chunks of the one that lost the race behind (a whole snapshot each time).
ORPHAN_CHUNK_AGE_S = 300.0

#: A live replica with more of a model's messages than this pending after a pull is behind: it
#: reports `catching_up` (Score flagged `warming`) until nothing is pending again. A replica keeping
#: up has at most about a pull's worth pending (up to 256); the gap between this bound and none keeps
#: the state from flapping with every pull.
BEHIND_PENDING = 1000

_APPLY = 0
_RESET = 1


@dataclass(frozen=True)
class FeedOptions:
    nats_url: str
    prefix: str = fanout.DEFAULT_PREFIX
    stream: str = fanout.DEFAULT_STREAM
    snapshot_bucket: str = fanout.DEFAULT_SNAPSHOT_BUCKET
    retention_s: float = fanout.DEFAULT_RETENTION_S
    #: Seconds between snapshots; 0 = this replica never writes one (it still loads them).
    snapshot_period_s: float = fanout.DEFAULT_SNAPSHOT_PERIOD_S
    #: A live replica drops a worker with no message for this long (a relay that died); None = never.
    silence_timeout_s: float | None = 300.0
    fetch_batch: int = 256
    #: Bytes one pull may bring. Pulls ask for a count of messages, so a pull asks for at most this
    #: many of the server's largest message (`max_payload`, 1 MiB by default, often raised to 8 MiB
    #: or more): a pull's messages are all held at once, and 256 of 64 MiB would be 16 GiB. The
    #: client's buffer for the subscription is twice this.
    fetch_bytes: int = 256 << 20


@dataclass
class WorkerCursor:
    """Where one worker's messages stand on this replica (kept in snapshots)."""

    epoch: int | None = None
    last_seq: int | None = None
    #: JetStream time of the worker's last message (seconds since 1970).
    last_time: float = 0.0
    #: The relay's engine clock (`fanout.ENGINE_CLOCK`) of the worker's last message that had one.
    engine_clock: float | None = None
    #: Seconds from the last message's storing in JetStream to its application here.
    lag_s: float = 0.0
    batches: int = 0
    decode_errors: int = 0
    gaps: int = 0
    resets: int = 0
    restarts: int = 0
    aged_out: int = 0
    duplicates: int = 0


@dataclass
class ModelFeed:
    """One model's consumer state."""

    model: str
    state: str = LOADING
    #: The last stream sequence applied (or covered by the loaded snapshot).
    stream_seq: int = 0
    #: Messages of the model still in the stream after `stream_seq` (from the consumer).
    pending: int = 0
    #: When the newest snapshot this replica loaded, wrote or saw was taken (seconds since 1970).
    snapshot_time: float | None = None
    snapshots_written: int = 0
    snapshot_loaded: bool = False
    #: When the stream the view was read from was made (JetStream's `created`, seconds since 1970):
    #: a stream made again since is another incarnation, whose sequences mean other messages.
    stream_created: float | None = None
    #: Messages skipped because their headers could not be read (not a relay's).
    malformed: int = 0
    #: Consumers made again after a failure (a lost connection, messages dropped on the way).
    consumer_restarts: int = 0
    workers: dict[str, WorkerCursor] = field(default_factory=dict)
    #: The stream's first sequence when it had deleted messages this view never read (retention,
    #: limits, a purge): 0 when none were. Each worker's first message read since is checked by
    #: `_check_after_loss`; `checked_after_loss` holds the workers whose was.
    lost_before: int = 0
    checked_after_loss: set[str] = field(default_factory=set)


class NatsFeed:
    """Feeds `router`'s indexes from the stream (see the module docs); `start()` / `stop()`."""

    def __init__(self, router, options: FeedOptions) -> None:  # noqa: ANN001 - KvRouter (no import cycle)
        self.router = router
        self.options = options
        self.models: dict[str, ModelFeed] = {name: ModelFeed(name) for name in router.indexes}
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._nc = None
        self._js = None
        self._store = None
        #: Bumped on every reconnection: a consumer made before it is made again.
        self._connection = 0
        #: When the connection was last made (seconds since 1970): a live replica judges no worker
        #: silent for less than the timeout since, so the relays, reconnected too, have the time to
        #: publish what they held through an outage (the stream then shows whether the engine was
        #: silent, by the relay's clock).
        self._connected_at = time.time()

    # --- reading (any thread) ---------------------------------------------------------------------

    def state(self, model: str) -> str:
        feed = self.models.get(model)
        return feed.state if feed is not None else LIVE

    def warming(self, model: str) -> bool:
        return self.state(model) != LIVE

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        started = threading.Event()
        self._thread = threading.Thread(target=self._run_thread, args=(started,), name="kv-nats", daemon=True)
        self._thread.start()
        started.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout)

    def _run_thread(self, started: threading.Event) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._stop = asyncio.Event()
        started.set()
        try:
            loop.run_until_complete(self._main())
        except Exception:  # noqa: BLE001 - logged: the feed thread must not die silently
            _log.exception("kv_nats_feed_failed")
        finally:
            loop.close()

    async def _connect(self) -> bool:
        """A new client (and its JetStream context); False when stopped first."""
        async def disconnected() -> None:
            for feed in self.models.values():
                feed.state = RECONNECTING

        async def reconnected() -> None:
            self._connection += 1
            self._connected_at = time.time()

        nc = await fanout.connect_until_stopped(
            self.options.nats_url, self._stop, "sidecar-kv-feed",
            disconnected_cb=disconnected, reconnected_cb=reconnected,
        )
        if nc is None:
            return False
        self._nc, self._js, self._store = nc, nc.jetstream(), None
        self._connected_at = time.time()
        return True

    async def _replace_closed_client(self) -> None:
        """nats-py closes its client for good on any error the server sends (a permissions or
        payload violation): every model's consumer then failed for ever. A new client, made once
        for all the models' tasks; their consumers are made again on it."""
        async with self._replacing:
            if not self._nc.is_closed or self._stop.is_set():
                return  # another model's task made it, or the feed stops
            _log.warning("kv_nats_feed_reconnecting: the NATS client closed (%r)", self._nc.last_error)
            if await self._connect():
                self._connection += 1

    async def _main(self) -> None:
        self._replacing = asyncio.Lock()
        if not await self._connect():
            return
        tasks = [asyncio.create_task(self._run_model(feed)) for feed in self.models.values()]
        tasks.append(asyncio.create_task(self._housekeeping()))
        try:
            await self._stop.wait()
        finally:
            await fanout.cancel_until_done(*tasks)
            await self._nc.close()

    async def _setup(self) -> None:
        """The stream and the snapshot bucket, created when missing."""
        from nats.js.errors import BucketNotFoundError, NotFoundError

        await fanout.ensure_stream(self._js, self.options.stream, self.options.prefix, self.options.retention_s)
        if self._store is None:
            try:
                self._store = await self._js.object_store(self.options.snapshot_bucket)
            except (BucketNotFoundError, NotFoundError):
                try:
                    self._store = await self._js.create_object_store(self.options.snapshot_bucket)
                except Exception:  # noqa: BLE001 - created meanwhile by another replica
                    self._store = await self._js.object_store(self.options.snapshot_bucket)

    # --- one model ------------------------------------------------------------------------------

    async def _run_model(self, feed: ModelFeed) -> None:
        delay = RESTART_DELAYS_S[0]
        while True:
            read_up_to = feed.stream_seq
            try:
                await self._setup()
                if not feed.snapshot_loaded and feed.stream_seq == 0:
                    feed.state = LOADING
                    await self._load_snapshot(feed)
                    feed.snapshot_loaded = True
                await self._check_incarnation(feed)
                feed.state = CATCHING_UP
                await self._consume(feed)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - connection or consumer lost: read on from where we are
                if feed.state == LIVE or feed.stream_seq > read_up_to:
                    delay = RESTART_DELAYS_S[0]  # it had been working: a new failure, not the same one again
                feed.state = RECONNECTING
                feed.consumer_restarts += 1
                _log.warning("kv_nats_consumer_restart model=%s stream_seq=%d retry_in_s=%.1f error=%r",
                             feed.model, feed.stream_seq, delay, e)
                if self._nc.is_closed:
                    await self._replace_closed_client()
                await asyncio.sleep(delay)
                delay = min(delay * 2, RESTART_DELAYS_S[1])

    async def _consume(self, feed: ModelFeed) -> None:
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        start = feed.stream_seq + 1
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start, ack_policy=AckPolicy.NONE,
            inactive_threshold=60.0, mem_storage=True,
        )
        connection = self._connection
        max_payload = getattr(self._nc, "max_payload", 0) or 1 << 20  # the server's INFO, or its default
        most = max(1, self.options.fetch_bytes // max_payload)
        sub = await self._js.pull_subscribe(
            fanout.model_filter(self.options.prefix, feed.model), stream=self.options.stream, config=config,
            pending_bytes_limit=2 * max(self.options.fetch_bytes, max_payload),
        )
        # The consumer numbers what it delivers 1, 2, ...; a number skipped is a message the client
        # dropped (its pending limits: a slow consumer) and, with no acks, never redelivered.
        delivered = 0
        idle_since = time.monotonic()
        # How many messages to ask for: what the server said is still pending (at most `fetch_batch`,
        # and `most`: see `fetch_bytes`), else one. A pull request for more than the stream has waits at the server until it has them
        # all or the request expires, which would hold every message of a live replica for up to the
        # fetch timeout; a request for one returns as soon as the next message is stored.
        batch = 1
        try:
            # What this consumer has to deliver: the count the last message of an earlier consumer
            # left says nothing of what arrived while it was away (and a first pull that times out
            # would then call the replica live with a backlog still to read). Inside the `try`: a
            # failing call must not leave the subscription behind.
            feed.pending = (await sub.consumer_info()).num_pending
            while connection == self._connection:
                try:
                    msgs = await sub.fetch(batch, timeout=1.0)
                except (NatsTimeout, asyncio.TimeoutError):
                    batch = 1
                    if feed.pending == 0 and feed.state == CATCHING_UP:
                        feed.state = LIVE
                    if time.monotonic() - idle_since > 5.0:
                        await self._check_consumer(sub, feed)
                        idle_since = time.monotonic()
                    continue
                idle_since = time.monotonic()
                for start in range(0, len(msgs), APPLY_SLICE):
                    ops: list[tuple] = []
                    for msg in msgs[start:start + APPLY_SLICE]:
                        delivered += 1
                        if msg.metadata.sequence.consumer != delivered:
                            # What came before it is applied; a new consumer reads on from there.
                            self._apply_ops(feed.model, ops)
                            raise ConsumerGap(f"consumer delivered message {msg.metadata.sequence.consumer}, "
                                              f"expected {delivered}: messages were dropped on the way")
                        if feed.lost_before and msg.metadata.sequence.stream > feed.stream_seq:
                            self._check_after_loss(feed, msg, ops)
                        self._plan(feed, msg, ops)
                    # Planned and applied with no await in between: a snapshot (another task of this
                    # loop) always sees the index exactly as of `feed.stream_seq`.
                    self._apply_ops(feed.model, ops)
                    await asyncio.sleep(0)
                batch = max(1, min(self.options.fetch_batch, most, feed.pending))
                if feed.pending == 0 and feed.state == CATCHING_UP:
                    feed.state = LIVE
                    _log.info("kv_nats_live model=%s stream_seq=%d", feed.model, feed.stream_seq)
                elif feed.pending > BEHIND_PENDING and feed.state == LIVE:
                    # Live means nothing pending: a burst (a relay flushing what it buffered through
                    # an outage) or a replica starved of CPU can leave it far behind the stream.
                    feed.state = CATCHING_UP
                    _log.warning("kv_nats_behind model=%s stream_seq=%d pending=%d: catching up (Score warming) "
                                 "until nothing is pending", feed.model, feed.stream_seq, feed.pending)
        finally:
            try:
                await sub.unsubscribe()
            except Exception:  # noqa: BLE001 - the connection may be gone
                pass

    async def _stream_info(self) -> tuple:  # (nats StreamInfo, float | None)
        """The stream's info, and its incarnation: JetStream's `created` in seconds since 1970
        (None from a server that does not report it)."""
        info = await self._js.stream_info(self.options.stream)
        return info, info.created.timestamp() if info.created is not None else None

    async def _check_incarnation(self, feed: ModelFeed) -> None:
        """Drops `feed`'s view when the stream is not the one it was read from (deleted and made
        again, or a nats-server restarted without its store): the new stream's sequences name other
        messages, and reading on from the old position would skip the new stream's first ones."""
        info, created = await self._stream_info()
        replaced = feed.stream_created is not None and created is not None and created != feed.stream_created
        if replaced or info.state.last_seq < feed.stream_seq:
            _log.warning("kv_nats_stream_replaced model=%s stream_seq=%d last_seq=%d: dropping the view and "
                         "reading the new stream from its start", feed.model, feed.stream_seq, info.state.last_seq)
            # Every worker the index holds: a snapshot's index may hold workers its meta has no
            # cursor for.
            for worker in self.router.index(feed.model).workers:
                self.router.feed_reset(feed.model, worker, "stream_replaced")
            feed.workers = {}
            feed.stream_seq = 0
            feed.lost_before = 0  # what the old stream lost went with the view
        feed.stream_created = created
        if info.state.first_seq > feed.stream_seq + 1:
            # The consumer starts at the first message left: those in between, which this view has
            # not applied, are gone, and their workers may miss blocks the engines still hold.
            _log.warning("kv_nats_messages_gone model=%s stream_seq=%d first_seq=%d: the stream no longer holds "
                         "the messages in between (retention); each worker whose first message read is not the "
                         "start of its epoch is counted as a gap", feed.model, feed.stream_seq, info.state.first_seq)
            feed.lost_before = info.state.first_seq
            feed.checked_after_loss = set()

    @staticmethod
    async def _check_consumer(sub, feed: ModelFeed) -> None:  # noqa: ANN001 - nats PullSubscription
        """Raises when the consumer is gone (a server restarted without it); a slow answer is not that.
        Refreshes `feed.pending`: messages counted but removed before delivery (aged out, purged)
        would otherwise keep the replica catching up for ever."""
        try:
            feed.pending = (await sub.consumer_info()).num_pending
        except (asyncio.TimeoutError, TimeoutError):
            pass

    def _check_after_loss(self, feed: ModelFeed, msg, ops: list[tuple]) -> None:  # noqa: ANN001 - nats Msg
        """A worker's first message read after deleted messages (`ModelFeed.lost_before`): unless it
        starts an epoch (a relay's reset, which drops the worker whatever came before) or continues
        the worker's cursor (the next sequence number of its epoch), batches of the worker may have
        been among the deleted ones, and their blocks are missing from this view for good while
        replicas that read them hold them. Counted as a gap (and its reset) as `_plan` counts a
        jump in the sequence, so `KvStatus` and the metrics show it. A relay that started with no
        history publishes its epoch's first batch with nothing before it, which cannot be told from
        a later one: that worker is counted too."""
        worker = fanout.token_name(msg.subject.rsplit(".", 1)[-1])
        if worker in feed.checked_after_loss:
            return
        headers = msg.headers or {}
        cursor = feed.workers.get(worker)
        try:
            kind, epoch = headers.get(fanout.KIND), int(headers[fanout.EPOCH])
            if kind == fanout.RESET:
                if_last = headers.get(fanout.IF_LAST)
                # A replica's `silent` reset applies only after the batch it names (`_plan`): when
                # this view cannot tell, the worker's next message decides.
                if if_last is None or (cursor is not None and (cursor.epoch, cursor.last_seq) == (epoch, int(if_last))):
                    feed.checked_after_loss.add(worker)
                return
            seq = int(headers[fanout.SEQ])
        except (ValueError, KeyError):
            return  # not a relay's message: `_plan` counts it, the worker's next message decides
        if kind != fanout.BATCH:
            return
        if cursor is not None and cursor.epoch == epoch and cursor.last_seq is not None:
            if seq <= cursor.last_seq:
                return  # a duplicate `_plan` skips: the next message decides
            feed.checked_after_loss.add(worker)
            return  # the next batch of the cursor's epoch, or a jump `_plan` counts as a gap
        feed.checked_after_loss.add(worker)
        cursor = feed.workers.setdefault(worker, WorkerCursor())
        cursor.gaps += 1
        ops.append(self._reset_op(worker, cursor, "gap"))
        # The batch's epoch adopted: `_plan` applies it after this reset, not after another one.
        cursor.epoch = epoch
        _log.warning("kv_nats_gap_after_messages_gone model=%s worker=%s stream_seq=%d first_seq=%d epoch=%d seq=%d",
                     feed.model, worker, msg.metadata.sequence.stream, feed.lost_before, epoch, seq)

    def _plan(self, feed: ModelFeed, msg, ops: list[tuple]) -> None:  # noqa: ANN001 - nats Msg
        """The per-worker rules for one message (headers and sequence numbers only): appends what
        to do with the index to `ops`, in order, for `_apply_ops`."""
        meta = msg.metadata
        stream_seq = meta.sequence.stream
        if stream_seq <= feed.stream_seq:
            return  # delivered again by a consumer made after a reconnection
        feed.stream_seq = stream_seq
        feed.pending = meta.num_pending
        worker = fanout.token_name(msg.subject.rsplit(".", 1)[-1])
        headers = msg.headers or {}
        kind = headers.get(fanout.KIND)
        is_reset = kind == fanout.RESET
        try:
            # A relay's message names its kind and epoch, and a batch its sequence: anything else
            # (`nats pub` on our subjects, a header lost) would read as epoch 0, seq 0 and reset
            # the worker on every replica.
            if kind not in (fanout.BATCH, fanout.RESET):
                raise ValueError(f"{fanout.KIND}: {kind!r}")
            epoch = int(headers[fanout.EPOCH])
            seq = 0 if is_reset else int(headers[fanout.SEQ])
            if_last = int(headers[fanout.IF_LAST]) if fanout.IF_LAST in headers else None
        except (ValueError, KeyError):
            # Not a relay's message (a stray publish on our subjects): skipped. Raised on, it would
            # lose the slice planned before it; a relay batch lost this way shows as a gap.
            feed.malformed += 1
            _log.warning("kv_nats_malformed_message model=%s stream_seq=%d subject=%s headers=%r",
                         feed.model, stream_seq, msg.subject, dict(headers))
            return
        cursor = feed.workers.setdefault(worker, WorkerCursor())
        previous_time, cursor.last_time = cursor.last_time, meta.timestamp.timestamp()
        previous_clock, clock = cursor.engine_clock, fanout.engine_clock(headers)
        if clock is not None:
            cursor.engine_clock = clock
        silence = self.options.silence_timeout_s
        if silence and not is_reset and cursor.last_seq is not None:
            # The silence `_age_out` acts on when live, judged from the messages here so a replica
            # catching up (which does not age out) ends with the view of one that was live. By the
            # relay's engine clock: the stream's times would take a NATS outage, through which the
            # relay held the engine's batches, for silence. An older relay's message has no clock.
            # (A reset drops the worker anyway: checked too, a relay's `silent` one counted twice.)
            if clock is not None and previous_clock is not None:
                quiet = clock - previous_clock
            else:
                quiet = cursor.last_time - previous_time
            if quiet > silence:
                cursor.aged_out += 1
                ops.append(self._reset_op(worker, cursor, "silent"))
        if is_reset:
            if if_last is not None and (cursor.epoch != epoch or cursor.last_seq != if_last):
                return  # a replica's silent reset that a later batch (or reset) made moot
            reason = headers.get(fanout.REASON, "")
            cursor.restarts += reason == "restart"
            cursor.gaps += reason == "gap"
            cursor.aged_out += reason == "silent"
            ops.append(self._reset_op(worker, cursor, f"relay_{reason}"))
            cursor.epoch = epoch
            return
        if cursor.epoch is not None and epoch != cursor.epoch:
            ops.append(self._reset_op(worker, cursor, "new_epoch"))
        elif cursor.last_seq is not None:
            if seq <= cursor.last_seq:
                cursor.duplicates += 1
                return
            if seq > cursor.last_seq + 1:
                cursor.gaps += 1
                ops.append(self._reset_op(worker, cursor, "gap"))
        cursor.epoch = epoch
        cursor.last_seq = seq
        ops.append((_APPLY, worker, cursor, msg.data, stream_seq))

    @staticmethod
    def _reset_op(worker: str, cursor: WorkerCursor, reason: str) -> tuple:
        cursor.resets += 1
        cursor.last_seq = None
        return (_RESET, worker, reason)

    def _apply_ops(self, model: str, ops: list[tuple]) -> None:
        """The slice's payloads and resets, in order; each run of payloads between resets in one
        call (`KvRouter.feed_payloads`: a small message costs mostly its call into the index)."""
        router = self.router
        start = 0
        while start < len(ops):
            if ops[start][0] == _RESET:
                _, worker, reason = ops[start]
                try:
                    router.feed_reset(model, worker, reason)
                except Exception:  # noqa: BLE001 - logged with its traceback; the stream reads on
                    # Raised on, it would restart the consumer past the rest of the slice (planned,
                    # so `stream_seq` is already beyond it): those messages would be lost for good.
                    _log.exception("kv_nats_reset_failed model=%s worker=%s reason=%s", model, worker, reason)
                start += 1
                continue
            end = start
            while end < len(ops) and ops[end][0] != _RESET:
                end += 1
            self._apply_run(model, ops[start:end])
            start = end

    def _apply_run(self, model: str, run: list[tuple]) -> None:
        """A run of payloads in one call. Any error but a refused payload (a bug, memory) leaves the
        run maybe half applied: its workers are reset (as after a gap the relay could not fill)
        and its payloads applied again one at a time, a failing one resetting its worker; raised
        on, the error would restart the consumer past the rest of the slice."""
        try:
            refused = dict(self.router.feed_payloads(model, [(op[1], op[3]) for op in run]))
        except Exception:  # noqa: BLE001 - logged with its traceback; the stream reads on
            _log.exception("kv_nats_apply_failed model=%s stream_seq=%d..%d", model, run[0][4], run[-1][4])
            for worker, cursor in {op[1]: op[2] for op in run}.items():
                cursor.resets += 1
                self.router.feed_reset(model, worker, "apply_error")
            if len(run) > 1:
                for op in run:
                    self._apply_run(model, [op])
            return
        now = time.time()
        for i, (_, worker, cursor, _payload, stream_seq) in enumerate(run):
            error = refused.get(i)
            if error is not None:
                cursor.decode_errors += 1
                _log.warning("kv_nats_decode_error worker=%s stream_seq=%d error=%s", worker, stream_seq, error)
                continue
            cursor.batches += 1
            cursor.lag_s = max(0.0, now - cursor.last_time)

    # --- snapshots and age-out --------------------------------------------------------------------

    async def _load_snapshot(self, feed: ModelFeed) -> None:
        from nats.js.errors import BadObjectMetaError, NotFoundError

        name = fanout.subject_token(feed.model)
        started = time.monotonic()
        index = self.router.index(feed.model)
        try:
            data = await self._fetch_snapshot(feed, name)
            meta, index_bytes = parse_snapshot(data)
            cursors = _cursors(meta)
            problem = self._snapshot_problem(meta, index)
            if problem is None:
                created = await self._check_stream_covers(meta)
        except NotFoundError:  # the object (ObjectNotFoundError) or the bucket
            _log.info("kv_nats_no_snapshot model=%s: reading the stream from its start", feed.model)
            return
        except (TypeError, KeyError, AttributeError, BadObjectMetaError) as e:
            problem = f"unreadable ({e!r})"
        except ValueError as e:
            problem = str(e)
        fetched = time.monotonic()
        if problem is None:
            try:
                # One call into the index (the native one restores with the GIL released); either
                # index leaves its state as it was when it refuses.
                index.restore(index_bytes)
            except Exception as e:  # noqa: BLE001 - InvalidArgument / ValueError of either index
                problem = f"refused by the index ({e})"
        if problem is not None:
            _log.warning("kv_nats_snapshot_ignored model=%s reason=%s: reading the stream from its start",
                         feed.model, problem)
            return
        feed.workers = cursors
        feed.stream_seq = meta["stream_seq"]
        feed.stream_created = created
        feed.snapshot_time = meta["created"]
        _log.info("kv_nats_snapshot_loaded model=%s stream_seq=%d workers=%d bytes=%d age_s=%.1f fetch_s=%.2f "
                  "restore_s=%.2f", feed.model, feed.stream_seq, len(feed.workers), len(data),
                  time.time() - meta["created"], fetched - started, time.monotonic() - fetched)

    async def _fetch_snapshot(self, feed: ModelFeed, name: str) -> bytearray:
        """The snapshot object's bytes, read again when a read stalls; ValueError when every read did."""
        limit = SNAPSHOT_FIXED_BYTES + SNAPSHOT_BYTES_PER_BLOCK * self.router.index(feed.model).max_blocks
        for _ in range(SNAPSHOT_READS):
            data = await self._read_object(name, limit)
            if data is not None:
                return data
            _log.warning("kv_nats_snapshot_read_stalled model=%s: no chunk for %.0f s (replaced or deleted "
                         "meanwhile); reading it again", feed.model, SNAPSHOT_STALL_S)
        raise ValueError(f"unreadable ({SNAPSHOT_READS} reads stalled)")

    async def _read_object(self, name: str, limit: int) -> bytearray | None:
        """The snapshot object `name` of the bucket, its digest checked (ValueError when it does not
        match, or it claims more than `limit` bytes); None when no chunk came for `SNAPSHOT_STALL_S`. The client's own `get` waits for ever
        for chunks that a put of a newer snapshot purged while it read them; this reads the chunks
        (NATS object store layout: stream `OBJ_<bucket>`, subject `$O.<bucket>.C.<nuid>`) through a
        pull consumer of its own, which a stall lets go of."""
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        info = await self._store.get_info(name)
        # The meta is anyone's to write who can write the bucket: its chunks' id goes into a
        # subject and its count into pulls, which a server or the client refuses in ways the
        # caller would take for a broken connection (and so read the same object for ever).
        if not (isinstance(info.nuid, str) and _CHUNKS_ID.fullmatch(info.nuid)):
            raise ValueError(f"unreadable (chunks' id {info.nuid!r} is not a NUID)")
        digest_field = info.digest if isinstance(info.digest, str) else ""
        if not digest_field.startswith("SHA-256="):
            raise ValueError(f"unreadable (digest {info.digest!r} is not SHA-256=<base64url>)")
        size = info.size if isinstance(info.size, int) else -1
        if not 0 <= size <= limit:
            raise ValueError(f"unreadable (its size {info.size!r} is not within the {limit} bytes an index of "
                             f"this replica's --kv-max-blocks can take)")
        chunks = info.chunks if info.chunks is not None else 0
        if not (isinstance(chunks, int) and not isinstance(chunks, bool) and 0 <= chunks <= max(1, size)):
            raise ValueError(f"unreadable (its chunk count {info.chunks!r} for {size} bytes)")
        data = bytearray()
        digest = hashlib.sha256()
        remaining = chunks
        bucket = self.options.snapshot_bucket
        sub = await self._js.pull_subscribe(
            f"$O.{bucket}.C.{info.nuid}", stream=f"OBJ_{bucket}",
            config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE,
                                  inactive_threshold=60.0, mem_storage=True),
        )
        try:
            while remaining > 0:
                try:
                    # No more than are left: a pull for more waits at the server for the rest.
                    msgs = await sub.fetch(min(remaining, 64), timeout=SNAPSHOT_STALL_S)
                except (NatsTimeout, asyncio.TimeoutError):
                    return None
                for msg in msgs:
                    data += msg.data
                    digest.update(msg.data)
                if len(data) > size:
                    raise ValueError(f"unreadable (chunks of more than its size, {size} bytes)")
                remaining -= len(msgs)
        finally:
            try:
                await sub.unsubscribe()
            except Exception:  # noqa: BLE001 - the connection may be gone
                pass
        try:
            expected = base64.urlsafe_b64decode(digest_field.split("=", 1)[1])
        except (ValueError, TypeError):  # binascii.Error is a ValueError
            expected = b""
        if len(data) != size or digest.digest() != expected:
            raise ValueError(f"unreadable ({len(data)} bytes whose digest is not the object's)")
        return data

    def _snapshot_problem(self, meta: dict, index) -> str | None:  # noqa: ANN001
        if meta["stream"] != self.options.stream:
            return f"of stream {meta['stream']!r}"
        if meta["index_kind"] != type(index).__name__:
            return f"taken by a {meta['index_kind']} (this replica runs a {type(index).__name__})"
        return None

    async def _check_stream_covers(self, snap: dict) -> float | None:
        """The stream's `created` (see `ModelFeed.stream_created`); ValueError when the snapshot was
        taken of another incarnation of the stream."""
        info, created = await self._stream_info()
        taken_of = snap.get("stream_created")
        if taken_of is not None and created is not None and taken_of != created:
            raise ValueError("taken of another incarnation of the stream (deleted and made again since)")
        if snap["stream_seq"] > info.state.last_seq:
            raise ValueError(f"covers stream sequence {snap['stream_seq']} beyond the stream's last "
                             f"{info.state.last_seq} (the stream was recreated)")
        if info.state.first_seq > snap["stream_seq"] + 1:
            _log.warning("kv_nats_snapshot_older_than_retention stream_seq=%d first_seq=%d: messages in between "
                         "are gone; workers they touched are inexact until their next reset",
                         snap["stream_seq"], info.state.first_seq)
        return created

    def _next_snapshot_time(self) -> float:
        """A period from now, give or take a tenth: replicas whose timers fell in step would
        otherwise check for a fresh snapshot within one upload of each other every period, and both
        write one."""
        return time.monotonic() + self.options.snapshot_period_s * random.uniform(0.9, 1.1)

    async def _housekeeping(self) -> None:
        next_snapshot = self._next_snapshot_time()
        while True:
            await asyncio.sleep(1.0)
            await self._age_out()
            if self.options.snapshot_period_s > 0 and time.monotonic() >= next_snapshot:
                next_snapshot = self._next_snapshot_time()
                for feed in self.models.values():
                    try:
                        await self.publish_snapshot(feed)
                    except Exception as e:  # noqa: BLE001 - retried next period
                        _log.warning("kv_nats_snapshot_failed model=%s error=%r", feed.model, e)

    async def _age_out(self) -> None:
        """A live replica's clock sees a worker silent: it publishes a `silent` reset into the
        stream rather than dropping the worker itself, so every replica drops it at the same point
        of the stream (a replica catching up later included), and drops nothing if a batch of the
        worker was stored first (the reset names the batch it follows). All replicas publish it
        under one message id, so the stream holds one."""
        silence = self.options.silence_timeout_s
        now = time.time()
        # Nothing came while the connection was lost: the silence is counted from its return.
        since = self._connected_at
        for feed in self.models.values():
            self._forget_empty_cursors(feed, now)
            if not silence or feed.state != LIVE or feed.pending:
                continue  # a backlog is not silence (the relays' clocks judge it, in `_plan`)
            for worker, cursor in list(feed.workers.items()):
                if (cursor.last_seq is not None and cursor.epoch is not None
                        and now - max(cursor.last_time, since) > silence):
                    headers = fanout.silent_reset_headers(worker, cursor.epoch, cursor.last_seq)
                    try:
                        await self._js.publish(fanout.subject(self.options.prefix, feed.model, worker), b"",
                                               stream=self.options.stream, headers=headers)
                    except Exception as e:  # noqa: BLE001 - published again at the next tick
                        _log.warning("kv_nats_silent_reset_failed model=%s worker=%s error=%r", feed.model, worker, e)

    def _forget_empty_cursors(self, feed: ModelFeed, now: float) -> None:
        """Forgets the cursors of workers that hold nothing (reset since their last batch) and have
        sent nothing for a silence timeout (with none, the retention, or an hour when that is
        unlimited): a worker's next batch is
        applied as a new worker's, which is what a reset left. Kept, every pod name ever seen
        would stay in memory, in snapshots, in `KvStatus` and in the metrics' label sets."""
        idle = self.options.silence_timeout_s or self.options.retention_s or fanout.DEFAULT_RETENTION_S
        gone = [w for w, c in feed.workers.items() if c.last_seq is None and now - c.last_time > idle]
        for worker in gone:
            del feed.workers[worker]

    async def publish_snapshot(self, feed: ModelFeed, force: bool = False) -> bool:
        """Writes `feed`'s snapshot unless it is not live or (without `force`) a fresh one exists."""
        from nats.errors import NoRespondersError
        from nats.js.api import ObjectMeta
        from nats.js.errors import BadObjectMetaError, NoStreamResponseError, NotFoundError, ObjectNotFoundError

        if feed.state != LIVE or self._store is None:
            return False
        name = fanout.subject_token(feed.model)
        if not force:
            try:
                created = _written_at(await self._store.get_info(name))
            except (ObjectNotFoundError, NotFoundError, BadObjectMetaError):
                created = None
            # One whose time cannot be read (any client of the bucket may write its meta) or lies
            # in the future is overwritten: kept, it would stop every replica writing one. (A
            # period's worth of clock skew between replicas is not the future.)
            if created is not None and created <= time.time() + self.options.snapshot_period_s:
                feed.snapshot_time = max(feed.snapshot_time or 0.0, created)
                if time.time() - created < self.options.snapshot_period_s * 0.9:
                    return False
        index = self.router.index(feed.model)
        # Taken between two messages (this loop applies them), so the state is exactly `stream_seq`'s.
        meta = {
            "stream": self.options.stream, "stream_seq": feed.stream_seq, "stream_created": feed.stream_created,
            "created": time.time(),
            "index_kind": type(index).__name__,
            "workers": {w: (c.epoch, c.last_seq, c.last_time) for w, c in feed.workers.items()},
            # Apart from "workers", whose lists a replica before them reads as three items exactly.
            "engine_clocks": {w: c.engine_clock for w, c in feed.workers.items() if c.engine_clock is not None},
        }
        data = build_snapshot(meta, index.snapshot())
        description = json.dumps({"stream_seq": meta["stream_seq"], "created": meta["created"]})
        try:
            await self._store.put(name, data, meta=ObjectMeta(name=name, description=description))
        except (NotFoundError, NoRespondersError, NoStreamResponseError):
            # The bucket was deleted (its stream answers no publish): made again, new replicas need it.
            self._store = None
            await self._setup()
            await self._store.put(name, data, meta=ObjectMeta(name=name, description=description))
        feed.snapshot_time = meta["created"]
        feed.snapshots_written += 1
        _log.info("kv_nats_snapshot_written model=%s stream_seq=%d bytes=%d", feed.model, meta["stream_seq"], len(data))
        try:
            await self.sweep_orphan_chunks()
        except Exception as e:  # noqa: BLE001 - swept after the next snapshot
            _log.warning("kv_nats_snapshot_sweep_failed error=%r", e)
        return True

    async def sweep_orphan_chunks(self, min_age_s: float = ORPHAN_CHUNK_AGE_S) -> int:
        """Purges the snapshot bucket's chunks that no object names, last written at least
        `min_age_s` ago (see `ORPHAN_CHUNK_AGE_S`); returns how many objects' chunks went. The
        layout is NATS's object store's: stream `OBJ_<bucket>`, chunks on `$O.<bucket>.C.<nuid>`."""
        bucket = self.options.snapshot_bucket
        stream = f"OBJ_{bucket}"
        named = {f"$O.{bucket}.C.{info.nuid}" for info in await self._store.list()}
        state = (await self._js.stream_info(stream, subjects_filter=f"$O.{bucket}.C.>")).state
        purged = 0
        for subject in state.subjects or {}:
            if subject in named:
                continue
            last = await self._js.get_last_msg(stream, subject)
            if last.time is not None and time.time() - last.time.timestamp() < min_age_s:
                continue  # maybe a snapshot still being written
            await self._js.purge_stream(stream, subject=subject)
            purged += 1
            _log.warning("kv_nats_snapshot_orphan_purged subject=%s", subject)
        return purged

    def snapshot_now(self, model: str, timeout: float = 30.0) -> bool:
        """Writes `model`'s snapshot now (tests, operators); True when written."""
        future = asyncio.run_coroutine_threadsafe(self.publish_snapshot(self.models[model], force=True), self._loop)
        return future.result(timeout)


def _cursors(meta: dict) -> dict[str, WorkerCursor]:
    """The workers' cursors of a snapshot's meta, and its other fields checked (TypeError, KeyError
    or ValueError naming what is wrong), before the index is touched."""
    if not _u64(meta["stream_seq"]):
        raise ValueError(f"unreadable (stream_seq {meta['stream_seq']!r})")
    if not _finite(meta["created"]):
        raise ValueError(f"unreadable (created {meta['created']!r})")
    if not isinstance(meta["workers"], dict):
        raise ValueError("unreadable (workers is not an object)")
    clocks = meta.get("engine_clocks", {})  # absent from an earlier replica's snapshot
    if not (isinstance(clocks, dict) and all(_finite(c) for c in clocks.values())):
        raise ValueError("unreadable (engine_clocks)")
    cursors = {}
    for worker, (epoch, seq, last_time) in meta["workers"].items():
        if not ((epoch is None or _u64(epoch)) and (seq is None or _u64(seq)) and _finite(last_time)):
            raise ValueError(f"unreadable (the cursor of worker {worker!r})")
        cursors[worker] = WorkerCursor(epoch, seq, last_time, clocks.get(worker))
    return cursors


def _finite(value: object) -> bool:
    """A number JSON gave that is a time: not NaN or Infinity (which `json.loads` reads), nor an
    integer past a float's range (which `json.loads` keeps exact, and `math.isfinite` refuses
    with OverflowError)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _u64(value: object) -> bool:
    """A JSON number that is a stream or engine sequence: an integer in [0, 2^64)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 64


class ConsumerGap(Exception):
    """Messages a consumer delivered did not all reach the feed: read again from the last applied."""


def _written_at(info) -> float | None:  # noqa: ANN001 - nats ObjectInfo
    """When the snapshot object `info` describes was written (its description's `created`), or None
    when the description does not say it as a number."""
    try:
        created = json.loads(info.description or "{}").get("created")
    except (ValueError, TypeError, AttributeError):  # not JSON, or JSON but not an object
        return None
    return float(created) if _finite(created) else None


def build_snapshot(meta: dict, index_bytes: bytes) -> bytes:
    """The snapshot object: header, JSON `meta`, then the index's snapshot (see `SNAPSHOT_MAGIC`)."""
    meta_bytes = json.dumps(meta, separators=(",", ":")).encode()
    return b"".join([_SNAPSHOT_HEADER.pack(SNAPSHOT_MAGIC, SNAPSHOT_VERSION, len(meta_bytes)), meta_bytes, index_bytes])


def parse_snapshot(data: bytes | memoryview) -> tuple[dict, memoryview]:
    """(meta, the index's bytes, not copied); ValueError naming what is wrong."""
    if len(data) < _SNAPSHOT_HEADER.size:
        raise ValueError(f"unreadable (only {len(data)} bytes)")
    magic, version, meta_len = _SNAPSHOT_HEADER.unpack_from(data)
    if magic != SNAPSHOT_MAGIC:
        raise ValueError("unreadable (not a sidecar KV snapshot: an older format or another object)")
    if version != SNAPSHOT_VERSION:
        raise ValueError(f"format version {version} (this replica reads {SNAPSHOT_VERSION})")
    end = _SNAPSHOT_HEADER.size + meta_len
    if end > len(data):
        raise ValueError("unreadable (truncated)")
    try:
        meta = json.loads(bytes(data[_SNAPSHOT_HEADER.size:end]))
    except ValueError as e:
        raise ValueError(f"unreadable ({e})") from None
    if not isinstance(meta, dict):
        raise ValueError("unreadable (meta is not an object)")
    return meta, memoryview(data)[end:]  # bytes or a buffer of them, not copied
