"""Router adapter benchmarks: block hashing (native against vLLM's Python way), KV-event ingestion,
and Score latency on a large index.

- Hashing: a 32k-token prompt at block size 16, every algorithm. The Python column is
  router_adapter's reference, which does per block what the engines' Python does (vLLM:
  `pickle.dumps` / `cbor2.dumps(canonical=True)` of `(parent, tuple(tokens), extra)` then
  `hashlib.sha256` / `xxhash.xxh3_128_digest`; SGLang and Dynamo: hashlib / xxhash over packed u32).
- Ingestion: msgpack batches as vLLM publishes them, decoded and applied to the index (content
  mode: content keys recomputed from the events' token ids; engine mode: engine hashes as keys).
- Score: 16 workers holding one million blocks in total, a 32k-token prompt (request hashing
  included), latency percentiles over repeated calls.
"""

from __future__ import annotations

import gc
import os
import random
import time
from array import array

import msgspec

from bench.common import Section, Stats, fmt_time, measure
from router_adapter import _reference
from router_adapter.events import decode_batch
from router_adapter.index import PrefixIndex
from router_adapter.spec import ALGORITHMS, HashSpec
from sidecar.factory import get_hasher

BS = 16
PROMPT = 32 * 1024


def _tokens(n: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(0, 151_000) for _ in range(n)]


def hashing_section(quick: bool) -> Section:
    section = Section(
        f"Block hashing: {PROMPT} tokens, block size {BS} ({PROMPT // BS} blocks)",
        ["algorithm", "native (uint32 array)", "native (Python list)", "Python", "speedup (array / list)",
         "target (>= 20x)"],
    )
    tokens = _tokens(PROMPT, 1)
    ids = array("I", tokens)
    rounds = 4 if quick else 30
    native = get_hasher("native")
    for algorithm in ALGORITHMS:
        spec = HashSpec(algorithm, BS, seed="0")
        assert native.block_hashes(tokens, spec) == _reference.block_hashes(tokens, spec)
        paths = {
            "array": lambda _: native.block_hashes(ids, spec),
            "list": lambda _: native.block_hashes(tokens, spec),
            "python": lambda _: _reference.block_hashes(tokens, spec),
        }
        # Interleaved rounds (one Python call, then a few native ones) so that a slow patch of a
        # shared machine hits every path alike.
        samples: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(rounds):
            for name, fn in paths.items():
                samples[name] += measure(fn, 1 if name == "python" else 4, warmup=1).samples
        from_array, from_list, python = (Stats(samples[name]) for name in paths)
        ratio_array, ratio_list = python.p50 / from_array.p50, python.p50 / from_list.p50
        verdict = "met" if ratio_array >= 20 else "MISSED"
        section.rows.append([algorithm, fmt_time(from_array.p50), fmt_time(from_list.p50), fmt_time(python.p50),
                             f"{ratio_array:.1f}x / {ratio_list:.1f}x", verdict])
    section.notes += [
        "p50 of one C ABI call from Python on one thread (JSON spec in, result list out), over interleaved rounds; "
        "both paths give identical values (asserted before timing).",
        "The Python-list column adds the list -> uint32 array conversion (about as costly as the cheaper hashes).",
        "The SHA-256 algorithms are bounded by SHA-256 itself (about 110-350 ns per block here, the same "
        "primitive the Python path calls in OpenSSL), and the Python path's pickle/cbor2/xxhash are C too; "
        "ratios move by 2x with the machine's load, since both sides are timed in the same run.",
    ]
    return section


def _store_batches(workers: int, sequences: int, blocks_per_seq: int, seed: int) -> list[tuple[str, bytes]]:
    """vLLM-shaped msgpack batches: one BlockStored per sequence, each with its own engine hashes."""
    rng = random.Random(seed)
    out = []
    h = rng.getrandbits(62)
    for s in range(sequences):
        tokens = [rng.randrange(0, 151_000) for _ in range(blocks_per_seq * BS)]
        hashes = list(range(h, h + blocks_per_seq))
        h += blocks_per_seq
        event = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": None, "token_ids": tokens,
                 "block_size": BS, "lora_id": None, "medium": "GPU", "lora_name": None}
        out.append((f"w{s % workers}", msgspec.msgpack.encode([time.time(), [event], 0])))
    return out


