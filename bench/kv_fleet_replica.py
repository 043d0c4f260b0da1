"""One replica of the fleet benchmark (bench/kv_fleet.py) as a process of its own, so its RSS is its
own: a `KvRouter` fed by `NatsFeed`, with the index the server would run. Talks JSON lines: events on
stdout (`live` when caught up), commands on stdin (`record`, `report`, `snapshot`, `quit`)."""

from __future__ import annotations

import argparse
import json
import logging
import random
import struct
import sys
import threading
import time

import msgspec

from router_adapter import KvRouter, ModelOptions
from router_adapter.nats_feed import LIVE, FeedOptions, NatsFeed


def rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def engine_ts(payload: bytes) -> float:
    """The engine's timestamp of a batch (`[ts, events, dp_rank]`, ts a msgpack float64) without
    decoding the events: the replica under test must not decode them in Python."""
    if payload[:2] == b"\x93\xcb":
        return struct.unpack_from(">d", payload, 2)[0]
    return float(msgspec.msgpack.decode(payload)[0])


def say(**event: object) -> None:
    print(json.dumps(event), flush=True)


def index_factory_and_hasher():  # noqa: ANN201
    """What `sidecar serve` runs: the native index when this build has one, the native hasher."""
    from sidecar import factory

    hasher = factory.get_hasher("native")
    get_index_factory = getattr(factory, "get_index_factory", None)
    if get_index_factory is None:
        return None, hasher
    return get_index_factory("native"), hasher


class Replica:
    def __init__(self, url: str, model: str, block_size: int, requests: list[list[int]]) -> None:
        index_factory, hasher = index_factory_and_hasher()
        extra = {"index_factory": index_factory} if index_factory is not None else {}
        self.model = model
        self.router = KvRouter([], models={model: ModelOptions(block_size=block_size)}, hasher=hasher,
                               max_blocks=8_000_000, **extra)
        self.feed = NatsFeed(self.router, FeedOptions(url, snapshot_period_s=0, silence_timeout_s=None))
        self.router.attach_feed(self.feed)
        self.index_kind = type(self.router.index(model)).__name__
        self.requests = requests
        self.lags: list[float] = []
        self.score_times: list[float] = []
        self.recording = False
        self._scoring = threading.Event()
        apply = self.router.feed_payloads

        def timed_apply(model_name: str, items: list[tuple[str, bytes]]) -> list:
            refused = apply(model_name, items)
            if self.recording:
                now, skip = time.time(), {i for i, _ in refused}
                self.lags.extend(now - engine_ts(payload) for i, (_, payload) in enumerate(items) if i not in skip)
            return refused

        # The feed applies each run of messages in one call: a message's lag ends when its run is applied.
        self.router.feed_payloads = timed_apply

    def start(self) -> None:
        started = time.monotonic()
        self.router.start()
        while self.feed.state(self.model) != LIVE:
            time.sleep(0.05)
        say(event="live", seconds=time.monotonic() - started, blocks=self.router.index(self.model).num_blocks,
            rss=rss_bytes(), index=self.index_kind, snapshot_loaded=self.feed.models[self.model].snapshot_time is not None)

    def _score_loop(self) -> None:
        rng = random.Random(1)
        while self._scoring.is_set():
            tokens = rng.choice(self.requests)
            t = time.perf_counter()
            self.router.score(self.model, tokens)
            self.score_times.append(time.perf_counter() - t)
            time.sleep(0.002)

    def record(self) -> None:
        self.lags, self.score_times, self.recording = [], [], True
        self._scoring.set()
        threading.Thread(target=self._score_loop, daemon=True).start()

    def report(self) -> None:
        self._scoring.clear()
        self.recording = False
        time.sleep(0.05)
        say(event="report", lags=_pcts(self.lags), scores=_pcts(self.score_times), rss=rss_bytes(),
            blocks=self.router.index(self.model).num_blocks, applied=len(self.lags))

    def snapshot(self) -> None:
        t = time.monotonic()
        self.feed.snapshot_now(self.model, timeout=600)
        say(event="snapshot", seconds=time.monotonic() - t)


def _pcts(values: list[float]) -> dict:
    if not values:
        return {"n": 0}
    s = sorted(values)
    return {"n": len(s), "p50": s[len(s) // 2], "p99": s[min(len(s) - 1, int(0.99 * len(s)))], "max": s[-1]}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nats", required=True)
    parser.add_argument("--model", default="fleet")
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--requests", required=True, help="JSON file: token lists to score")
    args = parser.parse_args()
    # The feed's lines (snapshot loaded, live) with times, in the replica's log file.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    with open(args.requests) as f:
        requests = json.load(f)
    replica = Replica(args.nats, args.model, args.block_size, requests)
    replica.start()
    for line in sys.stdin:
        command = line.strip()
        if command == "record":
            replica.record()
        elif command == "report":
            replica.report()
        elif command == "snapshot":
            replica.snapshot()
        elif command == "quit":
            break
    replica.router.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
