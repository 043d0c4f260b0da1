"""Multiplex: many Tokenize, Detokenize and Render requests on one bidirectional stream, each with
its own id and deadline, answered as each completes (see `MultiplexRequest` in the proto).

Messages arrive and leave as raw bytes. A client message goes to the native multiplexer in one
call (on the event loop when the message is small, on the worker pool otherwise), which runs every
small request in it and writes their results as `MultiplexResponse` bytes; each large request
(cost above the inline bound) then runs on the worker pool by itself and is answered when it is
done, so it never holds up the small ones. Reading and writing run in two tasks: results ready
while a write is in flight are sent together in the next message.

A request that fails gets its own error result and the stream goes on; only malformed framing (no
id can be trusted) ends the stream with INVALID_ARGUMENT. A cancel answers a waiting request
CANCELLED at once and, for a large one already on a worker, sets its cancel token (the Offloader's,
see `sidecar.cancel`), so the native work stops at its next check. While the server drains, new
requests are answered UNAVAILABLE; while responses past --max-unsent-mb wait for their clients (the
results waiting here count), RESOURCE_EXHAUSTED, and results computed meanwhile that would pass it
are dropped and answered so. A message is run only once the stream's earlier results are written.
One log line per stream (its counts), metrics per request kind and code
(`sidecar_multiplexed_requests_total`).
"""

from __future__ import annotations

import asyncio
import time
from array import array
from typing import AsyncIterator, Sequence

import grpc

from sidecar import metrics
from sidecar.errors import (CANCELLED, DeadlineExceeded, FailedPrecondition, ResourceExhausted, Unavailable, code_name,
                            code_number, is_expected, status_proto_fields)
from sidecar.logs import get_logger
from sidecar.rpc import DRAINING, Call, Gate, StreamCounts
from sidecar.runtime import Runtime
from sidecar.servicers.native_table import NativeTable
from sidecar.v1 import preprocessor_pb2 as pb

try:
    from sidecar.native.multiplex import KINDS, Batch, Deferred, NativeMultiplexer
except ImportError:  # no native library (a reference-only install): the stream says so when opened
    NativeMultiplexer = None

_log = get_logger("sidecar.multiplex")
#: (code, message) of the results written here rather than by the native core.
_DRAINING = status_proto_fields(Unavailable(DRAINING))
_CANCELLED = (code_number(CANCELLED[0]), CANCELLED[1])
_DEADLINE = status_proto_fields(DeadlineExceeded("the request's deadline passed before the server answered"))
_BUSY_CODE = code_number(ResourceExhausted.code)
#: Results this small (a few errors, a short Tokenize) are held even past --max-unsent-mb.
_SMALL_RESULTS = 4096


def error_result(request_id: int, code: int, message: str) -> bytes:
    """A `MultiplexResponse` failing one request (for the rare answers written here, not natively)."""
    result = pb.MultiplexResult(id=request_id, error=pb.Status(code=code, message=message))
    return pb.MultiplexResponse(results=[result]).SerializeToString()


