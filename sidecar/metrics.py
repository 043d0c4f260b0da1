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
        #: Key (an RPC, an (RPC, stage) pair) -> its tallies, made once and then shared.
        self.tallies: dict[object, CallMeters | LoopHistogram] = {}
        # Two scrapes at once must not hand the same calls over twice.
        self._lock = threading.Lock()

    def describe(self) -> list:
        return []

    def collect(self) -> list:
        with self._lock:
            for tally in list(self.tallies.values()):
                tally.flush()
        return []


_FLUSH = _FlushFirst()
REGISTRY.register(_FLUSH)

# Buckets from 50 us to 10 s: a cached render is tens of microseconds, a 200k-token encode tens of ms.
_LATENCY_BUCKETS = (5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0)

REQUESTS = Counter("sidecar_requests_total", "RPCs handled, by RPC and status code", ["rpc", "code"])
ERRORS = Counter("sidecar_errors_total", "RPCs that failed, by RPC and status code", ["rpc", "code"])
LATENCY = Histogram("sidecar_request_seconds", "RPC latency inside the server", ["rpc"], buckets=_LATENCY_BUCKETS)
STAGE_LATENCY = Histogram(
    "sidecar_stage_seconds",
    "Latency of one stage of an RPC (queue: waiting for a worker; native: the work; decode: a request decoded in "
    "Python; message: one client message of a ParseStream or Multiplex stream, from its arrival to its answer "
    "being ready)",
    ["rpc", "stage"], buckets=_LATENCY_BUCKETS
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


class LoopHistogram:
    """Observations of one histogram child counted in plain ints by the event loop thread (the only
    one that may call `observe`) and handed to the child when metrics are collected: a locked
    `observe` of prometheus_client costs 2-3 us, this a fraction of one. `flush` runs under the
    collector's lock and remembers what it has handed over."""

    def __init__(self, child) -> None:  # noqa: ANN001 - a prometheus Histogram child
        self._child = child
        self._bounds = list(child._upper_bounds)
        #: Observations per bucket (not cumulative) and their sum.
        self.counts = [0] * len(self._bounds)
        self.sum = 0.0
        self._counts_flushed = [0] * len(self._bounds)
        self._sum_flushed = 0.0

    @classmethod
    def of(cls, key: object, child) -> LoopHistogram:  # noqa: ANN001
        """The tally of `child` under `key` (made on first use, then shared)."""
        tally = _FLUSH.tallies.get(key)
        if tally is None:
            tally = _FLUSH.tallies[key] = cls(child)
        return tally

    def observe(self, seconds: float) -> None:
        # The first bound at or above the value, as prometheus_client's observe picks it.
        self.counts[bisect.bisect_left(self._bounds, seconds)] += 1
        self.sum += seconds

    def flush(self) -> None:
        for i, count in enumerate(self.counts):
            if count != self._counts_flushed[i]:
                # The child's bucket values (prometheus_client keeps one per bound).
                self._child._buckets[i].inc(count - self._counts_flushed[i])
                self._counts_flushed[i] = count
        total = self.sum
        if total != self._sum_flushed:
            self._child._sum.inc(total - self._sum_flushed)
            self._sum_flushed = total


class CallMeters:
    """One RPC's per-call metrics (in flight, latency, OK count) kept by the event loop thread in
    plain ints and handed to `INFLIGHT`, `LATENCY` and `REQUESTS` when metrics are collected (four
    locked prometheus_client updates cost 6-9 us a call)."""

    @classmethod
    def of(cls, rpc: str) -> CallMeters:
        """The meters of `rpc` (made on first use, then shared by every wrapper of it)."""
        meters = _FLUSH.tallies.get(rpc)
        if meters is None:
            meters = _FLUSH.tallies[rpc] = cls(rpc)
        return meters

    def __init__(self, rpc: str) -> None:
        self._inflight_gauge = INFLIGHT.labels(rpc)
        self._ok_counter = REQUESTS.labels(rpc, "OK")
        self._latency = LoopHistogram(LATENCY.labels(rpc))
        self.inflight = 0
        self.ok = 0
        self._ok_flushed = 0

    def end(self, seconds: float, ok: bool) -> None:
        self.inflight -= 1
        self._latency.observe(seconds)
        if ok:
            self.ok += 1

    def flush(self) -> None:
        self._inflight_gauge.set(self.inflight)
        ok = self.ok
        if ok != self._ok_flushed:
            self._ok_counter.inc(ok - self._ok_flushed)
            self._ok_flushed = ok
        self._latency.flush()


class _TracedStage:
    """A stage histogram that also records the stage as a child span of the current call."""

    __slots__ = ("_histogram", "_stage")

    def __init__(self, histogram, stage: str) -> None:  # noqa: ANN001 - a prometheus child metric
        self._histogram = histogram
        self._stage = stage

    def observe(self, seconds: float) -> None:
        self._histogram.observe(seconds)
        tracing.record_stage(self._stage, seconds)


def stage_meter(rpc: str, stage: str, loop_only: bool = False):  # noqa: ANN201 - has .observe(seconds)
    """The meter of one stage of an RPC: its histogram child, which also makes a child span of the
    call when tracing is on (resolve it once per (rpc, stage): `labels()` costs microseconds).
    `loop_only`: observed only on the event loop thread, so counted in a `LoopHistogram`."""
    histogram = STAGE_LATENCY.labels(rpc, stage)
    if tracing.enabled():
        return _TracedStage(histogram, stage)
    return LoopHistogram.of((rpc, stage), histogram) if loop_only else histogram


def serve_http(port: int, host: str = "127.0.0.1", registry=REGISTRY) -> tuple[str, int]:  # noqa: ANN001
    """Starts the /metrics endpoint of `registry` on `host` (loopback unless told otherwise);
    returns the bound address (the port is useful with port 0)."""
    server, _thread = start_http_server(port, addr=host, registry=registry)
    bound_host, bound_port = server.server_address[:2]
    return str(bound_host), int(bound_port)
