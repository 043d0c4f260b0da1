"""Prometheus metrics, served over HTTP on `--metrics-port`.

Names follow Prometheus conventions; every RPC reports requests by code, latency, in-flight count,
and per-stage latency (queue wait, native call, response building) so an operator can see where
time goes.
"""

from __future__ import annotations

import bisect
import threading

from prometheus_client import REGISTRY, Counter, Gauge, Histogram, start_http_server

from sidecar import tracing


class _FlushFirst:
    """A collector of no metrics, registered before every metric of this module: each scrape (and
    `REGISTRY.get_sample_value`) collects it first, and it hands the per-call tallies kept in plain
    Python ints (`CallMeters`) to their metrics, so a scrape sees every call that ended before it."""

    def __init__(self) -> None:
        #: RPC name -> its meters (one per RPC, shared by every wrapper of it).
        self.meters: dict[str, CallMeters] = {}
        # Two scrapes at once must not hand the same calls over twice.
        self._lock = threading.Lock()

    def describe(self) -> list:
        return []

    def collect(self) -> list:
        with self._lock:
            for meters in list(self.meters.values()):
                meters.flush()
        return []


_FLUSH = _FlushFirst()
REGISTRY.register(_FLUSH)

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


class CallMeters:
    """One RPC's per-call metrics (in flight, latency, OK count), kept as plain ints on the event
    loop and handed to `INFLIGHT`, `LATENCY` and `REQUESTS` when metrics are collected: four
    locked updates of prometheus_client cost 6-9 us a call, these well under one. Only the event
    loop thread calls `start`/`end`; only a collection (under the registry's lock) calls `flush`,
    which reads the tallies and remembers what it has handed over."""

    @classmethod
    def of(cls, rpc: str) -> CallMeters:
        """The meters of `rpc` (made on first use, then shared)."""
        meters = _FLUSH.meters.get(rpc)
        if meters is None:
            meters = _FLUSH.meters[rpc] = cls(rpc)
        return meters

    def __init__(self, rpc: str) -> None:
        self._inflight_gauge = INFLIGHT.labels(rpc)
        self._latency = LATENCY.labels(rpc)
        self._ok_counter = REQUESTS.labels(rpc, "OK")
        self._bounds = list(self._latency._upper_bounds)
        self.inflight = 0
        self.ok = 0
        #: Observations per bucket (not cumulative) and their sum.
        self.counts = [0] * len(self._bounds)
        self.sum = 0.0
        self._ok_flushed = 0
        self._counts_flushed = [0] * len(self._bounds)
        self._sum_flushed = 0.0

    def end(self, seconds: float, ok: bool) -> None:
        self.inflight -= 1
        self.counts[bisect.bisect_left(self._bounds, seconds)] += 1
        self.sum += seconds
        if ok:
            self.ok += 1

    def flush(self) -> None:
        self._inflight_gauge.set(self.inflight)
        ok = self.ok
        if ok != self._ok_flushed:
            self._ok_counter.inc(ok - self._ok_flushed)
            self._ok_flushed = ok
        total = self.sum
        for i, count in enumerate(self.counts):
            if count != self._counts_flushed[i]:
                # The histogram child's bucket values (prometheus_client keeps one per bound).
                self._latency._buckets[i].inc(count - self._counts_flushed[i])
                self._counts_flushed[i] = count
        if total != self._sum_flushed:
            self._latency._sum.inc(total - self._sum_flushed)
            self._sum_flushed = total


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