class MultiplexServicer:
    def __init__(self, runtime: Runtime, gate: Gate, native: NativeTable | None = None) -> None:
        self.runtime = runtime
        self.gate = gate
        self._native = native or NativeTable(runtime)
        self._requests: dict[tuple[int, int], object] = {}
        self._cache_counters = (
            metrics.RENDER_CACHE_SEGMENTS.labels("hit"), metrics.RENDER_CACHE_SEGMENTS.labels("miss"),
            metrics.RENDER_CACHE_BYTES.labels("hit"), metrics.RENDER_CACHE_BYTES.labels("miss"),
        )

    def table(self) -> NativeMultiplexer:
        """The native table of the hosted models (see `NativeTable`; shared with the unary RPCs)."""
        table = self._native.get()
        if table is None:
            raise FailedPrecondition(
                "Multiplex: needs the native backend (this server runs --backend reference); use the unary RPCs"
            )
        return table

    async def Multiplex(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext, call: Call, counts: StreamCounts
    ) -> AsyncIterator[bytes]:
        """Runs inside `sidecar.rpc.stream` (request id, log line, metrics, status mapping)."""
        self.table()  # FAILED_PRECONDITION now, on a backend that cannot run it
        stream = _Stream(self, call, counts)
        reader = asyncio.create_task(stream.read(requests))
        forget = self.gate.on_close(stream.wake)
        try:
            async for message in stream.messages(reader):
                yield message
        finally:
            forget()
            reader.cancel()
            stream.abandon()

    def record(self, batch: Batch, counts: StreamCounts) -> None:
        """Metrics and the stream's counts of one batch's results."""
        for kind, code, n in batch.tally:
            counter = self._requests.get((kind, code))
            if counter is None:
                counter = self._requests[(kind, code)] = metrics.MULTIPLEXED.labels(
                    KINDS[kind], code_name(code))
            counter.inc(n)
            counts.opened += n
            if code:
                counts.errors += n
        if any(batch.cache):
            for counter, n in zip(self._cache_counters, batch.cache):
                counter.inc(n)

    def record_error(self, kind: int, code: int, counts: StreamCounts) -> None:
        """Counts a result written here (cancel, deadline, busy pool)."""
        self.record(Batch((), (), (), [(kind, code, 1)], (0, 0, 0, 0)), counts)


