"""What every servicer shares: the registry, the settings, the block hasher and the native worker pool.

CPU-heavy work never runs on the event loop: a call whose input is larger than `inline_bytes` goes to
a bounded thread pool (cffi releases the GIL during native calls, so the pool runs truly in parallel),
and the loop stays free for small requests and health checks. When more than `max_queue` calls are
waiting, new ones fail fast with RESOURCE_EXHAUSTED instead of queueing without bound.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, TypeVar

from router_adapter.hashing import BlockHasher
from sidecar import metrics
from sidecar.config import ServerConfig
from sidecar.errors import ResourceExhausted
from sidecar.registry import ModelRegistry

T = TypeVar("T")


@functools.cache
def _stage(rpc: str, stage: str):  # noqa: ANN202 - has .observe(seconds)
    # Resolving label children costs microseconds per call; there are only a handful of pairs.
    return metrics.stage_meter(rpc, stage)


class Offloader:
    """Runs native calls inline when small, on a bounded pool when large."""

    def __init__(self, workers: int, max_queue: int, inline_bytes: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="native")
        self._max_queue = max_queue
        self._inline_bytes = inline_bytes
        self._pending = 0  # only touched on the event loop thread

    async def run(self, fn: Callable[[], T], cost_bytes: int, rpc: str) -> T:
        if cost_bytes <= self._inline_bytes:
            start = time.perf_counter()
            result = fn()
            _stage(rpc, "native").observe(time.perf_counter() - start)
            return result
        if self._pending >= self._max_queue:
            raise ResourceExhausted(
                f"server busy: {self._pending} large requests already queued for the native pool; retry later"
            )
        self._pending += 1
        metrics.NATIVE_QUEUE.set(self._pending)
        queued = time.perf_counter()

        def timed() -> T:
            started = time.perf_counter()
            _stage(rpc, "queue").observe(started - queued)
            try:
                return fn()
            finally:
                _stage(rpc, "native").observe(time.perf_counter() - started)

        try:
            # In the caller's context: the worker's log lines carry the request id, its stages join the
            # call's trace.
            return await asyncio.get_running_loop().run_in_executor(self._pool, contextvars.copy_context().run, timed)
        finally:
            self._pending -= 1
            metrics.NATIVE_QUEUE.set(self._pending)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


@dataclass
class Runtime:
    """Shared state handed to every servicer."""

    config: ServerConfig
    registry: ModelRegistry
    offloader: Offloader
    #: Block hashes for Tokenize, Render and the KV router (chosen with the backend by `sidecar.factory`).
    hasher: BlockHasher
