"""`sidecar kv-relay`: one engine's ZMQ KV-event publisher forwarded to a NATS JetStream stream.

One small process per engine (per data-parallel rank), next to it. It subscribes with the router
adapter's `Subscriber` (the same sequence tracking, replay on gaps, restart detection and age-out as
a direct subscription) and publishes each batch, undecoded, on `<prefix>.<model>.<worker>` with the
headers of `router_adapter.fanout`. Whatever the subscriber would have reset (an engine restart, a
gap the replay socket could not fill, silence) becomes a `reset` message that every replica applies.

A restarted relay reads the last message of its subject to resume the epoch and the engine sequence
number (a reset carries the number of the last batch before it), so a batch it had already published
is deduplicated (same message id) and batches the engine published meanwhile are fetched from the
replay socket. The last batch's payload (a reset carries its digest) is asked of the replay socket
as well and compared: an engine that restarted while the relay was down, and has published as many
batches since, is then told from the same engine going on (a `restart` reset, not the new engine's
batches under the old epoch on top of the old engine's blocks).

Publishing waits for JetStream's acknowledgement and retries with the same message id until it is
stored: the ZMQ socket buffers meanwhile (up to its high-water mark; beyond that the loss is a gap
like any other). Every message carries the relay's engine clock (`fanout.ENGINE_CLOCK`), which
stands still while a publish waits: replicas judge a worker's silence by it, so batches that waited
out a NATS outage in the socket do not pass for an engine that went silent.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from dataclasses import dataclass

from router_adapter import fanout
from router_adapter.subscriber import DEFAULT_MAX_MESSAGE_BYTES, Source, Subscriber, payload_digest

_log = logging.getLogger("router_adapter.relay")

#: JetStream's error code for a message larger than the stream's `max_msg_size`.
STREAM_MESSAGE_TOO_LARGE = 10054
#: Seconds between two `kv_relay_publish_retry` lines of one message (the first failure is logged).
RETRY_LOG_INTERVAL_S = 60.0


@dataclass(frozen=True)
class RelayOptions:
    nats_url: str
    prefix: str = fanout.DEFAULT_PREFIX
    stream: str = fanout.DEFAULT_STREAM
    retention_s: float = fanout.DEFAULT_RETENTION_S
    silence_timeout_s: float | None = 300.0
    replay_timeout_s: float = 2.0
    #: Seconds one publish attempt waits for JetStream's acknowledgement.
    ack_timeout_s: float = 5.0
    #: The largest message taken from the engine (`--max-message-size`; see `Subscriber`).
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES


@dataclass
class RelayStats:
    published: int = 0
    duplicates: int = 0
    resets: int = 0
    retries: int = 0
    #: Batches larger than the server's max_payload (each followed by a gap reset).
    too_large: int = 0


class Relay:
    """`run()` until `stop()` (from another thread or a signal handler)."""

    def __init__(self, source: Source, options: RelayOptions) -> None:
        self.source = source
        self.options = options
        self.subject = fanout.subject(options.prefix, source.model, source.worker)
        self.stats = RelayStats()
        #: The engine sequence number of the last batch handled (published, or lost as too large).
        self._last_seq: int | None = None
        #: That batch's payload, or (resumed from a reset) its digest: a reset carries the digest.
        self._last_payload: bytes | None = None
        self._last_digest: str | None = None
        self.epoch: int | None = None
        #: The engine clock (`fanout.ENGINE_CLOCK`) of the last message published (None: none yet,
        #: the first one reads the wall clock), and when (monotonic) the relay was ready for the
        #: engine's next message after it: the clock moves on only from then.
        self._clock: float | None = None
        self._ready_at = time.monotonic()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = threading.Event()
        self._stopped: asyncio.Event | None = None
        self._nc = None
        self._js = None
        self.ready = threading.Event()

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        if self._stopping.is_set():  # stopped before it ran
            return
        if not await self._connect():
            return
        try:
            await fanout.ensure_stream(self._js, self.options.stream, self.options.prefix, self.options.retention_s)
            last_seq = await self._resume()
            digest = self._digest()
            subscriber = Subscriber(
                [self.source], None, self._on_reset, on_payload=self._on_payload,
                resume={self.source.worker: last_seq} if last_seq is not None else None,
                resume_digests={self.source.worker: digest} if last_seq is not None and digest else None,
                silence_timeout_s=self.options.silence_timeout_s, replay_timeout_s=self.options.replay_timeout_s,
                max_message_bytes=self.options.max_message_bytes,
            )
            subscriber.start()
            _log.info("kv_relay_started worker=%s endpoint=%s subject=%s epoch=%s resume_seq=%s",
                      self.source.worker, self.source.endpoint, self.subject, self.epoch, last_seq)
            self.ready.set()
            try:
                await self._stopped.wait()
            finally:
                # The subscriber thread may be waiting on a publish of this loop: let it see the stop.
                await asyncio.get_running_loop().run_in_executor(None, subscriber.stop)
        finally:
            await self._nc.close()

    async def _connect(self) -> bool:
        """A new connection (and its JetStream context); False when stopped first."""
        nc = await fanout.connect_until_stopped(
            self.options.nats_url, self._stopped, f"sidecar-kv-relay {self.source.worker}",
        )
        if nc is None:
            return False
        self._nc = nc
        self._js = nc.jetstream(timeout=self.options.ack_timeout_s)
        return True

    def stop(self) -> None:
        """Stops `run()` (thread-safe)."""
        self._stopping.set()
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)

    async def _resume(self) -> int | None:
        """Epoch and last engine sequence number from the subject's last message (None: start fresh)."""
        from nats.js.errors import NotFoundError

        try:
            last = await self._js.get_last_msg(self.options.stream, self.subject)
        except NotFoundError:
            self.epoch = fanout.next_epoch(None)
            return None
        headers = last.headers or {}
        clock = fanout.engine_clock(headers)
        if clock is not None and last.time is not None:
            # The clock goes on from the last message, counting the time since it was stored: a
            # relay that was down (and a live replica that saw nothing meanwhile) is silence, as
            # the replicas judge it; its offset from the wall clock is kept, not a jump. The time
            # is measured on the NATS server's clock, which stored the message: this host's can be
            # off (10 minutes ahead made an instant restart a silence that dropped the worker).
            now = await fanout.server_time(self._nc, self.options.stream, self.options.ack_timeout_s)
            self._clock = clock + max(0.0, (time.time() if now is None else now) - last.time.timestamp())
            self._ready_at = time.monotonic()
        try:
            self.epoch = int(headers.get(fanout.EPOCH, "0")) or fanout.next_epoch(None)
            # A batch's sequence number, or the one a reset carries (the last batch before it:
            # batches the engine published after it while the relay was down are then fetched
            # from its replay socket, not lost unnoticed).
            if fanout.SEQ in headers:
                self._last_seq = int(headers[fanout.SEQ])
                if headers.get(fanout.KIND) == fanout.BATCH:
                    self._last_payload = last.data or b""
                else:
                    # A relay's reset names it by digest; one without (a replica's `silent`
                    # reset, an older relay's) leaves the number alone to resume from.
                    self._last_digest = headers.get(fanout.DIGEST)
        except ValueError:
            # Not a relay's message (a stray publish on this subject): nothing to resume from. A
            # fresh epoch makes every replica reset the worker at the first batch.
            _log.warning("kv_relay_resume_unreadable subject=%s headers=%r: starting a new epoch",
                         self.subject, dict(headers))
            self.epoch, self._last_seq = fanout.next_epoch(None), None
            self._last_payload = self._last_digest = None
        return self._last_seq

    # --- called on the subscriber thread ------------------------------------------------------

    def _digest(self) -> str | None:
        """The digest of the last batch handled, when known."""
        if self._last_payload is not None:
            return payload_digest(self._last_payload)
        return self._last_digest

    def _on_payload(self, worker: str, seq: int, payload: bytes) -> None:
        published = self._publish_blocking(payload, fanout.batch_headers(worker, self.epoch, seq))
        self._last_seq, self._last_payload = seq, payload
        if not published:
            # Over the server's max_payload: replicas cannot have this batch, as after a lost one.
            self.stats.too_large += 1
            _log.error("kv_relay_batch_too_large worker=%s seq=%d bytes=%d: raise the NATS server's "
                       "max_payload; the worker is reset", worker, seq, len(payload))
            self._on_reset(worker, "gap")

    def _on_reset(self, worker: str, reason: str) -> None:
        self.epoch = fanout.next_epoch(self.epoch)
        self.stats.resets += 1
        self._publish_blocking(b"", fanout.reset_headers(worker, self.epoch, reason, self._last_seq, self._digest()))

    def _publish_blocking(self, payload: bytes, headers: dict[str, str]) -> bool:
        """False when the message is larger than the server accepts. Stamps the engine clock."""
        now = time.monotonic()
        clock = time.time() if self._clock is None else self._clock + (now - self._ready_at)
        headers[fanout.ENGINE_CLOCK] = f"{clock:.3f}"
        future = asyncio.run_coroutine_threadsafe(self._publish(payload, headers), self._loop)
        try:
            return future.result()
        except Exception:  # noqa: BLE001 - only when stopping: the batch is published by the next run
            if not self._stopping.is_set():
                raise
            return True
        finally:
            # The time this publish waited (a NATS outage: the engine's batches queue in the
            # socket) is not the engine's silence: the clock resumes only once the relay is ready
            # for the next message.
            self._clock, self._ready_at = clock, time.monotonic()

    def _header_bytes(self, headers: dict[str, str]) -> int:
        """The size of the header block NATS sends with a JetStream publish of `headers`: a
        `NATS/1.0` line, a `key: value` line per header (ours and the client's
        `Nats-Expected-Stream`), an empty line; plus a margin for any header a client adds."""
        lines = {**headers, "Nats-Expected-Stream": self.options.stream}
        return len("NATS/1.0\r\n\r\n") + sum(len(k) + len(v) + 4 for k, v in lines.items()) + 64

    async def _ensure_stream_quietly(self) -> None:
        """`fanout.ensure_stream`, a failure left to the next retry."""
        try:
            await fanout.ensure_stream(self._js, self.options.stream, self.options.prefix, self.options.retention_s)
        except Exception as e:  # noqa: BLE001 - NATS unreachable meanwhile: the publish retries
            _log.warning("kv_relay_stream_not_made stream=%s error=%r", self.options.stream, e)

    async def _publish(self, payload: bytes, headers: dict[str, str]) -> bool:
        from nats.errors import MaxPayloadError
        from nats.js.errors import NoStreamResponseError

        size = len(payload) + self._header_bytes(headers)
        delay = 0.05
        attempts, logged_at = 0, -math.inf
        while True:
            # The server's max_payload, which counts headers with the payload, from the INFO of the
            # connection as it is now, at every attempt: a nats-server restarted with a smaller
            # limit (while a publish waited) refuses the message, closing the connection, for ever.
            # nats-py checks the payload alone: a message over with its headers was refused too.
            max_payload = self._nc.max_payload if self._nc is not None else None
            if max_payload is not None and size > max_payload:
                return False
            try:
                ack = await self._js.publish(self.subject, payload, stream=self.options.stream, headers=headers)
            except MaxPayloadError:
                return False
            except Exception as e:  # noqa: BLE001 - any other failure: retried with the same message id
                if getattr(e, "err_code", None) == STREAM_MESSAGE_TOO_LARGE:
                    # The stream's own max_msg_size (whoever made the stream set it) refuses the
                    # message every time: as one over max_payload, not retried for ever.
                    return False
                if self._stopping.is_set():
                    raise
                self.stats.retries += 1
                attempts += 1
                if time.monotonic() - logged_at >= RETRY_LOG_INTERVAL_S:
                    # Once a second through a NATS outage was a line a second: the first failure,
                    # then one a minute with the count (the connection's own lines say the rest).
                    logged_at = time.monotonic()
                    _log.warning("kv_relay_publish_retry subject=%s id=%s failed_attempts=%d error=%r", self.subject,
                                 headers[fanout.MSG_ID], attempts, e)
                if self._nc.is_closed and not self._stopping.is_set():
                    # The client closes for good on any error the server sends (a message over a
                    # max_payload lowered while it was in flight, a restart's race): a new one.
                    _log.warning("kv_relay_reconnecting worker=%s: the NATS client closed (%r)",
                                 self.source.worker, self._nc.last_error)
                    if not await self._connect():
                        raise  # stopped meanwhile
                if isinstance(e, NoStreamResponseError):
                    # The stream is gone (a nats-server restarted without its store, a deletion):
                    # made again with this relay's settings, where the relay waited for a replica.
                    await self._ensure_stream_quietly()
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            if ack.duplicate:
                self.stats.duplicates += 1
            else:
                self.stats.published += 1
            return True
