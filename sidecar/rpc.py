"""The wrappers every RPC handler runs in, unary and streaming alike: request id (from `x-request-id`
metadata or generated, echoed in trailing metadata), one structured log line per call, metrics
(requests and errors by code, latency, in-flight), the deadline, and the translation of exceptions
into gRPC statuses (the table itself is in `sidecar.errors`). Anything unexpected that escapes a
handler is logged with its traceback and answered INTERNAL.
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

from sidecar import metrics
from sidecar.errors import CANCELLED, DeadlineExceeded, is_expected, status_of
from sidecar.logs import get_logger

_log = get_logger("sidecar.rpc")


@dataclass(frozen=True, slots=True)
class Call:
    """Per-call facts a handler may need."""

    rpc: str
    request_id: str
    #: Seconds left before the client's deadline, or None when it set none.
    timeout_s: float | None

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


def request_id_of(context: grpc.aio.ServicerContext) -> str:
    """The caller's `x-request-id` metadata, or a fresh id."""
    for key, value in context.invocation_metadata() or ():
        if key == "x-request-id" and value:
            return str(value)[:128]
    return os.urandom(8).hex()


def _failure(rpc: str, **fields: Any) -> tuple[grpc.StatusCode, str]:
    """The status of the exception being handled; a bug is logged with its traceback."""
    exc = sys.exc_info()[1]
    if not is_expected(exc):
        _log.exception("rpc_crashed", rpc=rpc, **fields)
    return status_of(exc)


class _Meters:
    """One RPC's metric children, resolved once (a `labels()` lookup costs microseconds per call)."""

    def __init__(self, rpc: str) -> None:
        self.inflight = metrics.INFLIGHT.labels(rpc)
        self.latency = metrics.LATENCY.labels(rpc)
        self.ok = metrics.REQUESTS.labels(rpc, "OK")


class _Outcome:
    """Starts a call's bookkeeping and records how it ended (metrics and the log line)."""

    def __init__(self, rpc: str, meters: _Meters, context: grpc.aio.ServicerContext) -> None:
        self.rpc = rpc
        self.meters = meters
        self.start = time.perf_counter()
        self.call = Call(rpc, request_id_of(context), context.time_remaining())
        structlog.contextvars.bind_contextvars(request_id=self.call.request_id, rpc=rpc)
        meters.inflight.inc()

    def finish(self, failure: tuple[grpc.StatusCode, str] | None, **fields: Any) -> None:
        elapsed = time.perf_counter() - self.start
        self.meters.inflight.dec()
        self.meters.latency.observe(elapsed)
        structlog.contextvars.unbind_contextvars("request_id", "rpc")
        if failure is None:
            code = "OK"
            self.meters.ok.inc()
        else:
            code = failure[0].name
            metrics.REQUESTS.labels(self.rpc, code).inc()
            metrics.ERRORS.labels(self.rpc, code).inc()
            fields["error"] = failure[1]
        _log.info("rpc", rpc=self.rpc, request_id=self.call.request_id, code=code, ms=round(elapsed * 1e3, 3),
                  **fields)


Handler = Callable[[Any, grpc.aio.ServicerContext, Call], Awaitable[Any]]


def unary(rpc: str, handler: Handler) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
    """Wraps a unary handler `(request, context, call) -> response`."""
    meters = _Meters(rpc)

    async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
        outcome = _Outcome(rpc, meters, context)
        model = getattr(request, "model", "")
        failure: tuple[grpc.StatusCode, str] | None = None
        try:
            outcome.call.check_deadline()
            response = await handler(request, context, outcome.call)
        except Exception:  # noqa: BLE001 - every exception becomes a status
            failure = _failure(rpc, model=model)
        except asyncio.CancelledError:
            outcome.finish(CANCELLED, model=model)
            raise
        context.set_trailing_metadata((("x-request-id", outcome.call.request_id),))
        outcome.finish(failure, model=model)
        if failure is None:
            return response
        await context.abort(*failure)

    return wrapped


StreamHandler = Callable[[AsyncIterator[Any], grpc.aio.ServicerContext, Call, StreamCounts], AsyncIterator[Any]]


def stream(rpc: str, handler: StreamHandler) -> Callable[[AsyncIterator[Any], grpc.aio.ServicerContext], AsyncIterator[Any]]:
    """Wraps a bidirectional handler `(requests, context, call, counts) -> async iterator of answers`.
    The call's status is the handler's: OK when it ends, the mapped status of what it raises."""
    meters = _Meters(rpc)

    async def wrapped(requests: AsyncIterator[Any], context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        outcome = _Outcome(rpc, meters, context)
        counts = StreamCounts()
        context.set_trailing_metadata((("x-request-id", outcome.call.request_id),))
        failure: tuple[grpc.StatusCode, str] | None = None
        try:
            outcome.call.check_deadline()
            async with aclosing(handler(requests, context, outcome.call, counts)) as answers:
                async for answer in answers:
                    counts.messages += 1
                    yield answer
        except Exception:  # noqa: BLE001 - every exception becomes a status
            failure = _failure(rpc, messages=counts.messages)
        except (asyncio.CancelledError, GeneratorExit):
            # The client went away mid-stream: recorded, then the cancellation goes on.
            outcome.finish(CANCELLED, messages=counts.messages, opened=counts.opened, errors=counts.errors)
            raise
        outcome.finish(failure, messages=counts.messages, opened=counts.opened, errors=counts.errors)
        if failure is not None:
            await context.abort(*failure)

    return wrapped
