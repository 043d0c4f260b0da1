"""The wrapper every RPC handler runs in: request id, structured log line, metrics, deadline, and the
translation of exceptions into gRPC statuses (the table itself is in `sidecar.errors`).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

import grpc
import structlog

from sidecar import metrics
from sidecar.errors import DeadlineExceeded, SidecarError, status_of
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


def request_id_of(context: grpc.aio.ServicerContext) -> str:
    """The caller's `x-request-id` metadata, or a fresh id."""
    for key, value in context.invocation_metadata() or ():
        if key == "x-request-id" and value:
            return str(value)[:128]
    return os.urandom(8).hex()


Handler = Callable[[Any, grpc.aio.ServicerContext, Call], Awaitable[Any]]


def unary(rpc: str, handler: Handler) -> Callable[[Any, grpc.aio.ServicerContext], Awaitable[Any]]:
    """Wraps a unary handler `(request, context, call) -> response`."""
    requests_ok = metrics.REQUESTS.labels(rpc, "OK")
    latency = metrics.LATENCY.labels(rpc)
    inflight = metrics.INFLIGHT.labels(rpc)

    async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
        start = time.perf_counter()
        call = Call(rpc, request_id_of(context), context.time_remaining())
        structlog.contextvars.bind_contextvars(request_id=call.request_id, rpc=rpc)
        inflight.inc()
        failure: tuple[grpc.StatusCode, str] | None = None
        try:
            call.check_deadline()
            response = await handler(request, context, call)
        except SidecarError as e:
            failure = (e.code, e.message)
        except Exception as e:  # noqa: BLE001 - anything else is a bug, reported as INTERNAL
            failure = status_of(e)
            _log.exception("rpc_crashed", model=getattr(request, "model", ""))
        finally:
            inflight.dec()
            elapsed = time.perf_counter() - start
            latency.observe(elapsed)
            structlog.contextvars.unbind_contextvars("request_id", "rpc")
        context.set_trailing_metadata((("x-request-id", call.request_id),))
        if failure is None:
            requests_ok.inc()
            _log.info("rpc", rpc=rpc, request_id=call.request_id, code="OK", ms=round(elapsed * 1e3, 3),
                      model=getattr(request, "model", ""))
            return response
        code, message = failure
        metrics.REQUESTS.labels(rpc, code.name).inc()
        metrics.ERRORS.labels(rpc, code.name).inc()
        _log.info("rpc", rpc=rpc, request_id=call.request_id, code=code.name, ms=round(elapsed * 1e3, 3),
                  model=getattr(request, "model", ""), error=message)
        await context.abort(code, message)

    return wrapped