class _Stream:
    """One Multiplex stream: its large requests in flight and the results waiting to be sent."""

    def __init__(self, servicer: MultiplexServicer, call: Call, counts: StreamCounts) -> None:
        self._servicer = servicer
        self._runtime = servicer.runtime
        self._gate = servicer.gate
        self._call = call
        self._counts = counts
        self._limit = self._runtime.config.max_message_bytes
        self._inline = self._runtime.config.inline_bytes
        #: Large requests running or queued on the worker pool: id -> (task, kind).
        self._pending: dict[int, tuple[asyncio.Task, int]] = {}
        self._out: list[bytes] = []
        #: The results in `_out`, counted against --max-unsent-mb until handed to the stream's
        #: wrapper (which counts each message while gRPC writes it); None outside `rpc.stream`.
        self._unsent = call.unsent
        #: Bytes of results not yet written (in `_out` or being written); while there are any the
        #: reader waits on `_writable` before running the next message: a client that sends and
        #: never reads would otherwise make the server hold every answer (125 MB after 30 MB sent),
        #: and many such streams a message's worth each (66 MB for one stream, before).
        self._out_bytes = 0
        self._writable = asyncio.Event()
        self._writable.set()
        self._ready = asyncio.Event()
        #: Whether the reader holds a message it has not applied yet (its results are to come).
        self._handling = False
        self._message_latency = metrics.STAGE_LATENCY.labels(call.rpc, "message")

    async def read(self, requests: AsyncIterator[bytes]) -> None:
        """Handles client messages in order until the client half-closes; a malformed one raises
        (the stream's status)."""
        try:
            async for message in requests:
                # Stamped first: a request's deadline counts the wait for the client to read.
                received = time.perf_counter()
                self._handling = True
                await self._writable.wait()
                table = self._servicer.table()
                refuse = (0, "") if self._gate.open else _DRAINING
                busy = self._unsent.refusal() if self._unsent is not None and self._gate.open else None
                if busy is not None:
                    # Answers past --max-unsent-mb wait for their clients: the message's requests
                    # are answered so, not run (cancels still are).
                    refuse = (_BUSY_CODE, busy)
                pending = array("Q", self._pending) if self._pending else ()
                # Held until the message's large requests hold it in turn: a reload meanwhile
                # closes the table it replaces (see `NativeMultiplexer.hold`).
                table.hold()
                try:
                    if len(message) <= self._inline:
                        # Elapsed since received: a wait for the client to read counts here too.
                        batch = table.run(message, _elapsed_us(received), pending, *refuse)
                    else:
                        # A big message (many requests, or a few large ones) is decoded and its
                        # small requests run off the loop, in one hop; exempt from the queue bound
                        # (one message of the stream at a time), its large requests are not.
                        batch = await self._runtime.offloader.run(
                            lambda: table.run(message, _elapsed_us(received), pending, *refuse), len(message),
                            self._call.rpc, bounded=False,
                        )
                    self._apply(batch, message, received, table)
                finally:
                    self._handling = False
                    table.release()
                self._message_latency.observe(time.perf_counter() - received)
                if not self._gate.open and not self._pending:
                    # Every request is answered and no new one will be run: end the stream, so
                    # the client reconnects (elsewhere) and the drain is not held up by it.
                    raise Unavailable(_DRAINING[1])
        finally:
            self.wake()

    def _apply(self, batch: Batch, message: bytes, received: float, table: NativeMultiplexer) -> None:
        busy = self._refusal(batch.messages)
        if busy is not None:
            # Run while other streams' answers filled the bound: the results are dropped, each
            # request answered so (the bound holds whatever the number of streams running at once).
            batch = batch._replace(messages=[error_result(i, _BUSY_CODE, busy) for i in result_ids(batch.messages)],
                                   tally=[(kind, _BUSY_CODE, n) for kind, _code, n in batch.tally])
        self._servicer.record(batch, self._counts)
        if batch.messages:
            self._send(batch.messages)
        for deferred in batch.deferred:
            call = message[deferred.start:deferred.start + deferred.length]
            table.hold()  # until the task ends, run or cancelled (see `NativeMultiplexer.hold`)
            task = asyncio.create_task(self._run_deferred(deferred, call, received, table))
            task.add_done_callback(lambda _task: table.release())
            self._pending[deferred.id] = (task, deferred.kind)
        for request_id in batch.cancel:
            entry = self._pending.pop(request_id, None)
            if entry is not None:
                entry[0].cancel()
                self._fail(request_id, entry[1], *_CANCELLED)

    async def _run_deferred(self, deferred: Deferred, call: bytes, received: float, table: NativeMultiplexer) -> None:
        """Runs one large request on the worker pool and sends its result; a deadline that passes
        while it waits or runs answers it DEADLINE_EXCEEDED at that moment."""
        me = asyncio.current_task()
        timer = None
        if deferred.timeout_us:
            left = max(0.0, received + deferred.timeout_us / 1e6 - time.perf_counter())
            timer = asyncio.get_running_loop().call_later(left, self._expire, deferred, me)
        try:
            batch = await self._runtime.offloader.run(
                lambda: table.run_one(call, _elapsed_us(received)), deferred.cost, self._call.rpc
            )
        except Exception as e:  # noqa: BLE001 - the worker pool's queue is full, or a bug: this id's error
            if not is_expected(e):
                _log.exception("multiplex_request_crashed", request=deferred.id)
            if self._owns(deferred.id, me):
                self._fail(deferred.id, deferred.kind, *status_proto_fields(e))
            return
        finally:
            if timer is not None:
                timer.cancel()
            if self._owns(deferred.id, me):
                del self._pending[deferred.id]
        busy = self._refusal(batch.messages)
        if busy is not None:
            self._fail(deferred.id, deferred.kind, _BUSY_CODE, busy)
            return
        self._servicer.record(batch, self._counts)
        self._send(batch.messages)

    def _refusal(self, messages) -> str | None:  # noqa: ANN001 - a sequence of bytes
        """Why results of these sizes may not be held now (--max-unsent-mb), or None; small ones
        always may."""
        if self._unsent is None or not messages:
            return None
        size = sum(map(len, messages))
        return self._unsent.refusal(size) if size > _SMALL_RESULTS else None

    def _owns(self, request_id: int, task: asyncio.Task | None) -> bool:
        """Whether `task` is still the pending request `request_id` (a cancel or a deadline may have
        answered it, and the client may have reused the id since)."""
        entry = self._pending.get(request_id)
        return entry is not None and entry[0] is task

    def _expire(self, deferred: Deferred, task: asyncio.Task) -> None:
        if self._owns(deferred.id, task):
            del self._pending[deferred.id]
            task.cancel()
            self._fail(deferred.id, deferred.kind, *_DEADLINE)

    def _fail(self, request_id: int, kind: int, code: int, message: str) -> None:
        self._servicer.record_error(kind, code, self._counts)
        self._send((error_result(request_id, code, message),))

    def _send(self, messages) -> None:  # noqa: ANN001 - a sequence of bytes
        self._out.extend(messages)
        size = sum(map(len, messages))
        self._out_bytes += size
        if self._unsent is not None:
            self._unsent.hold(size)
        self._writable.clear()
        self._ready.set()

    def wake(self) -> None:
        """Lets `messages` look again: results are ready, the reader ended, or the server drains."""
        self._ready.set()

    async def messages(self, reader: asyncio.Task) -> AsyncIterator[bytes]:
        """Results as server messages, as they become ready, each within the message limit, until
        the client has half-closed and every request is answered."""
        while True:
            await self._ready.wait()
            self._ready.clear()
            if self._out:
                out, self._out = self._out, []
                for message in _pack(out, self._limit):
                    if self._unsent is not None:
                        self._unsent.release(len(message))  # the wrapper holds it until written
                    yield message  # returns once gRPC wrote it: flow control holds it while the client reads nothing
                self._out_bytes -= sum(map(len, out))
                if not self._out_bytes:
                    self._writable.set()
            if reader.done() and not self._out:
                error = reader.exception()
                if error is not None:
                    raise error
                if not self._pending:
                    return
            if not self._gate.open and not (self._out or self._pending or self._handling):
                # Draining, and nothing in flight: end the stream now, not at the client's next
                # message (an idle stream held the drain for all of --drain-seconds).
                raise Unavailable(_DRAINING[1])

    def abandon(self) -> None:
        """The stream ended: its large requests are dropped (a native call already running
        stops at its next cancel check)."""
        for task, _kind in self._pending.values():
            task.cancel()
        self._pending.clear()


