"""The wrappers every RPC handler runs in, unary and streaming alike: request id (from `x-request-id`
metadata or generated, echoed in trailing metadata), one structured log line per call, metrics
(requests and errors by code, latency, in-flight), the deadline, admission (a draining server
refuses new calls with UNAVAILABLE), the call's trace span when tracing is on, and the translation
of exceptions into gRPC statuses (the table itself is in `sidecar.errors`). Anything unexpected that
escapes a handler is logged with its traceback and answered INTERNAL.

A unary wrapper given the request's message type receives the raw body and decodes it itself, so a
body that does not decode is that call's INVALID_ARGUMENT (logged and counted like any other
failure) rather than an UNKNOWN status from gRPC's own deserializer; it encodes the response too.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable

import grpc
import structlog

from google.protobuf.message import DecodeError

from router_adapter.errors import quoted
from sidecar import metrics, tracing
from sidecar.errors import (CANCELLED, CUT_BY_STOP, STREAM_GONE, DeadlineExceeded, InvalidArgument, ResourceExhausted,
                            Unavailable, is_expected, status_of)
from sidecar.logs import get_logger, info_line

_log = get_logger("sidecar.rpc")


@dataclass(slots=True)
class Call:
    """Per-call facts a handler may need."""

    rpc: str
    request_id: str
    #: Seconds left before the client's deadline, or None when it set none.
    timeout_s: float | None
    #: The request's model, for the call's log line (a handler that reads raw bytes sets it), cut by
    #: `quoted` (a client string: a 30 MB name wrote 180 MB of log).
    model: str = ""
    #: Bytes of the request's wire body when the handler got it raw (0 otherwise): its size
    #: without protobuf's `ByteSize`, which reads the whole message again.
    body_bytes: int = 0
    #: A stream's answers not yet written (set by `stream`; None on a unary call).
    unsent: StreamUnsent | None = None

    def check_deadline(self) -> None:
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise DeadlineExceeded("the request's deadline passed before work started")


@dataclass(slots=True)
class StreamCounts:
    """What one stream did, for its log line. The wrapper counts messages; the handler the rest."""

    #: Client messages answered.
    messages: int = 0
    #: Requests the stream opened.
    opened: int = 0
    #: Requests that failed on their own (the stream went on).
    errors: int = 0


class StreamUnsent:
    """One stream's answers that gRPC has not finished writing, counted in the gate's unsent bytes
    on the stream's connection (while `--max-unsent-mb` bounds them). A write completes once HTTP/2
    flow control let the answer go: a client that does not read leaves the stream's last answer
    held here (measured: a 16 MB answer's write never completed, while 3 of 1 MB and 511 of 8 KB
    did, the client's window; the stream's next message is not read meanwhile), so many streams
    that do not read add up here instead of in memory nobody counts."""

    __slots__ = ("_gate", "_peer", "held")

    def __init__(self, gate: Gate, peer: str) -> None:
        self._gate = gate
        self._peer = peer
        self.held = 0

    def hold(self, size: int) -> None:
        if self._gate.max_unsent:
            self._gate.hold(self._peer, size)
            self.held += size

    def release(self, size: int) -> None:
        if self._gate.max_unsent:
            self._gate.release(self._peer, size)
            self.held -= size

    def release_all(self) -> None:
        """The stream ended: what it held is dropped with it."""
        self.release(self.held)

    def refusal(self, adding: int = 0) -> str | None:
        """Why work adding `adding` bytes of answers is refused now (`Gate.unsent_refusal`), or None."""
        return self._gate.unsent_refusal(self._peer, adding)


#: What a call or request refused (or a stream ended) because the server drains is told.
DRAINING = "server is shutting down (draining); retry on another instance"

#: How many connections' worth of unread responses (`--max-unsent-mb` each) the process holds in
#: all before it refuses every client's unary calls.
UNSENT_TOTAL_FACTOR = 4


class Gate:
    """Admission of new calls and the count of calls in flight: a draining server closes it, refuses
    new calls, and waits (boundedly) for `inflight` to reach zero. Only touched on the event loop."""

    __slots__ = ("open", "stopped", "cut", "inflight", "_on_close", "unsent", "max_unsent", "_unsent_by_peer", "max_response")

    def __init__(self, max_unsent_bytes: int = 0, max_response_bytes: int = 0) -> None:
        self.open = True
        #: Set just before the server stops (the drain is over): gRPC then cancels the calls still
        #: running, and their clients get UNAVAILABLE. A stream's request iterator just ends, as if
        #: the client had half-closed, and such a stream was logged and counted OK.
        self.stopped = False
        #: How the calls cut off by the stop are recorded (why the server stopped; set by `stop`).
        self.cut = CUT_BY_STOP
        #: The largest unary response gRPC sends (`--max-message-mb`; 0: no bound here). gRPC
        #: refuses a larger one itself, RESOURCE_EXHAUSTED "Sent message larger than max", after
        #: the call was logged and counted OK: the wrappers check it first (`check_response`).
        self.max_response = max_response_bytes
        self.inflight = 0
        self._on_close: set[Callable[[], None]] = set()
        #: Bytes of unary responses handed to gRPC whose call has not ended: a client that never
        #: reads (an HTTP/2 window of 0) keeps them in memory, and six such connections took the
        #: server from 346 MB to 1 GB. A connection (gRPC's peer: a TCP connection, or all of the
        #: Unix socket's together, which gRPC does not tell apart) past `max_unsent` (0: no
        #: bound) gets its new unary calls refused, so one client that stops reading does not shut
        #: the others out; past `UNSENT_TOTAL_FACTOR` times it, everyone's are.
        self.unsent = 0
        self.max_unsent = max_unsent_bytes
        self._unsent_by_peer: dict[str, int] = {}

    def close(self) -> None:
        """Refuses new calls from now on, and tells the streams that asked (`on_close`)."""
        self.open = False
        for callback in list(self._on_close):
            callback()

    def on_close(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Calls `callback` when the gate closes (a stream with nothing in flight then ends, so an
        idle one does not hold the drain); returns what forgets it."""
        self._on_close.add(callback)
        return lambda: self._on_close.discard(callback)

    def stop(self, cut: tuple[grpc.StatusCode, str] = CUT_BY_STOP) -> None:
        """The server is about to stop: calls that end from now on were cut off (`cut_status`),
        recorded as `cut` (why it stops; the first stop's reason holds)."""
        self.open = False
        if not self.stopped:
            self.cut = cut
        self.stopped = True

    def cut_status(self) -> tuple[grpc.StatusCode, str]:
        """How a call that was cancelled, or a stream whose requests ended, is recorded: cut off by
        the server's stop (what its client sees), or else cancelled by its client."""
        return self.cut if self.stopped else CANCELLED

    def call_done(self, _context: object) -> None:
        """A call ended (its status sent or the call cancelled): the `add_done_callback` of each call."""
        self.inflight -= 1

    def hold_response(self, context: grpc.aio.ServicerContext, size: int) -> None:
        """Counts a unary response of `size` bytes as unsent until its call ends."""
        if self.max_unsent:
            peer = context.peer()
            self.hold(peer, size)
            context.add_done_callback(lambda _context: self.release(peer, size))

    def hold(self, peer: str, size: int) -> None:
        """Counts `size` bytes of responses as unsent on `peer`'s connection (0: nothing)."""
        if size:
            self.unsent += size
            self._unsent_by_peer[peer] = self._unsent_by_peer.get(peer, 0) + size

    def release(self, peer: str, size: int) -> None:
        """`size` bytes counted by `hold` were sent (or dropped with their call)."""
        if size:
            self.unsent -= size
            left = self._unsent_by_peer.pop(peer) - size
            if left:
                self._unsent_by_peer[peer] = left

    def unsent_refusal(self, peer: str, adding: int = 0) -> str | None:
        """Why work that adds `adding` bytes of responses (0: a call about to start) is refused on
        `peer`'s connection, or None: while this connection holds more than `max_unsent`, or all
        of them more than `UNSENT_TOTAL_FACTOR` times it. A response alone is never refused (one
        larger than the bound could never be sent), so the held total stays within the bound or
        within one response."""
        if not self.max_unsent:
            return None
        mine = self._unsent_by_peer.get(peer, 0) if self._unsent_by_peer else 0
        if mine and mine + adding > self.max_unsent:
            return (f"server busy: {mine >> 20} MB of responses on this connection wait for the client to read "
                    f"them (--max-unsent-mb {self.max_unsent >> 20}); read them or retry later")
        if self.unsent and self.unsent + adding > UNSENT_TOTAL_FACTOR * self.max_unsent:
            return (f"server busy: {self.unsent >> 20} MB of responses wait for their clients to read them "
                    f"({UNSENT_TOTAL_FACTOR} x --max-unsent-mb {self.max_unsent >> 20}); retry later")
        return None

    def check_unsent(self, context: grpc.aio.ServicerContext) -> None:
        """RESOURCE_EXHAUSTED naming the flag while responses past the bound wait for this
        connection's client (or for all clients, past the total bound) to read them."""
        if self.max_unsent:
            refusal = self.unsent_refusal(context.peer())
            if refusal is not None:
                raise ResourceExhausted(refusal)

    def check_response(self, rpc: str, size: int) -> None:
        """RESOURCE_EXHAUSTED naming `--max-message-mb` and both sizes when a unary response of
        `size` bytes is more than gRPC will send (the wording of Multiplex's per-call check)."""
        if self.max_response and size > self.max_response:
            hint = " (fewer texts, no offsets or token strings)" if rpc in _TOKENIZER_RPCS else ""
            raise ResourceExhausted(
                f"{rpc}: the response is {size} bytes, over the server's message limit of {self.max_response} "
                f"bytes (--max-message-mb); ask for less{hint}")