def ingestion_section(quick: bool) -> Section:
    section = Section("KV-event ingestion (decode + index)", ["mode", "events", "blocks", "events/s", "blocks/s",
                                                              "target"])
    sequences, blocks_per_seq = (300, 32) if quick else (2000, 64)
    batches = _store_batches(16, sequences, blocks_per_seq, 7)
    total_blocks = sequences * blocks_per_seq
    for mode in ("content", "engine"):
        hasher = get_hasher("native")
        index = (PrefixIndex(BS, hasher=hasher) if mode == "content"
                 else PrefixIndex(engine_spec=HashSpec("vllm_sha256", BS), hasher=hasher))
        start = time.perf_counter()
        for worker, payload in batches:
            index.apply_batch(worker, decode_batch(payload))
        elapsed = time.perf_counter() - start
        assert index.num_blocks == total_blocks
        rate = total_blocks / elapsed
        section.rows.append([mode, str(sequences), str(total_blocks), f"{sequences / elapsed:,.0f}", f"{rate:,.0f}",
                             "met (> 100k blocks/s)" if rate > 100_000 else "MISSED (> 100k blocks/s)"])
    section.notes.append(f"one BlockStored of {blocks_per_seq} blocks per batch (a prefill); 16 workers; "
                         "single thread; msgpack decoding included.")
    return section


def score_section(quick: bool) -> Section:
    total = 100_000 if quick else 1_000_000
    workers = 16
    section = Section(f"Score latency: {PROMPT}-token prompt, {workers} workers, {total:,} indexed blocks",
                      ["mode", "min", "p50", "p99", "p99 thread CPU time", "target"])
    prompt = _tokens(PROMPT, 3)
    prompt_blocks = PROMPT // BS
    rng = random.Random(11)
    for mode in ("content", "engine"):
        spec = HashSpec("vllm_sha256_cbor", BS, seed="0")
        hasher = get_hasher("native")
        index = PrefixIndex(BS, hasher=hasher) if mode == "content" else PrefixIndex(engine_spec=spec, hasher=hasher)
        engine_prompt = hasher.block_hashes(prompt, spec) if mode == "engine" else None
        # Every worker holds a prefix of the prompt of a different depth, plus unrelated sequences up
        # to its share of the total.
        per_worker = total // workers
        for w in range(workers):
            depth = (w + 1) * prompt_blocks // workers
            hashes = engine_prompt[:depth] if engine_prompt else list(range(10**12 * (w + 1), 10**12 * (w + 1) + depth))
            index.apply(f"w{w}", _stored(hashes, prompt[: depth * BS]))
            held = depth
            while held < per_worker:
                n = min(512, per_worker - held)
                tokens = [rng.randrange(0, 151_000) for _ in range(n * BS)] if mode == "content" else []
                base = rng.getrandbits(63)
                index.apply(f"w{w}", _stored(list(range(base, base + n)), tokens))
                held += n
        assert index.num_blocks == per_worker * workers
        first = index.score(prompt)
        assert first.workers[0].blocks == prompt_blocks, first.workers[0]
        stats = measure(lambda _: index.score(prompt), 50 if quick else 1000, warmup=5)
        cpu = _thread_cpu_p99(lambda: index.score(prompt), 50 if quick else 1000)
        section.rows.append([mode, fmt_time(min(stats.samples)), fmt_time(stats.p50), fmt_time(stats.p99), fmt_time(cpu),
                             "met (p99 < 5 ms)" if stats.p99 < 5e-3 else "MISSED (p99 < 5 ms)"])
    section.notes.append(f"{50 if quick else 1000} library calls (`PrefixIndex.score`) per mode, request hashing "
                         "included; content mode hashes the prompt with the index's XXH3 keys, engine mode with "
                         "vllm_sha256_cbor.")
    jitter = measure(lambda _: _fixed_work(), 50 if quick else 1000, warmup=5)
    section.notes.append(f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs. The "
                         "machine's own jitter, for comparison: a fixed pure-Python loop timed the same way has "
                         f"p50 {fmt_time(jitter.p50)} and p99 {fmt_time(jitter.p99)} in this run.")
    return section


def _fixed_work() -> int:
    """The same CPU work every call (about a millisecond): any spread in its timings is the machine's."""
    total = 0
    for i in range(20_000):
        total += i * i
    return total


def _thread_cpu_p99(fn, iterations: int) -> float:  # noqa: ANN001
    """p99 of the CPU time the calling thread spends per call (excludes time preempted)."""
    gc.collect()
    samples = []
    for _ in range(iterations):
        start = time.thread_time()
        fn()
        samples.append(time.thread_time() - start)
    samples.sort()
    return samples[min(len(samples) - 1, int(0.99 * len(samples)))]


def _stored(hashes: list[int], tokens: list[int]):  # noqa: ANN202
    from router_adapter.events import BlockStored

    return BlockStored(hashes, None, tokens, BS)


def run(quick: bool) -> list[Section]:
    return [hashing_section(quick), ingestion_section(quick), score_section(quick)]
