"""Distributed tracing (OpenTelemetry), on only when the server runs with `--otlp-endpoint`.

A unary call becomes one SERVER span that continues the caller's W3C `traceparent` (gRPC metadata),
with a child span per stage (`decode`, `queue`, `native`, `encode`); a ParseStream stream is one span
for its whole life, without per-message children (an engine's stream carries millions of steps).
Spans go to an OTLP/gRPC collector through the SDK's batch processor, off the request path.

Off, nothing here runs per call: the wrappers test a flag captured when they were built, and the
stage meters are the plain Prometheus children (`sidecar.metrics.stage_meter`). The OpenTelemetry
packages are an optional dependency (`pip install 'sidecar[tracing]'`, installed by `make setup`)
imported only by `configure`.
"""

from __future__ import annotations

import threading
import time
from contextvars import ContextVar
from typing import Any

from sidecar.errors import code_number

_tracer: Any = None
_provider: Any = None
_propagator: Any = None
#: OpenTelemetry names resolved once by `configure_with` (the package is imported only when tracing is on).
_otel: Any = None
_error_status: Any = None
#: The unary call whose stages become child spans (copied into worker threads with the context).
_CALL_SPAN: ContextVar[Any] = ContextVar("sidecar_call_span", default=None)

#: Seconds the batch exporter gets to send what is left when the server stops.
_FLUSH_SECONDS = 2.0


def enabled() -> bool:
    return _tracer is not None


def configure(endpoint: str) -> None:
    """Exports spans to the OTLP/gRPC collector at `endpoint` (`http://host:4317`, or `https://` for TLS)."""
    if not endpoint.startswith(("http://", "https://")):
        raise ValueError(f"--otlp-endpoint {endpoint!r}: expected http://HOST:PORT or https://HOST:PORT")
    try:
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        raise ValueError("--otlp-endpoint needs the OpenTelemetry packages: pip install 'sidecar[tracing]'") from None
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=endpoint.startswith("http://"), timeout=5)
    configure_with(BatchSpanProcessor(exporter, schedule_delay_millis=1000))


def configure_with(processor: Any) -> None:
    """Sends spans to an OpenTelemetry span processor (tests use an in-memory one)."""
    global _tracer, _provider, _propagator, _otel, _error_status
    from opentelemetry import trace
    from opentelemetry.trace import StatusCode as SpanStatusCode
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    # Not shut down at interpreter exit by the SDK: `shutdown` does it with a bound (see there).
    _provider = TracerProvider(resource=Resource.create({"service.name": "sidecar"}), shutdown_on_exit=False)
    _provider.add_span_processor(processor)
    _tracer = _provider.get_tracer("sidecar")
    _propagator = TraceContextTextMapPropagator()
    _otel = trace
    _error_status = SpanStatusCode.ERROR


def shutdown() -> None:
    """Flushes and stops the exporter, waiting at most `_FLUSH_SECONDS` (an unreachable collector must
    not hold the process)."""
    global _tracer, _provider
    provider, _tracer, _provider = _provider, None, None
    if provider is not None:
        worker = threading.Thread(target=provider.shutdown, name="otel-shutdown", daemon=True)
        worker.start()
        worker.join(_FLUSH_SECONDS)


class CallTrace:
    """The span of one call, and the context token that makes it its stages' parent."""

    __slots__ = ("span", "_token")

    def __init__(self, rpc: str, metadata: Any, request_id: str, stages: bool) -> None:
        carrier = {key: value for key, value in metadata or () if key in ("traceparent", "tracestate")}
        parent = _propagator.extract(carrier) if carrier else None
        self.span = _tracer.start_span(
            rpc, context=parent, kind=_otel.SpanKind.SERVER,
            attributes={"rpc.system": "grpc", "rpc.method": rpc, "sidecar.request_id": request_id},
        )
        self._token = _CALL_SPAN.set(self.span) if stages else None

    def end(self, failure: tuple[Any, str] | None) -> None:
        """Ends the span with the call's gRPC status: OK, or the failure's (code, message)."""
        self.span.set_attribute("rpc.grpc.status_code", code_number(failure[0]) if failure else 0)
        if failure is not None:
            self.span.set_status(_otel.Status(_error_status, f"{failure[0].name}: {failure[1]}"))
        self.span.end()
        if self._token is not None:
            _CALL_SPAN.reset(self._token)


def record_stage(stage: str, seconds: float) -> None:
    """A child span of the current call for a stage that ended just now and took `seconds`."""
    parent = _CALL_SPAN.get()
    if parent is None or _tracer is None or not parent.is_recording():
        return  # not a traced unary call, or one the sampler dropped
    end = time.time_ns()
    span = _tracer.start_span(stage, context=_otel.set_span_in_context(parent), start_time=end - int(seconds * 1e9))
    span.end(end_time=end)