#: The unary RPCs whose responses grow with the texts and what is asked of each.
_TOKENIZER_RPCS = frozenset({"Tokenize", "Detokenize", "Render"})

#: The gate of wrappers built without one (tests, tools): never closes.
_ALWAYS_OPEN = Gate()


def request_id_of(context: grpc.aio.ServicerContext) -> str:
    """The caller's `x-request-id` metadata, or a fresh id when there is none or it is not what
    gRPC lets a metadata value be (printable ASCII): the id is sent back in the trailers, and an
    id with a tab, an escape or a non-ASCII byte (which gRPC takes in) made a finished call fail
    INTERNAL ("Invalid metadata") on the way out, logged and counted as OK."""
    for key, value in context.invocation_metadata() or ():
        if key == "x-request-id" and value:
            text = str(value)[:128]
            if text.isascii() and text.isprintable():
                return text
            break
    return os.urandom(8).hex()


def _failure(rpc: str, **fields: Any) -> tuple[grpc.StatusCode, str]:
    """The status of the exception being handled; a bug is logged with its traceback."""
    exc = sys.exc_info()[1]
    if not is_expected(exc):
        _log.exception("rpc_crashed", rpc=rpc, **fields)
    return status_of(exc)


_Meters = metrics.CallMeters.of


class _Outcome:
    """Starts a call's bookkeeping and records how it ended (metrics, the log line, the span).
    With `bind` the request id and RPC are bound to the log context for the call, so every line
    logged meanwhile (on the loop or a worker) carries them; a handler that logs nothing of its
    own goes without (binding and unbinding cost about 4 us a call)."""

    def __init__(self, rpc: str, meters: _Meters, context: grpc.aio.ServicerContext, gate: Gate,
                 traced: bool = False, stages: bool = False, bind: bool = True) -> None:
        self.rpc = rpc
        self.meters = meters
        self.gate = gate
        self.bound = bind
        self.start = time.perf_counter()
        self.call = Call(rpc, request_id_of(context), context.time_remaining())
        self.trace = (tracing.CallTrace(rpc, context.invocation_metadata(), self.call.request_id, stages)
                      if traced else None)
        if bind:
            structlog.contextvars.bind_contextvars(request_id=self.call.request_id, rpc=rpc)
        meters.inflight += 1
        # In flight until gRPC has sent the answer, not until the handler returns: a drain that
        # stopped the server in between would cancel a response already computed.
        gate.inflight += 1
        context.add_done_callback(gate.call_done)

    def admit(self) -> None:
        """Raises UNAVAILABLE when the server is draining, DEADLINE_EXCEEDED when the deadline passed."""
        if not self.gate.open:
            raise Unavailable(DRAINING)
        self.call.check_deadline()

    def finish(self, failure: tuple[grpc.StatusCode, str] | None, **fields: Any) -> None:
        elapsed = time.perf_counter() - self.start
        self.meters.end(elapsed, failure is None)
        if self.bound:
            structlog.contextvars.unbind_contextvars("request_id", "rpc")
        if failure is None:
            code = "OK"
        else:
            code = failure[0].name
            metrics.REQUESTS.labels(self.rpc, code).inc()
            metrics.ERRORS.labels(self.rpc, code).inc()
            fields["error"] = failure[1]
        if self.trace is not None:
            self.trace.end(failure)
        info_line("rpc", {"rpc": self.rpc, "request_id": self.call.request_id, "code": code,
                          "ms": round(elapsed * 1e3, 3), **fields})


