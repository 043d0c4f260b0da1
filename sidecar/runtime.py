"""What every servicer shares: the registry, the settings, the block hasher and the native worker pool.

CPU-heavy work never runs on the event loop: a call whose cost (`request_cost`: every byte of
input the call's Python and native work reads, plus a little per item) is above `inline_bytes`
goes to a bounded thread pool (cffi releases the GIL during native calls, so the pool runs truly in
parallel), and the loop stays free for small requests and health checks. Work whose cost is not
bounded by its size at all (a request's own chat template) always goes to the pool.

Admission is by cost: calls above `huge_bytes` run in their own lane of at most half the workers,
so a few huge requests can never occupy every worker and the ordinary large requests queued behind
them still meet their deadlines. When more than `max_queue` calls wait in a lane, new ones fail
fast with RESOURCE_EXHAUSTED instead of queueing without bound. A stream's own messages are exempt
(`bounded=False`): a stream hands the pool one message at a time, and refusing one would end the
stream with every request open on it, so one client's flood of unary calls could end another's
streams.

Every offloaded call gets a `CancelToken` (see `sidecar.cancel`): when the awaiting coroutine is
cancelled (the client went away, the deadline passed) the token is set and the native loops stop
within a bounded unit of work. After a call above `release_bytes` the worker hands the transient
memory back to the system (`release_memory`), so one 50 MB request does not leave the process
gigabytes larger.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, TypeVar

from router_adapter.hashing import BlockHasher
from sidecar import metrics
from sidecar.cancel import CancelToken, bound
from sidecar.config import ServerConfig
from sidecar.errors import ResourceExhausted
from sidecar.registry import ModelRegistry

T = TypeVar("T")

#: What one item of a request (a text, an id sequence, a stop string) costs on top of its bytes:
#: the per-item Python and FFI work (an encode, a buffer, a list entry).
ITEM_COST = 64
#: The cost of work whose size says nothing about its cost (a request's own Jinja template).
UNBOUNDED = sys.maxsize


def request_cost(*sizes: int, items: int = 0) -> int:
    """The offload cost of a call: the bytes it reads (`sizes`) plus `ITEM_COST` per item."""
    return sum(sizes) + ITEM_COST * items


@functools.cache
def _stage(rpc: str, stage: str):  # noqa: ANN202 - has .observe(seconds)
    # Resolving label children costs microseconds per call; there are only a handful of pairs.
    return metrics.stage_meter(rpc, stage)


@functools.cache
def _inline_stage(rpc: str, stage: str):  # noqa: ANN202 - has .observe(seconds)
    # A stage of calls run on the loop: tallied without a lock (see metrics.LoopHistogram).
    return metrics.stage_meter(rpc, stage, loop_only=True)


class _Lane:
    """A thread pool with a bound on the calls waiting for it."""

    def __init__(self, name: str, workers: int, max_queue: int, cpus: frozenset[int] = frozenset()) -> None:
        self.name = name
        # A thread inherits its creator's CPUs: with `--pin-loop-cpu` the loop's, which its workers give back.
        initializer = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=f"native-{name}", initializer=initializer)
        self.max_queue = max_queue
        self.pending = 0  # only touched on the event loop thread


#: glibc `mallopt` parameter for the size from which allocations are their own mappings.
_M_MMAP_THRESHOLD = -3


def fix_malloc_mmap_threshold(threshold: int = 256 << 10) -> bool:
    """Fixes glibc's mmap threshold, so every buffer above it is its own mapping, unmapped on free.

    By default glibc raises the threshold to the size of each large block it frees (up to 32 MB):
    after one big request, the next requests' response bytes and message buffers come from the heap
    and stay resident once freed, on the event loop, after the worker's `release_memory` has run.
    A fixed threshold keeps a 40 MB Tokenize from leaving the process tens of MB larger; the cost is
    a page fault per 4 KiB of a large buffer's first touch. Returns whether it applied (glibc only).
    """
    import ctypes
    import platform

    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        return bool(ctypes.CDLL(None).mallopt(_M_MMAP_THRESHOLD, threshold))
    except (OSError, AttributeError):
        return False


class Offloader:
    """Runs native calls inline when small, in a pool lane by cost when large (see the module docs)."""

    def __init__(
        self, workers: int, max_queue: int, inline_bytes: int, huge_bytes: int = 1 << 20,
        release_bytes: int = 8 << 20, release_memory: Callable[[], None] | None = None,
        worker_cpus: frozenset[int] = frozenset(),
    ) -> None:
        self._inline_bytes = inline_bytes
        self._huge_bytes = max(huge_bytes, inline_bytes)
        self._release_bytes = release_bytes
        self._release_memory = release_memory
        self._large = _Lane("large", workers, max_queue, worker_cpus)
        self._huge = _Lane("huge", max(1, workers // 2), max_queue, worker_cpus)

    @classmethod
    def for_config(cls, config: ServerConfig, release_memory: Callable[[], None] | None = None) -> Offloader:
        return cls(config.workers, config.max_queue, config.inline_bytes, config.huge_bytes,
                   release_memory=release_memory, worker_cpus=config.worker_cpus)

    async def run(self, fn: Callable[[], T], cost_bytes: int, rpc: str, bounded: bool = True,
                  stage: str = "native") -> T:
        """`fn()` inline or on a lane's pool by `cost_bytes`; RESOURCE_EXHAUSTED naming
        `--max-queue` when the lane's queue is full, unless not `bounded` (see the module docs).
        `stage`: what `fn` is, for the stage histogram and span (`decode` where the Python path
        reads a request off the loop)."""
        if cost_bytes <= self._inline_bytes:
            start = time.perf_counter()
            result = fn()
            _inline_stage(rpc, stage).observe(time.perf_counter() - start)
            return result
        lane = self._huge if cost_bytes > self._huge_bytes else self._large
        if bounded and lane.pending >= lane.max_queue:
            raise ResourceExhausted(
                f"server busy: {lane.pending} {lane.name} requests already queued for the native pool "
                f"(--max-queue {lane.max_queue}); retry later"
            )
        lane.pending += 1
        metrics.NATIVE_QUEUE.set(self._large.pending + self._huge.pending)
        token = CancelToken()
        try:
            # In the caller's context: the worker's log lines carry the request id, its stages join the
            # call's trace.
            return await asyncio.get_running_loop().run_in_executor(
                lane.pool, contextvars.copy_context().run, self._in_worker, fn, token, time.perf_counter(),
                cost_bytes, rpc, stage,
            )
        except asyncio.CancelledError:
            # Nobody will read the result: the native loops stop at their next check.
            token.cancel()
            raise
        finally:
            lane.pending -= 1
            metrics.NATIVE_QUEUE.set(self._large.pending + self._huge.pending)

    def _in_worker(self, fn: Callable[[], T], token: CancelToken, queued: float, cost_bytes: int, rpc: str,
                   stage: str) -> T:
        started = time.perf_counter()
        _stage(rpc, "queue").observe(started - queued)
        try:
            with bound(token):
                return fn()
        finally:
            _stage(rpc, stage).observe(time.perf_counter() - started)
            if self._release_memory is not None and cost_bytes >= self._release_bytes:
                self._release_memory()

    def shutdown(self) -> None:
        for lane in (self._large, self._huge):
            lane.pool.shutdown(wait=False, cancel_futures=True)


@dataclass
class Runtime:
    """Shared state handed to every servicer."""

    config: ServerConfig
    registry: ModelRegistry
    offloader: Offloader
    #: Block hashes for Tokenize, Render and the KV router (chosen with the backend by `sidecar.factory`).
    hasher: BlockHasher
