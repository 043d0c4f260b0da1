"""The native index (sidecar.native.kv_index) against the Python index (router_adapter.index),
the differential reference: seeded random operation sequences (stores with parents in spans,
re-stores, removals, clears, worker drops, eviction, LoRA, salts, multimodal items, several
media, skipped block sizes, groups and remote blocks) in content and engine mode, each event
published as raw engine payloads in every encoding (vLLM tagged maps and positional arrays,
SGLang maps, SGLang with EAGLE's bigram token pairs; hashes as unsigned, signed and bytes; now and
then an event of a class the decoders do not know). After every step both indexes must give the
same scores and statistics. Then: payload mutations are refused by both decoders alike, and
snapshots round-trip."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field, replace
from itertools import takewhile
from pathlib import Path

import msgspec
import pytest

from router_adapter import _reference
from router_adapter.errors import InvalidSpec
from router_adapter.events import AllBlocksCleared, Batch, BlockRemoved, BlockStored, DecodeError, decode_batch
from router_adapter.hashing import block_mm_keys
from router_adapter.index import PrefixIndex
from router_adapter.router import KvRouter, ModelOptions
from router_adapter.spec import HashSpec, MmItem
from sidecar.errors import FailedPrecondition, InvalidArgument
from sidecar.factory import get_hasher
from sidecar.native import hashing as native_hashing
from sidecar.native._errors import raise_for_status
from sidecar.native._ffi import ffi, lib
from sidecar.native.kv_index import NativePrefixIndex, _columns, _plain

BS = 4
BLOCKS = 8
WORKERS = ["w0", "w1", "w2", "w3", "w4"]
MEDIA = ["GPU", "CPU", "DISK"]
LORAS = ["", "", "ad1"]
SALTS = ["", "", "t1"]
EVENTS = Path(__file__).resolve().parents[1] / "data" / "kv" / "events"
ENCODINGS = ["vllm-map", "vllm-array", "sglang", "sglang-eagle"]
ENCODE = msgspec.msgpack.encode


@dataclass
class Prompt:
    tokens: list[int]
    mm: tuple[MmItem, ...] = ()


def prompts_for(rng: random.Random, with_mm: bool) -> list[Prompt]:
    """Eight prompts that share prefixes of random lengths (a prefix tree, as real traffic)."""
    base = [rng.randrange(50_000) for _ in range(BLOCKS * BS)]
    out = []
    for _ in range(8):
        shared = rng.choice([0, 1, 2, 4, BLOCKS]) * BS
        tokens = base[:shared] + [rng.randrange(50_000) for _ in range(BLOCKS * BS - shared)]
        mm: tuple[MmItem, ...] = ()
        if with_mm and rng.random() < 0.4:
            # An image (one of three) over a few blocks, and sometimes a second one after it (maybe
            # in the same block, maybe of no length: vLLM's rule keys those too when inside a block).
            mm = (MmItem("img-" + str(rng.randrange(3)), rng.randrange(8), rng.randrange(1, 9)),)
            if rng.random() < 0.3:
                mm += (MmItem("img-" + str(rng.randrange(3)), mm[0].offset + mm[0].length + rng.randrange(5),
                              rng.randrange(6)),)
        out.append(Prompt(tokens, mm))
    return out


def engine_hashes(prompt: Prompt, lora: str, salt: str, seed: str) -> list[int]:
    """What vLLM publishes for the prompt (sha256 chain with LoRA, salt and multimodal items)."""
    spec = HashSpec("vllm_sha256", BS, seed=seed, lora_name=lora, cache_salt=salt, mm_items=prompt.mm)
    return native_hashing.block_hashes(prompt.tokens, spec)


def hash_repr(h: int, kind: str, rng: random.Random) -> int | bytes:
    if kind == "signed":
        return h - (1 << 64) if h >= 1 << 63 else h
    if kind == "bytes":
        return rng.randbytes(rng.choice([0, 8, 24])) + h.to_bytes(8, "big")
    return h


@dataclass
class Stored:
    hashes: list[int]
    parent: int | None
    tokens: list[int]
    block_size: int
    medium: str | None
    lora: str
    salt: str
    #: Each block's multimodal (identifier, offset) keys by vLLM's rule.
    mm_keys: list[list[tuple[str, int]]] = field(default_factory=list)
    group_idx: int | None = None
    locality: str | None = None


@dataclass
class Removed:
    hashes: list[int]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None


class Cleared:
    pass


def extra_keys(ev: Stored, rng: random.Random) -> list | None:
    """vLLM's untagged per-block extra keys (`to_event_extra_keys`): LoRA name, (mm id, offset)
    pairs, the salt on the first block of a sequence."""
    blocks = []
    for i in range(len(ev.hashes)):
        keys: list = [ev.lora] if ev.lora else []
        keys += [list(m) for m in (ev.mm_keys[i] if i < len(ev.mm_keys) else [])]
        if i == 0 and ev.parent is None and ev.salt:
            keys.append(ev.salt)
        blocks.append(keys or None)
    if not any(blocks) and rng.random() < 0.7:
        return None
    return blocks


def wire(ev: object, encoding: str, hashes_as: str, rng: random.Random) -> object:
    """One event as the given engine version encodes it."""
    if isinstance(ev, Cleared):
        return ["AllBlocksCleared"] if encoding == "vllm-array" else {"type": "AllBlocksCleared"}
    if encoding.startswith("sglang"):
        hashes_as = "unsigned" if hashes_as == "bytes" else hashes_as  # SGLang publishes ints
    hashes = [hash_repr(h, hashes_as, rng) for h in ev.hashes]
    if isinstance(ev, Removed):
        fields = [("block_hashes", hashes), ("medium", ev.medium), ("group_idx", ev.group_idx), ("locality", ev.locality)]
        if encoding == "vllm-array":
            return trimmed(["BlockRemoved"] + [v for _, v in fields], 2, rng)
        return {"type": "BlockRemoved", **{k: v for k, v in fields if v is not None or k == "medium"}}
    parent = None if ev.parent is None else hash_repr(ev.parent, hashes_as, rng)
    if encoding.startswith("sglang"):
        # With EAGLE, SGLang publishes each token as the pair [t_i, t_i+1] (the last pair's second
        # element the next page's first token, not in this store).
        tokens = bigram_pairs(ev.tokens, rng) if encoding == "sglang-eagle" else ev.tokens
        return {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": tokens,
                "block_size": ev.block_size, "lora_id": None, "medium": ev.medium or "GPU",
                "cache_salt": ev.salt or None, "session_id": None, "lora_name": ev.lora or None}
    extra = extra_keys(ev, rng)
    if encoding == "vllm-array":
        arr = ["BlockStored", hashes, parent, ev.tokens, ev.block_size, None, ev.medium, ev.lora or None, extra,
               ev.group_idx, None, None, ev.locality]
        return trimmed(arr, 5, rng)
    event = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent, "token_ids": ev.tokens,
             "block_size": ev.block_size, "lora_id": None, "medium": ev.medium, "lora_name": ev.lora or None}
    for key, value in (("extra_keys", extra), ("group_idx", ev.group_idx), ("locality", ev.locality)):
        if value is not None:
            event[key] = value
    if rng.random() < 0.2:
        event["a_field_from_the_future"] = {"nested": [1, b"x", None]}
    if rng.random() < 0.3:
        # The tag may come anywhere in the map.
        event = dict(sorted(event.items(), key=lambda kv: rng.random()))
    return event


def bigram_pairs(tokens: list[int], rng: random.Random) -> list[list[int]]:
    """Tokens as SGLang's bigram pages publish them (`mem_cache/events.py` `record_store`)."""
    following = tokens[1:] + [rng.randrange(1000)] if tokens else []
    return [[t, n] for t, n in zip(tokens, following)]