Handler = Callable[[Any, grpc.aio.ServicerContext, Call], Awaitable[Any]]


#: The largest body the decoded-message wrapper parses. It serves the small RPCs (ListModels,
#: ListParsers, KvStatus, ReloadModels: no fields or a few model names) and parses on the event
#: loop, where protobuf holds the GIL for the whole body: 63 MB of unknown fields took 84 ms.
MAX_SMALL_BODY_BYTES = 64 << 10


def decode_request(rpc: str, request_type: Any, body: bytes) -> Any:
    """The request message of a raw body; a body that does not decode is INVALID_ARGUMENT naming the
    message type (and counted in `sidecar_malformed_requests_total`)."""
    try:
        return request_type.FromString(body)
    except DecodeError as e:
        metrics.MALFORMED.labels(rpc).inc()
        name = request_type.DESCRIPTOR.name
        raise InvalidArgument(f"{name}: the request body is not a valid {name} ({e})") from None


def _traced_stage(stage: str, fn: Callable[[Any], Any], arg: Any) -> Any:
    started = time.perf_counter()
    try:
        return fn(arg)
    finally:
        tracing.record_stage(stage, time.perf_counter() - started)


def unary(rpc: str, handler: Handler, request_type: Any = None,
          gate: Gate | None = None) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
    """Wraps a unary handler `(request, context, call) -> response`. With `request_type` (a protobuf
    message class) the wrapped function takes and returns raw bytes: it decodes the body and encodes
    the response itself; without, both pass through unchanged. Tracing is on or off for the wrapper's
    life, as it was when the wrapper was built."""
    meters = _Meters(rpc)
    gate = gate or _ALWAYS_OPEN
    traced = tracing.enabled()

    def decode(body: bytes) -> Any:
        if len(body) > MAX_SMALL_BODY_BYTES:
            name = request_type.DESCRIPTOR.name
            raise ResourceExhausted(f"{name}: a {len(body)}-byte body, more than the {MAX_SMALL_BODY_BYTES} bytes "
                                    f"this RPC's requests may take (a fixed bound: its fields are a few names)")
        return decode_request(rpc, request_type, body)

    def encode(response: Any) -> bytes:
        return response.SerializeToString()

    async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
        outcome = _Outcome(rpc, meters, context, gate, traced, stages=True)
        model = ""
        failure: tuple[grpc.StatusCode, str] | None = None
        try:
            outcome.admit()
            gate.check_unsent(context)
            if request_type is not None:
                request = _traced_stage("decode", decode, request) if traced else decode(request)
            model = quoted(getattr(request, "model", ""), str)  # a client string, cut for the log line
            response = await handler(request, context, outcome.call)
            if request_type is not None:
                response = _traced_stage("encode", encode, response) if traced else encode(response)
            if isinstance(response, bytes):
                gate.check_response(rpc, len(response))
                gate.check_unsent(context)  # again, as `raw_unary` says why
        except Exception:  # noqa: BLE001 - every exception becomes a status
            failure = _failure(rpc, model=model)
        except asyncio.CancelledError:
            outcome.finish(gate.cut_status(), model=model)
            raise
        context.set_trailing_metadata((("x-request-id", outcome.call.request_id),))
        outcome.finish(failure, model=model)
        if failure is None:
            if isinstance(response, bytes):
                gate.hold_response(context, len(response))
            return response
        await context.abort(*failure)

    return wrapped


