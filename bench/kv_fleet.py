"""Fleet simulation of KV fan-out on loopback: a real nats-server, 200 simulated engines, 2 replicas.

The engines are 200 subjects published in the relay's exact format (headers, message ids, msgpack
batches as vLLM publishes them) by one loader: 200 relay processes and their ZMQ sockets would not fit
a 2-core machine beside the replicas, and a relay's own cost is per engine (it scales out with them).
Measured:
- catch-up from the stream alone: 2 replica processes start on a stream holding 4M (worker, block)
  entries (200 x 20k blocks) and read it all;
- a steady phase: every engine publishes batches (8 blocks stored, 8 removed: the entry count stays)
  at a fixed total rate for some seconds, while each replica scores requests in a loop:
  ingestion lag (engine timestamp at publish -> applied, on every replica), Score latency while
  ingesting, RSS per replica;
- catch-up of a fresh replica from a snapshot plus the stream after it.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgspec

from bench.common import Section, fmt_time
from router_adapter import fanout

REPO = Path(__file__).resolve().parent.parent
MODEL = "fleet"
BS = 16
DOC_BLOCKS = 128


def doc_tokens(doc: int) -> list[int]:
    x = doc * 2654435761 % (1 << 32)
    out = []
    for _ in range(DOC_BLOCKS * BS):
        x = (x * 1103515245 + 12345) % (1 << 31)
        out.append(x % 150_000)
    return out


def block_hash(doc: int, block: int) -> int:
    return (doc * 1_000_003 + block) * 0x9E3779B97F4A7C15 % (1 << 64)


def stored(doc: int, start: int, count: int, tokens: list[int]) -> dict:
    return {"type": "BlockStored", "block_hashes": [block_hash(doc, b) for b in range(start, start + count)],
            "parent_block_hash": block_hash(doc, start - 1) if start else None,
            "token_ids": tokens[start * BS:(start + count) * BS], "block_size": BS, "lora_id": None,
            "medium": "GPU", "lora_name": None}


class Loader:
    """Publishes as 200 relays would."""

    def __init__(self, js, engines: int) -> None:  # noqa: ANN001
        self.js = js
        self.engines = engines
        self.seq = [0] * engines
        self.epoch = fanout.next_epoch(None)
        self.docs: dict[int, list[int]] = {}
        #: per worker: (doc, block) stored, oldest first
        self.held: list[list[tuple[int, int]]] = [[] for _ in range(engines)]

    def tokens(self, doc: int) -> list[int]:
        if doc not in self.docs:
            self.docs[doc] = doc_tokens(doc)
        return self.docs[doc]

    async def publish(self, worker: int, events: list) -> None:
        name = f"w{worker:03d}"
        seq = self.seq[worker]
        self.seq[worker] += 1
        payload = msgspec.msgpack.encode([time.time(), events, 0])
        await self.js.publish(fanout.subject(fanout.DEFAULT_PREFIX, MODEL, name), payload,
                              headers=fanout.batch_headers(name, self.epoch, seq))

    async def preload(self, blocks_per_engine: int, shared_docs: int) -> int:
        """Each engine stores whole documents (128 blocks, 64 per batch) from a shared pool."""
        pending = []
        messages = 0
        for worker in range(self.engines):
            for k in range(blocks_per_engine // DOC_BLOCKS):
                doc = (worker * 7 + k * 13) % shared_docs
                tokens = self.tokens(doc)
                for start in range(0, DOC_BLOCKS, 64):
                    pending.append(self.publish(worker, [stored(doc, start, 64, tokens)]))
                    self.held[worker] += [(doc, b) for b in range(start, start + 64)]
                    messages += 1
                if len(pending) >= 256:
                    await asyncio.gather(*pending)
                    pending = []
        await asyncio.gather(*pending)
        return messages

    async def steady(self, rate: float, seconds: float, rng: random.Random, fresh_doc: int) -> int:
        """`rate` batches per second over all engines, each storing 8 new blocks and removing 8 old ones."""
        sent = 0
        started = time.monotonic()
        doc = fresh_doc
        while time.monotonic() - started < seconds:
            due = int((time.monotonic() - started) * rate) - sent
            tasks = []
            for _ in range(due):
                worker = rng.randrange(self.engines)
                held = self.held[worker]
                old, self.held[worker] = held[:8], held[8:]
                by_doc = [block_hash(d, b) for d, b in old]
                start = (sent * 8) % DOC_BLOCKS
                if start == 0:
                    doc += 1
                self.held[worker] += [(doc, b) for b in range(start, start + 8)]
                events = [{"type": "BlockRemoved", "block_hashes": by_doc, "medium": "GPU"},
                          stored(doc, start, 8, self.tokens(doc))]
                tasks.append(self.publish(worker, events))
                sent += 1
            if tasks:
                await asyncio.gather(*tasks)
            await asyncio.sleep(0.005)
        return sent


class ReplicaProcess:
    def __init__(self, url: str, requests_file: Path, log: Path) -> None:
        self.log = open(log, "w")  # noqa: SIM115 - the process's stderr for its lifetime
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.kv_fleet_replica", "--nats", url, "--model", MODEL,
             "--requests", str(requests_file)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, cwd=REPO, text=True,
        )

    def wait_event(self, name: str, timeout: float = 900.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"replica exited; see {self.log.name}")
            event = json.loads(line)
            if event.get("event") == name:
                return event
        raise TimeoutError(name)

    def send(self, command: str) -> None:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    def close(self) -> None:
        try:
            self.send("quit")
            self.process.wait(30)
        except Exception:  # noqa: BLE001
            self.process.kill()
        self.log.close()


def run(quick: bool) -> list[Section]:
    from tests.kv.nats_server import NatsServer

    load_before = os.getloadavg()[0]
    engines = 200
    blocks_per_engine = 2_560 if quick else 20_480
    rate, seconds = (200.0, 5.0) if quick else (250.0, 15.0)
    tmp = Path(tempfile.mkdtemp(prefix="kv-fleet-"))
    nats = NatsServer(tmp / "jetstream", tmp / "nats.log")
    nats.start()
    rng = random.Random(7)
    requests = [doc_tokens(rng.randrange(1000)) + [rng.randrange(150_000) for _ in range(2048)] for _ in range(64)]
    (tmp / "requests.json").write_text(json.dumps(requests))
    replicas: list[ReplicaProcess] = []
    try:
        import nats as nats_client

        async def connect():  # noqa: ANN202
            nc = await nats_client.connect(nats.url)
            js = nc.jetstream(timeout=30)
            await fanout.ensure_stream(js, fanout.DEFAULT_STREAM, fanout.DEFAULT_PREFIX, fanout.DEFAULT_RETENTION_S)
            return nc, js

        loop = asyncio.new_event_loop()
        nc, js = loop.run_until_complete(connect())
        loader = Loader(js, engines)
        t = time.monotonic()
        messages = loop.run_until_complete(loader.preload(blocks_per_engine, 1000))
        preload_s = time.monotonic() - t
        entries = engines * (blocks_per_engine // DOC_BLOCKS) * DOC_BLOCKS

        replicas = [ReplicaProcess(nats.url, tmp / "requests.json", tmp / f"replica{i}.log") for i in range(2)]
        live = [r.wait_event("live") for r in replicas]
        for r in replicas:
            r.send("record")
        sent = loop.run_until_complete(loader.steady(rate, seconds, rng, 10_000))
        time.sleep(2.0)  # the last batches reach both replicas
        reports = []
        for r in replicas:
            r.send("report")
            reports.append(r.wait_event("report"))
        replicas[0].send("snapshot")
        snap = replicas[0].wait_event("snapshot")
        loop.run_until_complete(loader.steady(rate, 2.0, rng, 20_000))  # a tail after the snapshot
        fresh = ReplicaProcess(nats.url, tmp / "requests.json", tmp / "replica-fresh.log")
        replicas.append(fresh)
        fresh_live = fresh.wait_event("live")
        loop.run_until_complete(nc.close())
        loop.close()
    finally:
        for r in replicas:
            r.close()
        nats.stop()
        shutil.rmtree(tmp / "jetstream", ignore_errors=True)  # ~400 MB; the replicas' logs stay

    index = live[0]["index"]
    section = Section(
        f"KV fan-out over NATS JetStream: {engines} engines, {entries / 1e6:.1f}M entries, 2 replicas ({index})",
        ["measure", "value"],
    )
    worst_lag = max(rep["lags"].get("p99", 0.0) for rep in reports)
    section.rows += [
        ["preload published (loader, pipelined)", f"{messages:,} messages in {preload_s:.1f} s"],
        ["catch-up from the stream alone (2 replicas at once)",
         " / ".join(f"{e['seconds']:.1f} s" for e in live) + f" ({entries / max(e['seconds'] for e in live) / 1e3:.0f}k entries/s each)"],
        ["steady rate", f"{rate:.0f} batches/s ({rate * 16:.0f} block events/s), {seconds:.0f} s, {sent:,} batches"],
        ["ingestion lag p50 / p99 (publish -> applied, every replica)",
         " ; ".join(f"{fmt_time(rep['lags']['p50'])} / {fmt_time(rep['lags']['p99'])}" for rep in reports)],
        ["Score p50 / p99 while ingesting (4096-token requests)",
         " ; ".join(f"{fmt_time(rep['scores']['p50'])} / {fmt_time(rep['scores']['p99'])}" for rep in reports)],
        ["RSS per replica", " ; ".join(f"{rep['rss'] / 2**20:.0f} MiB ({rep['rss'] / max(rep['blocks'], 1):.0f} B/entry)"
                                       for rep in reports)],
        ["snapshot written (replica 1)", f"{snap['seconds']:.1f} s"],
        ["catch-up of a fresh replica (snapshot + 2 s tail)",
         f"{fresh_live['seconds']:.1f} s (snapshot loaded: {fresh_live['snapshot_loaded']})"],
    ]
    section.notes += [
        "engines simulated by one loader publishing the relay's exact messages (see bench/kv_fleet.py); "
        "replicas are separate processes running KvRouter + NatsFeed with the index the server runs",
        f"worst replica ingestion lag p99: {fmt_time(worst_lag)}; Score runs on a thread beside the feed "
        "in the same process (they share the GIL, as in the server)",
        f"machine load average (1 min) at start / end: {load_before:.1f} / {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} CPUs (the loader, nats-server and 3 replicas share them with whatever else runs)",
    ]
    return [section]
