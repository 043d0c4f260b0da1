"""Subscribes to engines' ZMQ KV-event publishers and hands decoded batches to a sink.

One `Subscriber` runs one thread that polls a SUB socket per source (an engine's PUB endpoint, one
per data-parallel rank). Each message is `[topic, seq (8 bytes, big-endian), msgpack batch]`. The
8-byte sequence number is tracked per source:
- the next number: the batch is applied;
- a jump forward (messages were dropped): the missing batches are requested from the engine's
  ROUTER replay socket when one is configured (`[b"", start_seq]` from a DEALER; the engine answers
  `[b"", topic, seq, payload]` per buffered batch (vLLM, SGLang 0.5.23; older SGLang left out the
  topic, also read), then an end marker with seq -1); if there is none, or the engine no longer
  has them, the worker's state is dropped (`on_reset(worker, "gap")`);
- a number at or below the last one: the engine restarted (its counter starts at 0 again), so the
  worker's state is dropped (`on_reset(worker, "restart")`) before the batch is applied, after the new
  engine's earlier batches when that number is above 0 and the replay socket still has them;
- the first message after a lost connection: a restarted engine may have published past the last
  number before the socket connected again, which by number alone is a continuation or a gap
  filled from the new engine's buffer over the old engine's blocks. With a replay socket, the last
  batch handled is asked of it with the missed ones and checked by `payload_digest`, as for a
  resumed source (below): another batch there is a restart;
- silence for longer than `silence_timeout_s`: the worker is aged out (`on_reset(worker, "silent")`);
- a message larger than `max_message_bytes` (on the SUB socket, or a replay answer on the DEALER):
  libzmq drops the connection rather than take it, so the message is lost and shows as a gap, which
  the replay cannot fill either (a `gap` reset). libzmq would not connect that SUB socket again: at
  every lost connection the socket is made again, logged (`kv_events_disconnected`) and counted
  (`disconnects`);
- a sink that raises anything but a refused payload's `DecodeError` (a bug, memory): the error is
  logged and the worker reset (`on_reset(worker, "apply_error")`), since a batch may be half applied;
  the thread, and every other source's updates, go on. A run handed to `on_payloads` that fails is
  handed on again one batch at a time after the reset, as the NATS feed does. The sequence number
  is kept across such a reset, so the next batch is still checked for a gap or a restart.

The sink and the reset callback run on the subscriber thread. A relay (`router_adapter.relay`) passes
`on_payload` instead of `on_batch`: it gets each batch's sequence number and raw payload, undecoded,
and may `resume` a source from the last sequence it forwarded before it restarted (with that batch's
`payload_digest`, the first message is checked to come from the same engine: below). `KvRouter` over
the native index, which decodes payloads itself, passes `on_payloads`: the batches of one drain of a
source's socket in one call (the index's `apply_payloads`; each payload it refuses as malformed is
counted as a decode error). Decoding lives in `events`, state in the sink: this module knows
neither the index nor any engine type.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import zmq
from zmq.utils.monitor import parse_monitor_message

from router_adapter.events import Batch, DecodeError, decode_batch

_log = logging.getLogger("router_adapter.subscriber")

END_SEQ = -1
#: The longest run of missed batches a subscriber asks an engine's replay socket for: engines keep
#: the last 10,000 batches by default (vLLM's `buffer_steps`); past this it is a gap.
MAX_REPLAY_SPAN = 1 << 20
#: The longest a source whose replays keep failing goes without asking for one (seconds).
MAX_REPLAY_BACKOFF_S = 60.0
#: Messages a source's SUB socket queues before libzmq drops what comes next (a gap). Set for a
#: relay waiting on NATS (the batches wait here meanwhile); what they take in memory is this times
#: their size, which `max_message_bytes` bounds per message.
RECEIVE_HWM = 100_000
#: The largest message taken from an engine by default (`--kv-max-message-size`): a batch of one
#: prefill of a million tokens is some 10 MB; more is a broken or hostile publisher.
DEFAULT_MAX_MESSAGE_BYTES = 64 << 20


@dataclass(frozen=True)
class Source:
    """One publisher: the worker it speaks for, its PUB endpoint and optional replay endpoint."""

    worker: str
    endpoint: str
    replay_endpoint: str | None = None
    #: The model the worker serves (used by the router to pick the index).
    model: str = ""
    #: ZMQ topic prefix to subscribe to ("" = everything).
    topic: str = ""

    @classmethod
    def parse(cls, text: str) -> Source:
        """`WORKER=ENDPOINT[,replay=ENDPOINT][,model=NAME][,topic=T]` (the `--kv-events` flag)."""
        worker, sep, rest = text.partition("=")
        if not sep or not worker or not rest:
            raise ValueError(f"--kv-events {text!r}: expected WORKER=ENDPOINT[,replay=ENDPOINT][,model=NAME]")
        endpoint, *pairs = rest.split(",")
        options: dict[str, str] = {}
        for pair in pairs:
            key, eq, value = pair.partition("=")
            if not eq or key not in ("replay", "model", "topic"):
                raise ValueError(f"--kv-events {text!r}: unknown option {pair!r}; known: replay, model, topic")
            options[key] = value
        for address in (endpoint, options.get("replay")):
            if address and not _is_zmq_address(address):
                raise ValueError(f"--kv-events {text!r}: {address!r} is not a ZMQ address (tcp://host:port)")
        return cls(worker, endpoint, options.get("replay") or None, options.get("model", ""), options.get("topic", ""))


def _is_zmq_address(address: str) -> bool:
    """A transport and an address; a TCP one with a port (ZMQ refuses one without at connect)."""
    transport, sep, rest = address.partition("://")
    if not sep or not transport or not rest:
        return False
    return transport != "tcp" or rest.rpartition(":")[2].isdigit()


def payload_digest(payload: bytes) -> str:
    """What identifies a batch as published (its payload holds the engine's timestamp): how a
    resumed source recognizes, in the engine's replay, the last batch handled before."""
    return hashlib.blake2b(payload, digest_size=16).hexdigest()


@dataclass
class SourceStats:
    """Per-source counters."""

    batches: int = 0
    decode_errors: int = 0
    gaps: int = 0
    replayed: int = 0
    resets: int = 0
    restarts: int = 0
    aged_out: int = 0
    #: Connections of the SUB socket lost (the engine went away, or sent a message over the size
    #: bound); what was on its way shows as a gap.
    disconnects: int = 0


@dataclass
class _State:
    source: Source
    socket: zmq.Socket | None
    last_seq: int | None = None
    last_seen: float = field(default_factory=time.monotonic)
    stats: SourceStats = field(default_factory=SourceStats)
    #: (seq, payload) delivered but not yet handed to an `on_payloads` sink.
    pending: list[tuple[int, bytes]] = field(default_factory=list)
    #: After a replay failed: no replay is asked for before this time (monotonic), and the wait
    #: doubles while they keep failing (see `_replay`).
    replay_after: float = 0.0
    replay_backoff: float = 0.0
    #: Of a resumed source, or one whose connection was lost, until its first message: the
    #: `payload_digest` of batch `last_seq` (see `_check_resumed`).
    resume_digest: str | None = None
    #: The payload of batch `last_seq`, when it came in this run (digested at a lost connection).
    last_payload: bytes | None = None


Sink = Callable[[str, Batch], None]
#: (worker, sequence number, raw payload): batches handed on undecoded.
PayloadSink = Callable[[str, int, bytes], None]
#: (worker, [(sequence number, raw payload)]) -> the refused ones as (position, DecodeError): a run
#: of one source's batches in order, handed on in one call.
PayloadsSink = Callable[[str, list[tuple[int, bytes]]], list[tuple[int, DecodeError]]]
ResetCallback = Callable[[str, str], None]


class Subscriber:
    """Runs the subscription loop on its own thread (`start()` / `stop()`)."""

    def __init__(
        self,
        sources: list[Source],
        on_batch: Sink | None,
        on_reset: ResetCallback,
        *,
        silence_timeout_s: float | None = 300.0,
        replay_timeout_s: float = 2.0,
        poll_interval_s: float = 0.1,
        on_payload: PayloadSink | None = None,
        on_payloads: PayloadsSink | None = None,
        resume: dict[str, int] | None = None,
        resume_digests: dict[str, str] | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        """`on_payload`, when given, replaces decoding and `on_batch`; `on_payloads` likewise, with
        the batches of one source that arrived together (a drain of its socket) in one call, handed
        on before anything that resets the source; `resume` maps a worker to the last sequence
        number already handled, so the first message is checked against it (a gap is replayed, a
        lower number is an engine restart) instead of being taken as it comes. `resume_digests`
        maps such a worker to the `payload_digest` of that batch: when the first message's number
        is above it, that batch is asked of the replay socket too (with the missed ones, in one
        request) and must be the same, or the engine restarted since (and published as many
        batches again): the source is reset (`restart`), and the new engine's batches are fetched
        from 0. One the replay socket cannot return is a `gap` reset. Without a replay socket the
        check cannot be made, and the number alone is checked. `max_message_bytes`: the largest
        message taken from an engine (libzmq's `MAXMSGSIZE`, on the SUB and replay sockets)."""
        if max_message_bytes <= 0:
            raise ValueError("max_message_bytes: must be > 0")
        self._max_message = max_message_bytes
        names = [s.worker for s in sources]
        if len(set(names)) != len(names):
            raise ValueError("each KV-event source needs its own worker name")
        self.sources = sources
        if sum(sink is not None for sink in (on_batch, on_payload, on_payloads)) != 1:
            raise ValueError("give exactly one of on_batch, on_payload and on_payloads")
        self._on_batch = on_batch
        self._on_payload = on_payload
        self._on_payloads = on_payloads
        self._resume = dict(resume or {})
        self._resume_digests = dict(resume_digests or {})
        self._on_reset = on_reset
        self._silence = silence_timeout_s
        self._replay_timeout = replay_timeout_s
        self._poll_ms = max(1, int(poll_interval_s * 1000))
        self._ctx = zmq.Context()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._states: dict[str, _State] = {}
        self._ready = threading.Event()
        self._setup_error: ValueError | None = None

    def stats(self) -> dict[str, SourceStats]:
        """Per-worker counters (a snapshot)."""
        return {name: SourceStats(**vars(st.stats)) for name, st in self._states.items()}

    def start(self) -> None:
        """Connects every source and starts the loop; returns once the sockets are connected, or
        raises ValueError naming the source ZMQ refused to connect."""
        self._thread = threading.Thread(target=self._run, name="kv-events", daemon=True)
        self._thread.start()
        self._ready.wait(10)
        if self._setup_error is not None:
            raise self._setup_error

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._ctx.term()

    # --- the loop ------------------------------------------------------------------------------

    def _run(self) -> None:
        poller = zmq.Poller()
        #: Every socket polled: a source's SUB socket, or (True) the monitor of its connections.
        sockets: dict[zmq.Socket, tuple[_State, bool]] = {}
        try:
            for source in self.sources:
                state = _State(source, None, last_seq=self._resume.get(source.worker))
                if state.last_seq is not None:
                    state.resume_digest = self._resume_digests.get(source.worker)
                try:
                    self._open(state, poller, sockets)
                except zmq.ZMQError as e:  # `start()` raises it
                    self._setup_error = ValueError(
                        f"--kv-events {source.worker}: cannot connect to {source.endpoint!r}: {e}")
                    return
                self._states[source.worker] = state
            self._ready.set()
            while not self._stop.is_set():
                for sock, _ in poller.poll(self._poll_ms):
                    if sock not in sockets:
                        continue  # made again after a lost connection, earlier in this round
                    state, is_monitor = sockets[sock]
                    if is_monitor:
                        self._guarded(state, lambda st: self._disconnected(st, poller, sockets))
                    else:
                        self._guarded(state, self._drain)
                for state in self._states.values():
                    self._guarded(state, self._age_out)
        finally:
            self._ready.set()
            for sock in sockets:
                sock.close(0)

    def _open(self, state: _State, poller: zmq.Poller, sockets: dict[zmq.Socket, tuple[_State, bool]]) -> None:
        """Makes and connects the source's SUB socket, with a monitor of its lost connections."""
        sock = self._ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, RECEIVE_HWM)
        sock.setsockopt(zmq.MAXMSGSIZE, self._max_message)
        sock.setsockopt_string(zmq.SUBSCRIBE, state.source.topic)
        monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        try:
            sock.connect(state.source.endpoint)
        except zmq.ZMQError:
            monitor.close(0)
            sock.close(0)
            raise
        state.socket = sock
        for polled, is_monitor in ((sock, False), (monitor, True)):
            sockets[polled] = (state, is_monitor)
            poller.register(polled, zmq.POLLIN)

    def _disconnected(self, state: _State, poller: zmq.Poller, sockets: dict[zmq.Socket, tuple[_State, bool]]) -> None:
        """The monitor of a source's SUB socket reported: on a lost connection, what the socket
        received before it is handled and the socket is made again. libzmq does not tell an engine
        that went away from one that sent a message over `MAXMSGSIZE`, and after the latter (a
        protocol error to it) it never connects again: the source would be deaf for good. (A
        fresh socket also cannot end up connected twice where libzmq would have reconnected by
        itself.) What was on its way shows as a gap at the next message."""
        monitor = next(sock for sock, (st, is_monitor) in sockets.items() if st is state and is_monitor)
        lost = False
        while True:
            try:
                frames = monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            lost = lost or parse_monitor_message(frames)["event"] == zmq.EVENT_DISCONNECTED
        if not lost:
            return
        state.stats.disconnects += 1
        _log.warning("kv_events_disconnected worker=%s endpoint=%s: the engine went away or sent a message over "
                     "%d bytes (--kv-max-message-size); what was on its way shows as a gap",
                     state.source.worker, state.source.endpoint, self._max_message)
        old = state.socket
        try:
            while not self._stop.is_set() and old.poll(0):
                self._drain(state)
            if state.last_seq is not None and state.last_payload is not None and state.resume_digest is None:
                # The engine may have restarted meanwhile: the next message is checked against it.
                state.resume_digest = payload_digest(state.last_payload)
        finally:  # made again even when a sink failed on what was left (`_guarded` resets the source)
            for sock in (old, monitor):
                poller.unregister(sock)
                del sockets[sock]
                sock.close(0)
            self._open(state, poller, sockets)

    def _drain(self, state: _State) -> None:
        """Handles what is queued on a source's socket (at most 1000 messages, so that one busy
        engine cannot starve the others and the age-out check)."""
        for _ in range(1000):
            if self._stop.is_set():  # a backlog behind a slow sink must not hold up `stop()`
                break
            try:
                frames = state.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            self._handle(state, frames)
        self._flush(state)

    def _guarded(self, state: _State, step: Callable[[_State], None]) -> None:
        """Runs one step of the loop for a source. An error a sink or the reset callback raises
        (anything but a refused payload: a bug, or memory) would end the thread, and with it every
        source's updates; instead it is logged and the source is reset, since its batch may be
        half applied."""
        try:
            step(state)
        except Exception:  # noqa: BLE001 - logged; the loop must outlive one source's failure
            if self._stop.is_set():
                # Stopping: `stop()` ends the context under a thread that is still busy (sockets
                # raise `ContextTerminated`). Not a failure of the source, whose view stays as it is.
                return
            _log.exception("kv_events_apply_failed worker=%s", state.source.worker)
            self._reset_after_error(state)

    def _reset_after_error(self, state: _State) -> None:
        state.pending = []
        last = state.last_seq
        try:
            self._reset(state, "apply_error")
        except Exception:  # noqa: BLE001 - the reset callback failed too: the source starts afresh
            _log.exception("kv_events_reset_failed worker=%s", state.source.worker)
            state.last_seq = None
            return
        # What failed is applying, not the engine's sequence: the batches up to `last` came, so the
        # next one is still checked against it. Forgotten, an engine restart or a gap right after
        # the failure went unseen (the old engine's blocks stayed, or missed batches were not asked
        # for).
        state.last_seq = last

    def _handle(self, state: _State, frames: list[bytes]) -> None:
        state.last_seen = time.monotonic()
        if len(frames) != 3 or len(frames[1]) != 8:
            state.stats.decode_errors += 1
            _log.warning("kv_events_bad_message worker=%s frames=%d", state.source.worker, len(frames))
            return
        seq = int.from_bytes(frames[1], "big")
        last = state.last_seq
        digest, state.resume_digest = state.resume_digest, None
        if digest is not None and last is not None and seq > last and state.source.replay_endpoint:
            self._check_resumed(state, last, seq, digest)
        elif last is not None and seq <= last:
            state.stats.restarts += 1
            self._reset(state, "restart")
            if seq > 0:
                # The new engine's first batches went by unseen (the subscriber or its relay was
                # away): fetched from its replay socket when it still has them.
                self._replay(state, 0, seq)
        elif last is not None and seq > last + 1:
            state.stats.gaps += 1
            if not self._replay(state, last + 1, seq):
                self._reset(state, "gap")
        self._deliver(state, seq, frames[2])

    def _check_resumed(self, state: _State, last: int, seq: int, digest: str) -> None:
        """The first message `seq` of a source resumed after batch `last` (or whose connection was
        lost after it), whose payload's digest is `digest`: batches `last .. seq-1` are asked of
        the replay socket in one request. The same batch `last` there: the engine that published
        it goes on, and the batches after it are delivered (those missed, then `seq`). Another
        one: the engine restarted meanwhile and has since passed `last` (by number alone a
        continuation, or a gap filled from the new engine's buffer, leaving the old engine's
        blocks in place). None: no telling (a timeout, a buffer past it): a gap."""
        worker = state.source.worker
        got = self._request_replay(state, last, seq) if seq - last <= MAX_REPLAY_SPAN else None
        before = None if got is None else got.get(last)
        if before is not None and payload_digest(before) == digest:
            if seq > last + 1:
                state.stats.gaps += 1
                if all(s in got for s in range(last + 1, seq)):
                    for s in range(last + 1, seq):
                        self._deliver(state, s, got[s])
                        state.stats.replayed += 1
                else:
                    self._reset(state, "gap")
        elif before is not None:
            _log.warning("kv_events_resume_restart worker=%s seq=%d: the engine's batch %d is not the one "
                         "handled before; it restarted since", worker, seq, last)
            state.stats.restarts += 1
            self._reset(state, "restart")
            self._replay(state, 0, seq)
        else:
            _log.warning("kv_events_resume_unverified worker=%s seq=%d: the replay socket did not return "
                         "batch %d, handled before", worker, seq, last)
            state.stats.gaps += 1
            self._reset(state, "gap")

    def _deliver(self, state: _State, seq: int, payload: bytes) -> None:
        state.last_seq = seq
        state.last_payload = payload
        if self._on_payloads is not None:
            state.pending.append((seq, payload))
            return
        if self._on_payload is not None:
            try:
                self._on_payload(state.source.worker, seq, payload)
            except DecodeError as e:  # a sink that decodes (the native index) refused it
                state.stats.decode_errors += 1
                _log.warning("kv_events_decode_error worker=%s seq=%d error=%s", state.source.worker, seq, e)
                return
            state.stats.batches += 1
            return
        try:
            batch = decode_batch(payload)
        except DecodeError as e:
            state.stats.decode_errors += 1
            _log.warning("kv_events_decode_error worker=%s seq=%d error=%s", state.source.worker, seq, e)
            return
        state.stats.batches += 1
        self._on_batch(state.source.worker, batch)

    def _flush(self, state: _State) -> None:
        """Hands the batches delivered since the last flush to the `on_payloads` sink."""
        if not state.pending:
            return
        items, state.pending = state.pending, []
        try:
            refused = self._on_payloads(state.source.worker, items)
        except Exception:
            if len(items) == 1:
                raise  # `_guarded` logs it and resets the source
            # The run may be half applied: the source is reset and its batches handed on again
            # one at a time, a failing one resetting the source.
            _log.exception("kv_events_apply_failed worker=%s seq=%d..%d", state.source.worker, items[0][0], items[-1][0])
            self._reset_after_error(state)
            for item in items:
                state.pending = [item]
                self._guarded(state, self._flush)
            return
        state.stats.batches += len(items) - len(refused)
        for position, e in refused:
            state.stats.decode_errors += 1
            _log.warning("kv_events_decode_error worker=%s seq=%d error=%s", state.source.worker, items[position][0], e)

    def _replay(self, state: _State, start: int, until: int) -> bool:
        """Fetches and delivers batches `start .. until-1`; False when they cannot all be had (a span
        longer than any engine's replay buffer is not asked for: a sequence number that jumps by
        billions is a broken publisher, and the answer could not be checked without holding it)."""
        endpoint = state.source.replay_endpoint
        if not endpoint or until - start > MAX_REPLAY_SPAN or time.monotonic() < state.replay_after:
            return False
        if time.monotonic() > state.replay_after + MAX_REPLAY_BACKOFF_S:
            state.replay_backoff = 0.0  # long past the last failure: a new one starts afresh
        answered = self._fetch_replay(state, start, until)
        if answered is not None:
            state.replay_backoff = 0.0
            return answered
        # A replay waits, blocking this thread (every source's), for up to the replay timeout: an
        # engine that keeps skipping numbers with a replay socket that does not answer would hold
        # every other source still. Its gaps become resets until the wait is over. (One that
        # answers without them, its buffer past them, costs a round trip and is asked each time.)
        state.replay_backoff = min(max(1.0, 2 * state.replay_backoff), MAX_REPLAY_BACKOFF_S)
        state.replay_after = time.monotonic() + state.replay_backoff
        return False

    def _fetch_replay(self, state: _State, start: int, until: int) -> bool | None:
        """One request to the replay socket for `start .. until-1`, delivered when all came; None
        when the socket did not answer in time."""
        got = self._request_replay(state, start, until)
        if got is None:
            return None
        # Keys are in start..until-1: all of them are there when there are as many.
        if len(got) != until - start:
            _log.warning(
                "kv_events_replay_incomplete worker=%s wanted=%d..%d got=%d",
                state.source.worker, start, until - 1, len(got),
            )
            return False
        for seq in range(start, until):
            self._deliver(state, seq, got[seq])
            state.stats.replayed += 1
        return True

    def _request_replay(self, state: _State, start: int, until: int) -> dict[int, bytes] | None:
        """Asks the replay socket for `start .. until-1`: what it returned of them, by sequence
        number; None when it did not answer in time."""
        endpoint = state.source.replay_endpoint
        sock = self._ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        # An answer over the bound drops the connection: the request then times out (a gap).
        sock.setsockopt(zmq.MAXMSGSIZE, self._max_message)
        try:
            sock.connect(endpoint)
            sock.send_multipart([b"", start.to_bytes(8, "big")])
            got: dict[int, bytes] = {}
            deadline = time.monotonic() + self._replay_timeout
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not sock.poll(int(remaining * 1000) + 1):
                    _log.warning("kv_events_replay_timeout worker=%s start=%d", state.source.worker, start)
                    return None
                frames = sock.recv_multipart()
                # vLLM and SGLang 0.5.23 answer [b"", topic, seq, payload], older SGLang
                # [b"", seq, payload]; all end with seq -1 and an empty payload.
                if len(frames) not in (3, 4) or len(frames[-2]) != 8:
                    continue
                seq = int.from_bytes(frames[-2], "big", signed=True)
                if seq == END_SEQ:
                    break
                if start <= seq < until:
                    got[seq] = frames[-1]
                    if len(got) == until - start:
                        break  # all of them: the end marker need not be waited for
        finally:
            sock.close(0)
        return got

    def _reset(self, state: _State, reason: str) -> None:
        self._flush(state)  # what came before the reset is applied before it
        state.stats.resets += 1
        state.last_seq = None
        _log.warning("kv_events_worker_reset worker=%s reason=%s", state.source.worker, reason)
        self._on_reset(state.source.worker, reason)

    def _age_out(self, state: _State) -> None:
        if self._silence and state.last_seq is not None and time.monotonic() - state.last_seen > self._silence:
            state.stats.aged_out += 1
            self._reset(state, "silent")
