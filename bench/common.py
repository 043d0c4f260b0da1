"""Timing helpers and the result table every benchmark section writes."""

from __future__ import annotations

import gc
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Stats:
    """Latency statistics of repeated calls, in seconds."""

    samples: list[float]

    @property
    def p50(self) -> float:
        return statistics.median(self.samples)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples)

    def percentile(self, q: float) -> float:
        s = sorted(self.samples)
        return s[min(len(s) - 1, int(q * len(s)))]

    @property
    def p99(self) -> float:
        return self.percentile(0.99)


def measure(fn: Callable[[int], object], iterations: int, warmup: int = 3, min_seconds: float = 0.0) -> Stats:
    """Calls `fn(i)` with distinct i; keeps going until both `iterations` and `min_seconds` are met."""
    for i in range(warmup):
        fn(-1 - i)
    # Start clean: otherwise a full collection of garbage left by an earlier section (transformers,
    # big corpora) can land inside this one's samples and be charged to the path under test.
    gc.collect()
    samples = []
    started = time.perf_counter()
    i = 0
    while i < iterations or time.perf_counter() - started < min_seconds:
        t = time.perf_counter()
        fn(i)
        samples.append(time.perf_counter() - t)
        i += 1
    return Stats(samples)


def fmt_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


@dataclass
class Section:
    """One table of results."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        lines = [f"### {self.title}", "", "| " + " | ".join(self.columns) + " |", "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        if self.notes:
            lines += [""] + [f"- {n}" for n in self.notes]
        return "\n".join(lines) + "\n"