RawHandler = Callable[[bytes, grpc.aio.ServicerContext, Call], Awaitable[bytes]]


def raw_unary(rpc: str, handler: RawHandler,
              gate: Gate | None = None) -> Callable[[bytes, grpc.aio.ServicerContext], Awaitable[bytes]]:
    """Wraps a unary handler `(body, context, call) -> response bytes` that reads the raw request
    and writes the raw response itself (the native core does both, GIL released): the same
    bookkeeping as `unary` (the handler sets `call.model` for the log line, and counts a body that
    does not decode in `sidecar_malformed_requests_total`), without binding the log context: such a
    handler logs nothing of its own, and a crash's line names the request id itself. Traced, the
    call's stages are the ones its handler's work reports (`queue`, `native`, and `decode` on a
    Python path), all off the loop when the call is large."""
    meters = _Meters(rpc)
    gate = gate or _ALWAYS_OPEN
    traced = tracing.enabled()

    async def wrapped(body: bytes, context: grpc.aio.ServicerContext) -> bytes:
        outcome = _Outcome(rpc, meters, context, gate, traced, stages=True, bind=False)
        call = outcome.call
        failure: tuple[grpc.StatusCode, str] | None = None
        try:
            outcome.admit()
            gate.check_unsent(context)
            response = await handler(body, context, call)
            gate.check_response(rpc, len(response))
            # Again once the response exists: calls admitted together each passed the first check
            # and would all be held (the bound overshot by as many responses as calls ran at once);
            # now a connection holds what sequential calls would, the bound plus one response.
            gate.check_unsent(context)
        except Exception:  # noqa: BLE001 - every exception becomes a status
            failure = _failure(rpc, request_id=call.request_id, model=call.model)
        except asyncio.CancelledError:
            outcome.finish(gate.cut_status(), model=call.model)
            raise
        context.set_trailing_metadata((("x-request-id", call.request_id),))
        outcome.finish(failure, model=call.model)
        if failure is None:
            gate.hold_response(context, len(response))
            return response
        await context.abort(*failure)

    return wrapped