def _pack(messages: list[bytes], limit: int) -> list[bytes]:
    """Joins consecutive messages (each a valid `MultiplexResponse` within `limit`) into as few
    messages of at most `limit` bytes as fit: repeated fields concatenate in protobuf."""
    if len(messages) == 1:
        return messages
    packed: list[bytes] = []
    group: list[bytes] = []
    size = 0
    for message in messages:
        if group and size + len(message) > limit:
            packed.append(b"".join(group))
            group, size = [], 0
        group.append(message)
        size += len(message)
    packed.append(b"".join(group))
    return packed


def result_ids(messages: Sequence[bytes]) -> list[int]:
    """The ids of the results in raw `MultiplexResponse` messages, read off the wire (each result's
    length skips its body, so a large Tokenize answer is not decoded to be refused)."""
    ids = []
    for data in messages:
        pos = 0
        while pos < len(data):
            _tag, pos = _varint(data, pos)  # field 1, length-delimited: one MultiplexResult
            length, pos = _varint(data, pos)
            end, request_id = pos + length, 0
            while pos < end:
                tag, pos = _varint(data, pos)
                if tag == 0x08:  # field 1 (id), varint
                    request_id, pos = _varint(data, pos)
                elif tag & 7 == 0:
                    pos = _varint(data, pos)[1]
                elif tag & 7 == 2:
                    size, pos = _varint(data, pos)
                    pos += size
                else:  # fixed 64 / 32 bits (the native core writes neither)
                    pos += 8 if tag & 7 == 1 else 4
            ids.append(request_id)
            pos = end
    return ids


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _elapsed_us(since: float) -> int:
    return int((time.perf_counter() - since) * 1e6)