def unknown_event(encoding: str, rng: random.Random) -> object:
    """An event of a class a newer engine might add: skipped by both decoders and counted."""
    fields = {"block_hashes": [rng.getrandbits(64)], "detail": {"k": [1, b"x", None]}}
    if encoding == "vllm-array":
        return ["BlockMoved", *fields.values()][: rng.randrange(1, 4)]
    return {"type": rng.choice(["BlockMoved", "KVFuture"]), **fields}


def trimmed(arr: list, minimum: int, rng: random.Random) -> list:
    """A positional event without its trailing defaults (omit_defaults), maybe with fields from
    later versions appended."""
    while len(arr) > minimum and arr[-1] is None and rng.random() < 0.8:
        arr.pop()
    if rng.random() < 0.2:
        arr = arr + [None] * (13 - len(arr)) + ["ownership", "session"]
    return arr


def payload(events: list, encoding: str, hashes_as: str, rng: random.Random) -> bytes:
    wired = [wire(e, encoding, hashes_as, rng) for e in events]
    if rng.random() < 0.05:
        wired.insert(rng.randrange(len(wired) + 1), unknown_event(encoding, rng))
    batch = [rng.random() * 1e9, wired]
    if rng.random() < 0.7:
        batch.append(rng.choice([0, 1, None]))
    return ENCODE(batch)


class Scenario:
    """Random events over a prompt pool. Workers mostly continue sequences they started (so
    parents are known), sometimes start anew or jump (orphans); removals mostly hit blocks the
    worker was told to hold."""

    def __init__(self, rng: random.Random, engine_mode: bool) -> None:
        self.rng = rng
        self.engine_mode = engine_mode
        self.prompts = prompts_for(rng, with_mm=True)
        #: (worker, prompt, lora, salt, seed) -> blocks stored so far.
        self.progress: dict[tuple, int] = {}
        #: (worker, engine hash, medium) stored, for removals.
        self.held: list[tuple[str, int, str | None]] = []
        #: Removals `stored` asks to come before its store.
        self.evicted: list[Removed] = []

    def request(self) -> tuple:
        p = self.rng.choice(self.prompts)
        lora, salt = self.rng.choice(LORAS), self.rng.choice(SALTS)
        tokens = p.tokens + [1, 2, 3][: self.rng.randrange(4)]
        if self.rng.random() < 0.15:
            tokens = tokens[: self.rng.randrange(len(tokens))]
        return tokens, lora, salt, p.mm

    def stored(self, worker: str) -> Stored:
        rng = self.rng
        index = rng.randrange(len(self.prompts))
        p = self.prompts[index]
        lora, salt = rng.choice(LORAS), rng.choice(SALTS)
        # A second engine seed gives the same content under other engine hashes.
        seed = "0" if self.engine_mode or rng.random() < 0.9 else "other"
        hashes = engine_hashes(p, lora, salt, seed)
        sequence = (worker, index, lora, salt, seed)
        r = rng.random()
        done = self.progress.get(sequence, 0)
        medium = rng.choice(MEDIA + [None]) if rng.random() < 0.5 else "GPU"
        block = -1
        if done and rng.random() < 0.1:
            # Blocks stored before, to another medium (vLLM's offloading connector), their
            # parent maybe removed since; sometimes by hash alone (its placeholder store).
            block = rng.randrange(done)
            medium = rng.choice(["CPU", "DISK"])
            if rng.random() < 0.5:
                self.held.append((worker, hashes[block], medium))
                return Stored([hashes[block]], None, [], 0, medium, "", "", group_idx=rng.choice([None, 0, 0, 1]))
            start = block
            if block and rng.random() < 0.7:
                self.evicted.append(Removed([hashes[block - 1]], "GPU"))  # the parent, just before
        else:
            start = min(done if r < 0.6 else 0 if r < 0.85 else rng.randrange(BLOCKS), BLOCKS - 1)
        end = rng.randrange(start + 1, BLOCKS + 1)
        self.progress[sequence] = end if start != block else max(done, end)
        self.held += [(worker, h, medium) for h in hashes[start:end]]
        tokens = p.tokens[start * BS : end * BS]
        if rng.random() < 0.05:
            tokens = tokens[: rng.randrange(len(tokens) + 1)]  # fewer tokens than blocks
        block_size = BS if rng.random() < 0.95 else rng.choice([8, 0, -1])
        mm_keys = [list(keys) for keys in block_mm_keys(p.mm, end, BS)[start:end]]
        return Stored(
            hashes=hashes[start:end], parent=hashes[start - 1] if start else None, tokens=tokens,
            block_size=block_size, medium=medium,
            lora=lora, salt=salt, mm_keys=mm_keys, group_idx=rng.choice([None] * 12 + [0, 1]),
            locality=rng.choice([None] * 12 + ["LOCAL", "REMOTE"]),
        )

    def removed(self, worker: str) -> Removed:
        rng = self.rng
        mine = [(h, m) for w, h, m in self.held[-300:] if w == worker]
        picked = rng.sample(mine, min(len(mine), rng.randrange(1, 4))) if mine else []
        hashes = [h for h, _ in picked]
        if not hashes or rng.random() < 0.1:
            hashes.append(rng.getrandbits(64))  # never stored
        medium = picked[0][1] if picked and rng.random() < 0.8 else rng.choice(MEDIA + [None])
        return Removed(hashes, medium, rng.choice([None] * 12 + [1]), rng.choice([None] * 12 + ["REMOTE"]))

    def forget(self, worker: str) -> None:
        """The worker's cache is gone (a clear or a drop)."""
        self.progress = {k: v for k, v in self.progress.items() if k[0] != worker}
        self.held = [h for h in self.held if h[0] != worker]

    def events(self, worker: str) -> list:
        out = []
        for _ in range(self.rng.choice([1, 1, 1, 2, 3])):
            r = self.rng.random()
            event = self.stored(worker) if r < 0.65 else self.removed(worker) if r < 0.98 else Cleared()
            out += self.evicted
            self.evicted = []
            out.append(event)
            if isinstance(out[-1], Cleared):
                self.forget(worker)
        return out