StreamHandler = Callable[[AsyncIterator[Any], grpc.aio.ServicerContext, Call, StreamCounts], AsyncIterator[Any]]

#: How long a stream whose requests ended waits before it ends OK. gRPC ends the request iterator
#: the same way when the client half-closes and when the call is gone (the client cancelled, its
#: connection dropped, gRPC refused a message over --max-message-mb); in the second case it cancels
#: the handler's task once its poller reports the call closed: 0.04-0.08 ms later, measured. Without
#: the wait such streams were logged and counted OK.
CALL_GONE_WAIT_S = 0.005


def stream(rpc: str, handler: StreamHandler,
           gate: Gate | None = None) -> Callable[[AsyncIterator[Any], grpc.aio.ServicerContext], AsyncIterator[Any]]:
    """Wraps a bidirectional handler `(requests, context, call, counts) -> async iterator of answers`.
    The call's status is the handler's: OK when it ends, the mapped status of what it raises. Each
    answer counts as unsent (`call.unsent`) until gRPC has written it."""
    meters = _Meters(rpc)
    gate = gate or _ALWAYS_OPEN
    traced = tracing.enabled()

    async def wrapped(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        # One span for the whole stream; its messages do not become child spans.
        outcome = _Outcome(rpc, meters, context, gate, traced, stages=False)
        counts = StreamCounts()
        unsent = outcome.call.unsent = StreamUnsent(gate, context.peer() if gate.max_unsent else "")
        context.set_trailing_metadata((("x-request-id", outcome.call.request_id),))
        failure: tuple[grpc.StatusCode, str] | None = None
        try:
            outcome.admit()
            async with aclosing(handler(requests, context, outcome.call, counts)) as answers:
                async for answer in answers:
                    counts.messages += 1
                    size = len(answer)
                    unsent.hold(size)
                    yield answer  # returns once gRPC has written it
                    unsent.release(size)
            if not gate.stopped:
                await asyncio.sleep(CALL_GONE_WAIT_S)  # a call gone: cancelled meanwhile (see above)
        except Exception:  # noqa: BLE001 - every exception becomes a status
            failure = _failure(rpc, messages=counts.messages)
        except (asyncio.CancelledError, GeneratorExit):
            # The client went away mid-stream (or the server stopped): recorded, then the
            # cancellation goes on.
            cut = gate.cut if gate.stopped else STREAM_GONE
            outcome.finish(cut, messages=counts.messages, opened=counts.opened, errors=counts.errors)
            raise
        finally:
            unsent.release_all()
        if failure is None and gate.stopped:
            # The requests ended because gRPC cancelled the call, not because the client half-closed:
            # no status can be sent any more.
            outcome.finish(gate.cut, messages=counts.messages, opened=counts.opened, errors=counts.errors)
            return
        outcome.finish(failure, messages=counts.messages, opened=counts.opened, errors=counts.errors)
        if failure is not None:
            await context.abort(*failure)

    return wrapped
