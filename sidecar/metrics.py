"""Prometheus metrics, served over HTTP on `--metrics-port`.

Names follow Prometheus conventions; every RPC reports requests by code, latency, in-flight count,
and per-stage latency (queue wait, native call, response building) so an operator can see where
time goes.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

from sidecar import tracing

# Buckets from 50 us to 10 s: a cached render is tens of microseconds, a 200k-token encode tens of ms.
_LATENCY_BUCKETS = (5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)

REQUESTS = Counter("sidecar_requests_total", "RPCs handled, by RPC and status code", ["rpc", "code"])
ERRORS = Counter("sidecar_errors_total", "RPCs that failed, by RPC and status code", ["rpc", "code"])
LATENCY = Histogram("sidecar_request_seconds", "RPC latency inside the server", ["rpc"], buckets=_LATENCY_BUCKETS)
STAGE_LATENCY = Histogram(
    "sidecar_stage_seconds", "Latency of one stage of an RPC", ["rpc", "stage"], buckets=_LATENCY_BUCKETS
)
MALFORMED = Counter(
    "sidecar_malformed_requests_total", "Requests whose body did not decode as the RPC's message (INVALID_ARGUMENT)", ["rpc"]
)
INFLIGHT = Gauge("sidecar_inflight_requests", "RPCs being handled", ["rpc"])
NATIVE_QUEUE = Gauge("sidecar_native_queue_depth", "Calls waiting for or running on the native worker pool")
MODELS = Gauge("sidecar_models_loaded", "Models this server hosts")
RENDER_CACHE_SEGMENTS = Counter(
    "sidecar_render_cache_segments_total", "Prompt segments whose ids came from the multi-turn cache (hit) or were tokenized (miss)", ["result"]
)
RENDER_CACHE_BYTES = Counter(
    "sidecar_render_cache_bytes_total", "Prompt bytes in segments served from the multi-turn cache (hit) or tokenized (miss)", ["result"]
)


MULTIPLEXED = Counter(
    "sidecar_multiplexed_requests_total", "Requests carried by Multiplex streams, by kind and status code", ["kind", "code"]
)
MODEL_RELOADS = Counter("sidecar_model_reloads_total", "Model reloads, by model and result", ["model", "result"])


class _TracedStage:
    """A stage histogram that also records the stage as a child span of the current call."""

    __slots__ = ("_histogram", "_stage")

    def __init__(self, histogram, stage: str) -> None:  # noqa: ANN001 - a prometheus child metric
        self._histogram = histogram
        self._stage = stage

    def observe(self, seconds: float) -> None:
        self._histogram.observe(seconds)
        tracing.record_stage(self._stage, seconds)


def stage_meter(rpc: str, stage: str):  # noqa: ANN201 - has .observe(seconds)
    """The meter of one stage of an RPC: its histogram child, which also makes a child span of the
    call when tracing is on (resolve it once per (rpc, stage): `labels()` costs microseconds)."""
    histogram = STAGE_LATENCY.labels(rpc, stage)
    return _TracedStage(histogram, stage) if tracing.enabled() else histogram


def serve_http(port: int, host: str = "127.0.0.1") -> tuple[str, int]:
    """Starts the /metrics endpoint on `host` (loopback unless told otherwise); returns the bound
    address (the port is useful with port 0)."""
    server, _thread = start_http_server(port, addr=host)
    bound_host, bound_port = server.server_address[:2]
    return str(bound_host), int(bound_port)