def refused_one_at_a_time(index: NativePrefixIndex, items: list[tuple[str, bytes]]) -> list[tuple[int, str]]:
    """Applies `items` one `apply_payload` each (what `apply_payloads` is held to): the position
    and message of each payload refused."""
    refused = []
    for i, (worker, data) in enumerate(items):
        try:
            index.apply_payload(worker, data)
        except DecodeError as e:
            refused.append((i, str(e)))
    return refused


def assert_same(python: PrefixIndex, native: NativePrefixIndex, requests: list[tuple], step: int) -> None:
    where = f"step {step}"
    assert native.stats == python.stats, where
    assert native.num_blocks == python.num_blocks, where
    assert native.workers == python.workers, where
    assert native.block_size == python.block_size, where
    for w in WORKERS:
        assert native.worker_blocks(w) == python.worker_blocks(w), (where, w)
    for tokens, lora, salt, mm in requests:
        assert native.score(tokens, lora, salt, mm) == python.score(tokens, lora, salt, mm), (where, lora, salt)


CASES = {
    # name: (seed, operations, engine mode, configured block size, max_blocks, the Python index's hasher)
    "content": (1, 1500, False, BS, 4_000_000, "native"),
    "content-evicting": (2, 1500, False, BS, 45, "native"),
    "content-learned-block-size": (3, 400, False, None, 120, "native"),
    "content-reference-hashing": (4, 300, False, BS, 60, "reference"),
    "engine": (5, 1000, True, BS, 4_000_000, "native"),
    "engine-evicting": (6, 600, True, BS, 35, "native"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_native_index_equals_python_index(case: str) -> None:
    seed, operations, engine_mode, block_size, max_blocks, backend = CASES[case]
    rng = random.Random(f"native-index-{seed}")
    spec = HashSpec("vllm_sha256", BS, seed="0") if engine_mode else None
    python = PrefixIndex(block_size, engine_spec=spec, max_blocks=max_blocks, hasher=get_hasher(backend))
    native = NativePrefixIndex(block_size, engine_spec=spec, max_blocks=max_blocks)
    scenario = Scenario(rng, engine_mode)
    for step in range(operations):
        worker = rng.choice(WORKERS)
        if rng.random() < 0.03:
            python.drop_worker(worker)
            native.drop_worker(worker)
        else:
            data = payload(scenario.events(worker), rng.choice(ENCODINGS),
                           rng.choice(["unsigned", "signed", "bytes"]), rng)
            batch = decode_batch(data)
            python.apply_batch(worker, batch)
            # Raw bytes decoded natively, or the Python-decoded batch handed over.
            if rng.random() < 0.6:
                native.apply_payload(worker, data)
            else:
                native.apply_batch(worker, batch)
        assert_same(python, native, [scenario.request() for _ in range(3)], step)
    assert_same(python, native, [(p.tokens, lora, salt, mm) for p in scenario.prompts for lora in ("", "ad1")
                                 for salt in ("", "t1") for mm in (p.mm, ())], operations)
    if max_blocks < 1000:
        assert python.stats.evicted_blocks > 0
    # Images were scored: some worker holds a prompt's text under other images (or none) only (not
    # checked at engine-evicting's bound of 35 blocks, which keeps too few prompts whole to tell).
    if max_blocks >= 1000 or not engine_mode:
        assert any(python.score(p.tokens, "", "", p.mm).workers != python.score(p.tokens).workers
                   for p in scenario.prompts if p.mm)
    stats = python.stats
    # The sequence exercised what it is meant to (engine mode has no parents to miss).
    assert stats.skipped_events > 0 and stats.blocks_removed > 30 and stats.unknown_removals > 0
    assert stats.blocks_stored > 2 * stats.orphan_blocks and (engine_mode or stats.orphan_blocks > 0)
    native.close()


def test_a_ninth_medium_is_skipped_alike() -> None:
    """The native index registers 8 media and skips a store naming a 9th (counted in
    `skipped_events`); the Python index registered every medium for good, and past 64 its masks
    no longer fitted a snapshot. With 10 media, both index the first 8 and skip the rest alike."""
    media = [f"m{i}" for i in range(10)]
    python, native = PrefixIndex(BS), NativePrefixIndex(BS)
    tokens = list(range(10 * BS))
    hashes = list(range(100, 110))
    requests = [(tokens, "", "", ()), (tokens[: 3 * BS], "", "", ())]
    for step, medium in enumerate(media):
        # Each medium stores the whole sequence for w0 (re-stores of its blocks in another medium)
        # and one block of its own for w1 (a store of blocks no medium of the worker holds yet).
        for worker, batch in [("w0", Batch(0.0, [BlockStored(hashes, None, tokens, BS, medium=medium)])),
                              ("w1", Batch(0.0, [BlockStored([200 + step], None, tokens[: BS], BS, medium=medium)]))]:
            python.apply_batch(worker, batch)
            native.apply_batch(worker, batch)
        assert_same(python, native, requests, step)
    removals = Batch(0.0, [BlockRemoved([100, 101], medium="m9"), BlockRemoved([102], medium="m7")])
    python.apply_batch("w0", removals)
    native.apply_batch("w0", removals)
    assert_same(python, native, requests, len(media))
    assert python.stats.skipped_events == 4 and python.stats.unknown_removals == 2
    top = {w.worker: w for w in python.score(tokens).workers}
    assert top["w0"].blocks == 10 and top["w0"].blocks_by_medium == {
        **{m: 10 for m in media[:7]}, "m7": 2}
    restored = PrefixIndex(BS)
    restored.restore(python.snapshot())
    assert restored.score(tokens) == python.score(tokens)


def test_recorded_engine_payloads_apply_alike() -> None:
    python, native = PrefixIndex(), NativePrefixIndex()
    for path in sorted(EVENTS.glob("*.msgpack")):
        data = path.read_bytes()
        # Replay each recording's batch with its final clear dropped, so that blocks remain.
        batch = decode_batch(data)
        kept = ENCODE([batch.ts, [msgspec.msgpack.decode(data)[1][i] for i in range(len(batch.events))
                                  if type(batch.events[i]).__name__ != "AllBlocksCleared"]])
        python.apply_batch(path.stem, decode_batch(kept))
        native.apply_payload(path.stem, kept)
    assert native.num_blocks == python.num_blocks > 0
    assert native.stats == python.stats
    assert native.workers == python.workers


@pytest.mark.parametrize("bad_token", [-1, 2**32, 2**40])
def test_token_ids_no_tokenizer_has_skip_their_event_alike(bad_token: int) -> None:
    """A store whose token ids include one outside [0, 2^32) cannot be keyed: both indexes skip
    that event (counted) and apply the rest of its batch; the Python index raised, leaving the
    batch half applied."""
    events = [
        {"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None, "token_ids": [5, 6, 7, 8],
         "block_size": 4},
        {"type": "BlockStored", "block_hashes": [2], "parent_block_hash": 1, "token_ids": [9, bad_token, 10, 11],
         "block_size": 4},
        # Beyond the blocks published: not hashed, so not refused.
        {"type": "BlockStored", "block_hashes": [3], "parent_block_hash": None,
         "token_ids": [1, 2, 3, 4, bad_token], "block_size": 4},
    ]
    data = ENCODE([1.0, events])
    python, native = PrefixIndex(4), NativePrefixIndex(4)
    python.apply_batch("w", decode_batch(data))
    native.apply_payload("w", data)
    assert python.stats == native.stats and python.stats.skipped_events == 1
    assert python.workers == native.workers and python.num_blocks == native.num_blocks == 2
    for tokens in ([5, 6, 7, 8], [1, 2, 3, 4]):
        assert python.score(tokens).workers == native.score(tokens).workers


def mutations(data: bytes, rng: random.Random) -> list[bytes]:
    out = [data[: rng.randrange(len(data))] for _ in range(3)]
    for _ in range(12):
        b = bytearray(data)
        for _ in range(rng.choice([1, 1, 2])):
            b[rng.randrange(len(b))] = rng.randrange(256)
        out.append(bytes(b))
    at = rng.randrange(len(data))
    out.append(data[:at] + bytes([rng.randrange(256)]) + data[at:])
    out.append(data + b"\x00")
    return out


def test_payload_mutations_are_refused_alike() -> None:
    """Truncations, byte changes and insertions of valid payloads: the native decoder refuses
    exactly what `decode_batch` refuses, and what both accept applies alike."""
    rng = random.Random("mutations")
    scenario = Scenario(rng, engine_mode=False)
    refused = accepted = 0
    for _ in range(250):
        data = payload(scenario.events("w"), rng.choice(ENCODINGS),
                       rng.choice(["unsigned", "signed", "bytes"]), rng)
        for mutated in mutations(data, rng):
            native = NativePrefixIndex(BS)
            try:
                batch = decode_batch(mutated)
            except DecodeError:
                with pytest.raises(DecodeError):
                    native.apply_payload("w", mutated)
                assert native.workers == []
                refused += 1
                continue
            except RecursionError:  # msgspec's limit on nesting, not a DecodeError
                continue
            python = PrefixIndex(BS, hasher=get_hasher("native"))
            try:
                python.apply_batch("w", batch)
            except (InvalidArgument, OverflowError):
                continue  # token ids beyond 32 bits: Python raises, the native index skips
            native.apply_payload("w", mutated)
            assert native.stats == python.stats
            accepted += 1
    assert refused > 500 and accepted > 500


@pytest.mark.parametrize(
    "data",
    [b"", b"\xc1", ENCODE({"ts": 1}), ENCODE([1.0, "x"]), ENCODE([1.0, [{"type": 3}]]),
     ENCODE([1.0, [{"type": "BlockStored", "block_hashes": ["s"]}]]), ENCODE([1.0, [["BlockRemoved"]]]),
     ENCODE([1.0, [{"type": "BlockRemoved", "block_hashes": [b"short"]}]]), ENCODE([True, []]),
     ENCODE([1.0, [], "rank"]), ENCODE([1.0, [{"block_hashes": [1]}]]), ENCODE([1.0, [["BlockStored", [1], None, [1]]]]),
     # A map as a map key inside extra_keys (unhashable), and "type" naming two classes.
     b"\x92\xcb" + bytes(8) + b"\x91\x83\xa4type\xabBlockStored\xacblock_hashes\x90\xaaextra_keys\x91\x81\x80\x01",
     b"\x92\xcb" + bytes(8) + b"\x91\x83\xa4type\xacBlockRemoved\xacblock_hashes\x90\xa4type\xb0AllBlocksCleared",
     ENCODE([1.0, [{"type": "BlockStored", "block_hashes": [], "medium": b"GPU"}]]),
     b"\x92\xcb" + bytes(8) + b"\x91\x82\xa4type\xabBlockStored\xacblock_hashes\x91\xd4\xff\x00",
     b"\x92\xcb" + bytes(8) + b"\x91\x83\xa4type\xabBlockStored\xacblock_hashes\x90\xa6medium\xa2\xff\xfe"],
)
def test_malformed_payloads_raise_decode_error_and_change_nothing(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_batch(data)
    native = NativePrefixIndex(BS)
    with pytest.raises(DecodeError, match="^payload: "):
        native.apply_payload("w", data)
    assert native.workers == [] and native.stats.events == 0


def test_apply_payloads_equals_one_call_per_payload() -> None:
    """`apply_payloads` in groups of any size leaves the index as `apply_payload` one payload at a
    time does, and refuses the same malformed payloads (each changing nothing) at their positions."""
    rng = random.Random("apply-payloads")
    one, many = NativePrefixIndex(BS, max_blocks=200), NativePrefixIndex(BS, max_blocks=200)
    scenario = Scenario(rng, engine_mode=False)
    items = []
    for _ in range(600):
        worker = rng.choice(WORKERS)
        data = payload(scenario.events(worker), rng.choice(ENCODINGS),
                       rng.choice(["unsigned", "signed", "bytes"]), rng)
        items.append((worker, rng.choice(mutations(data, rng)) if rng.random() < 0.1 else data))
    expected = refused_one_at_a_time(one, items)
    got, start = [], 0
    while start < len(items):
        size = rng.choice([1, 2, 7, 64, 200])
        got += [(start + i, str(e)) for i, e in many.apply_payloads(items[start:start + size])]
        start += size
    assert got == expected and len(expected) > 20
    assert many.stats == one.stats and one.stats.evicted_blocks > 0 and one.stats.orphan_blocks > 0
    assert many.num_blocks == one.num_blocks and many.workers == one.workers
    for w in WORKERS:
        assert many.worker_blocks(w) == one.worker_blocks(w), w
    for tokens, lora, salt, mm in [scenario.request() for _ in range(60)]:
        assert many.score(tokens, lora, salt, mm) == one.score(tokens, lora, salt, mm)
    assert many.apply_payloads([]) == []


def test_router_feed_payloads_alike_for_both_indexes() -> None:
    """`KvRouter.feed_payloads` (what the NATS consumer calls per run of messages): the native
    index takes the run in one call, the Python index one payload at a time; both refuse the same
    payloads and end equal."""
    rng = random.Random("feed-payloads")
    scenario = Scenario(rng, engine_mode=False)
    items = []
    for _ in range(150):
        worker = rng.choice(WORKERS)
        data = payload(scenario.events(worker), "vllm-map", "unsigned", rng)
        items.append((worker, b"\xc1" if rng.random() < 0.1 else data))
    routers = [KvRouter([], models={"m": ModelOptions(block_size=BS)}, silence_timeout_s=None, index_factory=factory)
               for factory in (PrefixIndex, NativePrefixIndex)]
    refused = [[i for i, _ in router.feed_payloads("m", items)] for router in routers]
    assert refused[0] == refused[1] == [i for i, (_, data) in enumerate(items) if data == b"\xc1"]
    python, native = (router.index("m") for router in routers)
    assert_same(python, native, [scenario.request() for _ in range(20)], len(items))


def test_apply_payloads_raises_what_apply_payload_raises_after_the_payloads_before_it() -> None:
    rng = random.Random("apply-payloads-errors")
    scenario = Scenario(rng, engine_mode=False)
    items = [(w, payload(scenario.events(w), "vllm-map", "unsigned", rng)) for w in ("w0", "w1", "w\ud800", "w2")]
    one, many = NativePrefixIndex(BS), NativePrefixIndex(BS)
    with pytest.raises(UnicodeEncodeError):
        for worker, data in items:
            one.apply_payload(worker, data)
    with pytest.raises(UnicodeEncodeError):
        many.apply_payloads(items)
    assert many.workers == one.workers == ["w0", "w1"] and many.stats == one.stats


@pytest.mark.parametrize(("names", "name_ends", "payload_ends", "message"), [
    (b"w0w1", [2, 1], [0, 0], "name_ends: item 1 ends at 1, outside 2..=4"),
    (b"w0w1", [2, 5], [0, 0], "name_ends: item 1 ends at 5, outside 2..=4"),
    (b"w0\xff1", [2, 4], [0, 0], "names: item 1 is not UTF-8"),
    (b"w0w1", [2, 4], [0, 9], "payload_ends: item 1 ends at 9, outside 0..=0"),
])
def test_apply_many_refuses_a_bad_layout_before_applying_anything(
        names: bytes, name_ends: list[int], payload_ends: list[int], message: str) -> None:
    native = NativePrefixIndex(BS)
    applied, err = ffi.new("uintptr_t *"), ffi.new("sc_error **")
    ends = [ffi.new("uint64_t[]", e) for e in (name_ends, payload_ends)]
    with native._handle as index:
        status = lib.sc_kv_index_apply_many(index, names, len(names), ends[0], ffi.NULL, 0, ends[1], 2,
                                            lib.SC_KV_PAYLOAD_ENGINE, applied, err)
    with pytest.raises(InvalidArgument, match=f"^{message}$"):
        raise_for_status(status, err)
    assert native.workers == [] and native.stats.events == 0


def build(rng: random.Random, max_blocks: int = 4_000_000) -> tuple[NativePrefixIndex, Scenario]:
    native = NativePrefixIndex(BS, max_blocks=max_blocks)
    scenario = Scenario(rng, engine_mode=False)
    for _ in range(400):
        worker = rng.choice(WORKERS)
        native.apply_payload(worker, payload(scenario.events(worker), "vllm-map", "unsigned", rng))
    return native, scenario


def test_snapshot_round_trip_and_refusals() -> None:
    rng = random.Random("snapshot")
    native, scenario = build(rng, max_blocks=150)
    data = native.snapshot()
    copy = NativePrefixIndex(BS, max_blocks=150)
    copy.restore(data)
    assert copy.snapshot() == data
    assert (copy.stats, copy.num_blocks, copy.workers) == (native.stats, native.num_blocks, native.workers)
    for _ in range(100):
        request = scenario.request()
        assert copy.score(*request) == native.score(*request)
    # Both continue identically (recency order and eviction choices survive the round trip).
    for _ in range(200):
        worker = rng.choice(WORKERS)
        data2 = payload(scenario.events(worker), "vllm-map", "unsigned", rng)
        native.apply_payload(worker, data2)
        copy.apply_payload(worker, data2)
    assert copy.snapshot() == native.snapshot()
    with pytest.raises(InvalidArgument, match="snapshot"):
        copy.restore(data[:-3])
    with pytest.raises(FailedPrecondition, match="snapshot"):
        NativePrefixIndex(8).restore(data)
    with pytest.raises(FailedPrecondition, match="snapshot"):
        NativePrefixIndex(engine_spec=HashSpec("vllm_sha256", BS)).restore(data)


def test_columns_and_general_apply_batch_paths_agree() -> None:
    """`apply_batch` hands hashes and token ids over as arrays when they fit (`_columns`) and falls
    back to encoding the Batch otherwise; both reach the state the Python index does, one event
    per batch and all of them in one batch."""
    tokens = list(range(100, 100 + 6 * BS))
    wide = tokens[:BS] + [2**32 + 5] + tokens[BS + 1 :]
    events = [
        BlockStored([1, 2], None, tokens[: 2 * BS], BS, cache_salt="s1"),
        BlockStored([-3, 2**63 + 4], 2, tokens[2 * BS : 4 * BS], BS, medium="CPU", lora_name="ad"),
        BlockStored([-5, 2**63 + 6], None, tokens[: 2 * BS], BS),  # needs neither int64 nor uint64 alone
        BlockStored([7, 2**64], None, tokens[:BS], BS),  # no 64-bit pattern: the general path (which raises)
        BlockStored([7, 8], None, wide[: 2 * BS], BS),  # a token id past uint32: the general path
        BlockStored([9], None, tokens[:BS], BS, extra_keys=[["salt-x"]]),  # extra_keys: the general path
        BlockRemoved([2, 99], "GPU"),
        BlockStored([10, 11], None, tokens[: 2 * BS], BS, group_idx=1, locality="REMOTE"),
    ]
    assert _columns(Batch(0.0, events[:3] + events[6:])) is not None
    assert all(_columns(Batch(0.0, [e])) is None for e in events[3:6])
    python = PrefixIndex(BS)
    packed = NativePrefixIndex(BS)
    general = NativePrefixIndex(BS)  # every batch through the general (msgspec-encoded) path
    for event in events + [AllBlocksCleared(), events[0]]:
        batch = Batch(0.0, [event])
        if event is events[3]:
            with pytest.raises(OverflowError):  # as before the columns path (msgspec refuses it)
                packed.apply_batch("w0", batch)
            continue
        packed.apply_batch("w0", batch)
        general._apply("w0", msgspec.msgpack.encode(_plain(batch)), lib.SC_KV_PAYLOAD_NORMALIZED)
        if event is not events[4]:  # the Python index refuses a token id past uint32; native skips it
            python.apply_batch("w0", batch)
        assert packed.stats == general.stats
        assert packed.num_blocks == general.num_blocks == python.num_blocks
        for salt in ("", "s1", "salt-x"):
            for lora in ("", "ad"):
                score = packed.score(tokens, lora, salt)
                assert score == general.score(tokens, lora, salt) == python.score(tokens, lora, salt)
    together, together_general = NativePrefixIndex(BS), NativePrefixIndex(BS)
    batch = Batch(0.0, events[:3] + events[6:] + [AllBlocksCleared(), events[0], events[1], BlockRemoved([1], "GPU")])
    together.apply_batch("w0", batch)
    together_general._apply("w0", msgspec.msgpack.encode(batch), lib.SC_KV_PAYLOAD_NORMALIZED)
    assert together.stats == together_general.stats and together.num_blocks == together_general.num_blocks == 3
    assert together.score(tokens) == together_general.score(tokens)
    for index in (packed, general, together, together_general):
        index.close()


def test_close_is_idempotent_and_later_calls_fail_cleanly() -> None:
    native, scenario = build(random.Random("close"))
    native.close()
    native.close()
    with pytest.raises(FailedPrecondition, match="closed"):
        native.score(scenario.prompts[0].tokens)
    with pytest.raises(FailedPrecondition, match="closed"):
        native.apply_payload("w", b"")


def test_scoring_from_threads_while_a_thread_applies() -> None:
    rng = random.Random("threads")
    native, scenario = build(rng)
    requests = [scenario.request() for _ in range(20)]
    workers = [rng.choice(WORKERS) for _ in range(800)]
    payloads = [(w, payload(scenario.events(w), "vllm-map", "unsigned", rng)) for w in workers]
    errors: list[BaseException] = []

    def score() -> None:
        try:
            for i in range(400):
                result = native.score(*requests[i % len(requests)])
                assert [w.blocks for w in result.workers] == sorted((w.blocks for w in result.workers), reverse=True)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=score) for _ in range(3)]
    for t in threads:
        t.start()
    for worker, data in payloads:
        native.apply_payload(worker, data)
    for t in threads:
        t.join()
    assert not errors


def test_engine_mode_validates_multimodal_items_like_the_python_index() -> None:
    spec = HashSpec("vllm_sha256", BS, seed="0")
    bad = (MmItem("b", 5, 1), MmItem("a", 1, 1))
    for index in (PrefixIndex(engine_spec=spec), NativePrefixIndex(engine_spec=spec)):
        with pytest.raises(InvalidSpec, match=r"mm_items\[1\]"):
            index.score(list(range(32)), mm_items=bad)
    with pytest.raises(ValueError, match="differs"):
        NativePrefixIndex(8, engine_spec=spec)
    with pytest.raises(InvalidArgument, match="token_ids"):
        NativePrefixIndex(BS).score([1, -1, 2, 3])
    assert replace(spec).block_size == BS


def test_bigram_stores_score_like_plain_stores_of_the_same_sequence() -> None:
    """SGLang with EAGLE (bigram pages): content mode keys the pairs' first elements, so a request's
    plain token ids find them as they find a plain store's; engine mode skips them (SGLang hashes the
    pairs), in both indexes and on every path into the native one."""
    rng = random.Random("bigram")
    tokens = [rng.randrange(150_000) for _ in range(6 * BS + 1)]
    hashes = [rng.getrandbits(63) for _ in range(6)]

    def batch(bigram: bool) -> bytes:
        stores = []
        for start, end in ((0, 2), (2, 6)):
            page = tokens[start * BS : end * BS]
            # A page's last pair reaches the first token of the next (SGLang's RadixKey slices share it).
            ids = [[t, tokens[start * BS + i + 1]] for i, t in enumerate(page)] if bigram else page
            stores.append({"type": "BlockStored", "block_hashes": hashes[start:end],
                           "parent_block_hash": hashes[start - 1] if start else None, "token_ids": ids,
                           "block_size": BS, "lora_id": None, "medium": "GPU"})
        return ENCODE([1.0, stores, 0])

    requests = [tokens, tokens[: 3 * BS + 1], tokens[:BS] + [7] * BS]
    plain = PrefixIndex(BS)
    plain.apply_batch("w", decode_batch(batch(False)))
    expected = [plain.score(t) for t in requests]
    assert expected[0].workers[0].blocks == 6 and expected[1].workers[0].blocks == 3
    for apply in ("python", "payload", "columns", "normalized"):
        python, native = PrefixIndex(BS), NativePrefixIndex(BS)
        decoded = decode_batch(batch(True))
        python.apply_batch("w", decoded)
        if apply == "payload":
            native.apply_payload("w", batch(True))
        elif apply == "columns":
            native.apply_batch("w", decoded)
        else:
            native._apply(  # the general (msgspec-encoded) path: what apply_batch takes for extra_keys
                "w", ENCODE(_plain(decoded)), lib.SC_KV_PAYLOAD_NORMALIZED)
        assert [python.score(t) for t in requests] == expected, apply
        assert [native.score(t) for t in requests] == expected, apply
        assert native.stats == python.stats == plain.stats, apply
    spec = HashSpec("sglang_sha256", BS)
    python, native = PrefixIndex(BS, engine_spec=spec), NativePrefixIndex(BS, engine_spec=spec)
    python.apply_batch("w", decode_batch(batch(True)))
    native.apply_payload("w", batch(True))
    assert python.num_blocks == native.num_blocks == 0
    assert python.stats == native.stats and python.stats.skipped_events == 2


def test_an_unknown_event_class_does_not_hide_the_rest_of_the_batch() -> None:
    """A newer engine's event among known ones: both indexes apply the rest (the removal too) and
    count it as received and skipped, whichever path the batch takes into the native index."""
    stored = {"type": "BlockStored", "block_hashes": [1, 2], "parent_block_hash": None,
              "token_ids": list(range(2 * BS)), "block_size": BS}
    later = [1.0, [{"type": "KVFuture", "x": [1]}, {"type": "BlockRemoved", "block_hashes": [2]},
                   ["BlockMoved", [1]]]]
    python = PrefixIndex(BS)
    natives = {how: NativePrefixIndex(BS) for how in ("payload", "columns", "normalized")}
    for data in (ENCODE([0.0, [stored]]), ENCODE(later)):
        decoded = decode_batch(data)
        python.apply_batch("w", decoded)
        natives["payload"].apply_payload("w", data)
        natives["columns"].apply_batch("w", decoded)
        natives["normalized"]._apply("w", ENCODE(_plain(decoded)), lib.SC_KV_PAYLOAD_NORMALIZED)
    assert python.stats.events == 4 and python.stats.skipped_events == 2 and python.stats.blocks_removed == 1
    for how, native in natives.items():
        assert native.stats == python.stats, how
        assert native.score(list(range(2 * BS))) == python.score(list(range(2 * BS))), how


# The prompt of the recordings vllm-0.33-mm-*: text | image (offset 16, 32 tokens) | text, and a
# small image at offset 52 (tests/kv/generate_events.py).
IMAGE_X, IMAGE_Y, IMAGE_Z = "a" * 64, "b" * 64, "c" * 64


def images(first: str, last: str = IMAGE_Z) -> tuple[MmItem, ...]:
    return (MmItem(first, 16, 32), MmItem(last, 52, 8))


@pytest.mark.parametrize("kind", ["int", "bytes"])
@pytest.mark.parametrize("path", ["python", "native-payload", "native-batch"])
def test_content_keys_tell_images_apart(kind: str, path: str) -> None:
    """Content mode hashed token ids only: a worker that cached a prompt with image X was scored
    as holding it with image Y (the same placeholder tokens), though vLLM hashes each image into
    every block it overlaps. On vLLM 0.33's own events (worker a: images X, Z under LoRA "ad" and
    salt "tenant", in two stores; worker b: images Y, Z), a request matches a worker's blocks up
    to the first block whose images differ, text-only blocks before it included: the blocks vLLM
    would reuse."""
    data = (EVENTS / f"vllm-0.33-mm-{kind}.msgpack").read_bytes()
    ts, events = msgspec.msgpack.decode(data)[:2]
    tokens = events[2]["token_ids"]
    index = PrefixIndex() if path == "python" else NativePrefixIndex()
    for worker, mine in (("a", events[:2]), ("b", events[2:])):
        payload_bytes = ENCODE([ts, mine])
        if path == "native-payload":
            index.apply_payload(worker, payload_bytes)
        else:
            index.apply_batch(worker, decode_batch(payload_bytes))
    stored = {"a": HashSpec("vllm_sha256", 16, cache_salt="tenant", lora_name="ad", lora_path="/ad",
                            mm_items=images(IMAGE_X)),
              "b": HashSpec("vllm_sha256", 16, mm_items=images(IMAGE_Y))}
    for lora, salt, items, want in [
        ("ad", "tenant", images(IMAGE_X), {"a": 4, "b": 0}),  # the same images: everything
        ("", "", images(IMAGE_Y), {"a": 0, "b": 4}),
        ("", "", images(IMAGE_X), {"a": 0, "b": 1}),  # X against Y: the text block before it only
        ("ad", "tenant", images(IMAGE_Y), {"a": 1, "b": 0}),
        ("", "", images(IMAGE_Y, "d" * 64), {"a": 0, "b": 3}),  # another small image in the last block
        ("", "", (), {"a": 0, "b": 1}),  # no image named: the text block
    ]:
        score = index.score(tokens, lora, salt, items)
        assert {w.worker: w.blocks for w in score.workers} == want, (lora, items)
        # What vLLM would reuse: the blocks its own hashes share with the stored ones.
        request = HashSpec("vllm_sha256", 16, cache_salt=salt, lora_name=lora, lora_path="/ad" if lora else "",
                           mm_items=items)
        for worker, spec in stored.items():
            shared = zip(_reference.block_hashes(tokens, spec), _reference.block_hashes(tokens, request))
            assert want[worker] == sum(1 for _ in takewhile(lambda pair: pair[0] == pair[1], shared))


def test_blocks_without_multimodal_keys_keep_their_content_keys() -> None:
    """A block without multimodal keys hashes what it hashed before they were hashed: the keys
    below were computed before, so snapshots, replicas and their fleet stay valid. An image in a
    block that is not full (no key), a bare string in extra keys (the LoRA name, the salt, or a
    legacy bare identifier, ignored) and an event without extra keys change nothing."""
    tokens = list(range(100, 164))
    before = {
        ("", ""): [10823191264391160519, 4102179227871607950, 18410735291254320318, 4506128744525108053],
        ("ad", "tenant"): [13282214846500578297, 7937549626039343609, 4992127456442662879, 1405676502047576648],
    }
    trailing_image = (MmItem(IMAGE_X, 64, 16),)
    for hasher in (get_hasher("reference"), get_hasher("native")):
        for (lora, salt), keys in before.items():
            assert hasher.prefix_keys(tokens, 16, lora, salt) == keys
            assert hasher.prefix_keys(tokens, 16, lora, salt, mm_keys=[[], None]) == keys
        assert hasher.prefix_keys(tokens[:32], 16, "ad", "", 12345) == [10202288993872396384, 15272383518599553903]
    for index in (PrefixIndex(16), NativePrefixIndex(16)):
        for (lora, salt), keys in before.items():
            assert index.request_keys(tokens + [7] * 8, lora, salt, trailing_image) == keys
        index.apply("w", BlockStored([1, 2, 3, 4], None, tokens, 16, lora_name="ad",
                                     extra_keys=[["ad", "legacy-bare-id", "tenant"], ["ad", "legacy-bare-id"]]))
        assert index.score(tokens, "ad", "tenant").workers[0].blocks == 4
        assert index.score(tokens, "ad", "tenant", images(IMAGE_X)).workers[0].blocks == 1


def test_native_hasher_keys_multimodal_blocks_as_the_reference() -> None:
    rng = random.Random("mm-keys")
    tokens = [rng.randrange(1 << 32) for _ in range(40)]
    for mm_keys in ([[("x", 0)]], [[], [("x", -3), ("y", 2)], None, [("x", 2**64 - 1)]], [[("é", -(2**63))]] * 10):
        for parent in (None, 7):
            args = (tokens, 4, "ad", "salt", parent)
            native = get_hasher("native").prefix_keys(*args, mm_keys=mm_keys)
            assert native == get_hasher("reference").prefix_keys(*args, mm_keys=mm_keys)
            assert native != get_hasher("reference").prefix_keys(*args)


def test_plain_batches_keep_their_multimodal_keys() -> None:
    """A batch msgspec cannot encode goes over reduced to what the index reads (`_plain`): its
    salt and its blocks' multimodal keys."""
    tokens = list(range(2 * BS))
    event = BlockStored([1, 2], None, tokens, BS, lora_name="ad", extra_keys=[("ad", "s", object()), ["ad", ("x", 1)]])
    python, native = PrefixIndex(BS), NativePrefixIndex(BS)
    python.apply("w", event)
    native.apply("w", event)
    for items, depth in [((MmItem("x", BS + 1, 1),), 2), ((), 1), ((MmItem("y", BS + 1, 1),), 1)]:
        assert [w.blocks for w in native.score(tokens, "ad", "s", items).workers] == [depth]
        assert python.score(tokens, "ad", "s", items) == native.score(tokens, "ad", "s", items)
