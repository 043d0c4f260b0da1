"""The per-model prefix index built from KV events, and longest-prefix scoring. No ZMQ here.

Keys. In the default *content* mode every block is keyed by our own content hash: the XXH3
SequenceHash (Dynamo's scheme) of the block's tokens (from the event's `token_ids`), chained from
its parent's key, with the LoRA name mixed into every block's seed and the cache salt into the
first block's (an event continuing a sequence does not repeat the salt). A block that multimodal
items overlap also hashes their (identifier, offset) keys after its tokens: from an event, the
`[identifier, offset]` pairs of the block's `extra_keys` (`events.mm_keys_of`); from a request, the
same pairs computed from its `mm_items` by vLLM's rule (`hashing.block_mm_keys`). So a prompt
cached with one image does not match the same placeholder tokens with another, from the first
block the image overlaps on; blocks without such keys keep their text-only keys. Such keys do not
depend on the engine's hash algorithm, seed or version, and a key identifies a whole prefix, so a
flat map suffices. The engine's own hash is kept per worker only to find a stored block's parent
and to apply removals, as Dynamo, SMG and llm-d do. In *engine* mode (when the engine's hash spec
is known) the key is the engine's published value itself, and a request is hashed with that spec.

Lookahead (content mode). vLLM >= 0.33 with an EAGLE/EAGLE3/MTP drafter hashes each block over its
tokens *and* the L tokens after it (`num_hash_lookahead_tokens`), hashes a block only once those
exist, and publishes them per block (`lookahead_token_ids`) with `extra_keys` computed over the
same window. The index keys such blocks the same way: block i's content key covers its tokens
followed by its L lookahead tokens (a store's `lookahead_token_ids[i]`; a request's tokens
`[i*B, (i+1)*B + L)`, only for blocks whose whole window exists) and the multimodal keys of that
window. So a request that diverges right after a block boundary, or ends on one, does not match a
block the engine would not reuse. L is configured (`lookahead=`; `ModelOptions.lookahead`,
`sidecar serve --kv-lookahead`) or learned from the first indexed store (the length of its lists, 0
for a store without the field; keyed as 0 until then); a store of another L, or whose
lists are not one per block hash, all of one length, is skipped (`skipped_events`). With L = 0
keys are exactly what they were without lookahead. (SGLang's EAGLE bigram stores are another
case: their content keys are those of the pairs' first elements.)

Memory is bounded: past `max_blocks` (all workers, all media) the oldest blocks of the largest
worker are evicted (at most a quarter of it per pass, then the largest again), and at most `MAX_MEDIA` (8) media are registered, as in the native index (a
store naming another is skipped). Thread-safe: one lock guards updates and scoring.
"""

from __future__ import annotations

import heapq
import threading
import time
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field, replace
from functools import reduce
from itertools import accumulate, repeat
from operator import and_, neg, or_
from typing import Callable, Sequence

import msgspec

from router_adapter.errors import InvalidTokens
from router_adapter.events import AllBlocksCleared, Batch, BlockRemoved, BlockStored, Event, cache_salt_of, mm_keys_of
from router_adapter._reference import check_token_ids
from router_adapter.hashing import REFERENCE_HASHER, BlockHasher, block_mm_keys, lookahead_windows
from router_adapter.spec import MAX_LOOKAHEAD, HashSpec, MmItem

#: Marks a `PrefixIndex.snapshot` (format version 1).
SNAPSHOT_MAGIC = "sidecar-kv-prefix-index/1"

#: Distinct media an index registers (the native index's media mask has 8 bits): a store naming
#: another is skipped (`IndexStats.skipped_events`). Media are never forgotten, so without a bound
#: an engine naming a new one per store grew the index for good, and past 64 the masks no longer
#: fit a snapshot's integers.
MAX_MEDIA = 8

#: An eviction pass takes at most 1/4 (rounded up) of the largest worker's blocks (as the native
#: index, native/src/index/core.rs).
EVICTION_PASS_SHARE = 4

#: Index keys of a request's or an event's full blocks.
KeyFn = Callable[..., list[int]]


@dataclass(slots=True)
class IndexStats:
    """Counters an operator watches (also exported as Prometheus metrics by the server)."""

    events: int = 0
    blocks_stored: int = 0
    blocks_removed: int = 0
    #: Stores whose parent block is unknown to us (we joined late, or it was evicted) and whose
    #: first block the worker does not hold either: not indexed.
    orphan_blocks: int = 0
    #: Removals of blocks we never saw.
    unknown_removals: int = 0
    #: Events not indexed: because of their block size, group, locality or medium, token ids that
    #: cannot be hashed, bigram stores in engine mode, stores by hash alone (block size 0) of blocks
    #: the worker does not hold in content mode, or a class the decoder does not know.
    skipped_events: int = 0
    evicted_blocks: int = 0
    worker_resets: int = 0


@dataclass(slots=True)
class WorkerScore:
    """One worker's cached prefix of a request."""

    worker: str
    #: Consecutive blocks from the start held in any medium.
    blocks: int
    #: The same in tokens (blocks * block_size).
    tokens: int
    #: Consecutive blocks from the start held in each medium ("GPU", "CPU", ...).
    blocks_by_medium: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class Score:
    """The answer to "who holds the longest prefix of this request"."""

    block_size: int
    #: The request's block keys (content keys, or engine hashes in engine mode).
    block_hashes: list[int]
    #: "content" or "engine".
    mode: str
    #: Every known worker, best first (then by name); workers with no match have 0.
    workers: list[WorkerScore]


class _Worker:
    __slots__ = ("name", "bit", "keys", "media", "last_event")

    def __init__(self, name: str, bit: int) -> None:
        self.name = name
        self.bit = bit
        #: engine hash -> index key, in storage order (oldest first; re-stores move to the end).
        self.keys: dict[int, int] = {}
        #: engine hash -> bit mask of the media holding it.
        self.media: dict[int, int] = {}
        self.last_event = 0.0


class PrefixIndex:
    """One model's index (see the module docs)."""

    def __init__(
        self,
        block_size: int | None = None,
        *,
        engine_spec: HashSpec | None = None,
        max_blocks: int = 4_000_000,
        group_idx: int = 0,
        hasher: BlockHasher = REFERENCE_HASHER,
        lookahead: int | None = None,
    ) -> None:
        if lookahead is not None and (type(lookahead) is not int or not 0 <= lookahead <= MAX_LOOKAHEAD):
            raise ValueError(f"lookahead must be an integer in [0, {MAX_LOOKAHEAD}]")
        if lookahead is not None and engine_spec is not None:
            raise ValueError("lookahead is for content mode (engine mode hashes with engine_spec.lookahead)")
        if engine_spec is not None:
            engine_spec.validate()
            if block_size is not None and block_size != engine_spec.block_size:
                raise ValueError("block_size differs from engine_spec.block_size")
            block_size = engine_spec.block_size
        if block_size is not None and block_size <= 0:
            raise ValueError("block_size must be > 0")
        #: Tokens per block; learned from the first store when not configured.
        self.block_size = block_size
        #: The block size this index was configured with (None: learned from the first event).
        self._configured_block_size = block_size
        self.engine_spec = engine_spec
        self.mode = "engine" if engine_spec is not None else "content"
        #: Content mode: tokens after each block that its key covers (vLLM's lookahead hashing; see
        #: the module docs); learned from the first indexed store when not configured (None until
        #: then, keyed as 0). Engine mode hashes requests with the spec's own `lookahead`.
        self.lookahead = lookahead
        self._configured_lookahead = lookahead
        self.max_blocks = max_blocks
        self.group_idx = group_idx
        self.stats = IndexStats()
        #: Computes request keys and event content keys (the pure-Python reference unless injected).
        self.hasher = hasher
        self._lock = threading.Lock()
        self._workers: dict[str, _Worker] = {}
        self._free_bits: list[int] = []
        self._next_bit = 0
        self._media: dict[str, int] = {}
        #: Per medium: key -> bit mask of the workers holding it there.
        self._holders: list[dict[int, int]] = []
        #: (key, worker bit, medium) -> extra holds beyond the first (equal content under two
        #: engine hashes, e.g. the same placeholder tokens with different images).
        #: Worker bit -> {(key, medium): holds beyond the first}; per worker, so a clear forgets
        #: its own without reading every worker's.
        self._extra_holds: dict[int, dict[tuple[int, int], int]] = {}
        self._blocks = 0
        self._event_times: deque[float] = deque(maxlen=4096)

    # --- reading -------------------------------------------------------------------------------

    @property
    def num_blocks(self) -> int:
        """Blocks held, counting each (worker, engine hash) once whatever its media."""
        return self._blocks

    @property
    def workers(self) -> list[str]:
        return sorted(self._workers)

    def worker_blocks(self, worker: str) -> int:
        """Blocks `worker` holds (0 when unknown)."""
        w = self._workers.get(worker)
        return len(w.keys) if w is not None else 0

    def events_per_second(self, window_s: float = 10.0) -> float:
        """Events applied per second over the last `window_s` seconds (at most 4096 events)."""
        now = time.monotonic()
        with self._lock:  # appended to by an apply on another thread (iterating then raises)
            recent = [t for t in self._event_times if now - t <= window_s]
        if len(recent) < 2:
            return 0.0
        return len(recent) / max(now - recent[0], 1e-9)

    def request_keys(
        self, token_ids: Sequence[int], lora_name: str = "", cache_salt: str = "", mm_items: Sequence[MmItem] = (),
        lora_path: str = "",
    ) -> list[int]:
        """The index keys of a request's full blocks. `lora_path` (the adapter's path as the engine
        was given it, which vLLM >= 0.31 hashes) and `mm_items` count in engine mode only."""
        if self.block_size is None:
            return []
        if self.engine_spec is not None:
            spec = replace(self.engine_spec, cache_salt=cache_salt, lora_name=lora_name, lora_path=lora_path,
                           mm_items=tuple(mm_items))
            return self.hasher.block_hashes(token_ids, spec)
        bs, lookahead = self.block_size, self.lookahead or 0
        if lookahead:
            # Each block over its window (its tokens and the L after them), hashed as one block of
            # B + L tokens: only blocks whose whole window exists get a key.
            check_token_ids(token_ids)
            token_ids = lookahead_windows(token_ids, bs, lookahead)
        if not mm_items:
            return self.hasher.prefix_keys(token_ids, bs + lookahead, lora_name, cache_salt)
        # Validated as in engine mode (vLLM's rule walks items sorted by offset).
        HashSpec("dynamo_xxh3", bs, mm_items=tuple(mm_items)).validate()
        mm_keys = block_mm_keys(mm_items, len(token_ids) // (bs + lookahead), bs, lookahead)
        return self.hasher.prefix_keys(token_ids, bs + lookahead, lora_name, cache_salt, mm_keys=mm_keys)

    def score(
        self, token_ids: Sequence[int], lora_name: str = "", cache_salt: str = "", mm_items: Sequence[MmItem] = (),
        lora_path: str = "",
    ) -> Score:
        """Each worker's consecutive matching blocks from the start of the request."""
        keys = self.request_keys(token_ids, lora_name, cache_salt, mm_items, lora_path)
        return self.score_keys(keys)

    def score_keys(self, keys: list[int]) -> Score:
        """`score` for precomputed request keys."""
        with self._lock:
            workers = list(self._workers.values())
            all_bits = 0
            for w in workers:
                all_bits |= 1 << w.bit
            any_depth = _walk(keys, self._holders, all_bits)
            if len(self._media) == 1:
                # One medium: its walk is the any-medium walk.
                by_medium = {name: any_depth for name in self._media}
            else:
                by_medium = {name: _walk(keys, [self._holders[m]], all_bits) for name, m in self._media.items()}
        block_size = self.block_size or 0
        result = []
        for w in workers:
            blocks = any_depth.get(w.bit, 0)
            media = {name: depth.get(w.bit, 0) for name, depth in by_medium.items()}
            result.append(WorkerScore(w.name, blocks, blocks * block_size, media))
        result.sort(key=lambda s: (-s.blocks, s.worker))
        return Score(block_size, keys, self.mode, result)

    # --- writing -------------------------------------------------------------------------------

    def apply_batch(self, worker: str, batch: Batch) -> None:
        """Applies a decoded batch published by `worker`."""
        with self._lock:
            w = self._worker(worker)
            now = time.monotonic()
            w.last_event = now
            for event in batch.events:
                self._apply(w, event)
                self._event_times.append(now)
            # Events of a class the decoder does not know: received, not applied.
            self.stats.events += len(batch.events) + batch.unknown_events
            self.stats.skipped_events += batch.unknown_events
            if self._blocks > self.max_blocks:
                self._evict()

    def apply(self, worker: str, event: Event) -> None:
        """Applies one decoded event."""
        self.apply_batch(worker, Batch(ts=time.time(), events=[event]))

    def drop_worker(self, worker: str) -> None:
        """Forgets everything `worker` holds (engine restart, unrecoverable gap, silence)."""
        with self._lock:
            w = self._workers.pop(worker, None)
            if w is None:
                return
            self._clear(w)
            self._free_bits.append(w.bit)
            self.stats.worker_resets += 1

    # --- snapshots (a replica catching up: router_adapter.nats_feed) ------------------------------

    def snapshot(self) -> bytes:
        """The whole state as bytes (msgpack: `SNAPSHOT_MAGIC`, the settings `restore` checks, the
        block size and lookahead (absent from snapshots taken before it was recorded: read as 0
        there), the counters, the media, and per worker its entries in storage order as flat
        [engine hash, key, media mask] triples). Who holds each key follows from the entries and is rebuilt on load."""
        with self._lock:
            media = sorted(self._media, key=self._media.__getitem__)
            workers = []
            for w in self._workers.values():
                flat: list[int] = []
                for engine_hash, key in w.keys.items():
                    flat += (engine_hash, key, w.media[engine_hash])
                workers.append((w.name, flat))
            return msgspec.msgpack.encode({
                "magic": SNAPSHOT_MAGIC, "settings": self._snapshot_settings(), "block_size": self.block_size,
                "lookahead": self.lookahead, "stats": [getattr(self.stats, f) for f in IndexStats.__slots__], "media": media, "workers": workers,
            })

    def restore(self, data: bytes) -> None:
        """Replaces the state with a `snapshot`'s; ValueError (and no change) for bytes that are not a
        snapshot of an index with the same mode, spec and group."""
        try:
            snap = msgspec.msgpack.decode(data)
            ok = isinstance(snap, dict) and snap.get("magic") == SNAPSHOT_MAGIC
        except msgspec.DecodeError:
            ok = False
        if not ok:
            raise ValueError("snapshot: not a PrefixIndex snapshot")
        if snap.get("settings") != self._snapshot_settings():
            raise ValueError(f"snapshot: taken from an index with other settings ({snap.get('settings')})")
        theirs = snap.get("block_size")
        if None not in (theirs, self._configured_block_size) and theirs != self._configured_block_size:
            # Its entries were hashed over blocks of another size: none would ever match a request.
            raise ValueError(f"snapshot: taken from an index with another block_size ({theirs!r})")
        # A snapshot from before lookahead was recorded keyed every block without it.
        lookahead = snap.get("lookahead", None if snap.get("block_size") is None or self.engine_spec else 0)
        if not (lookahead is None or (type(lookahead) is int and 0 <= lookahead <= MAX_LOOKAHEAD)):
            raise ValueError(f"snapshot: malformed (lookahead {lookahead!r})")
        if None not in (lookahead, self._configured_lookahead) and lookahead != self._configured_lookahead:
            # Its keys cover other windows: none would match a request keyed by this index.
            raise ValueError(f"snapshot: taken from an index with another lookahead ({lookahead!r})")
        problem = _snapshot_problem(snap) or _shared_bits_problem(snap, self.max_blocks)
        if problem is not None:
            raise ValueError(f"snapshot: malformed ({problem})")
        with self._lock:
            # The snapshot's (a learned size is replaced with the state it was learned for), as the
            # native index does.
            self.block_size = self.block_size if snap["block_size"] is None else snap["block_size"]
            self.lookahead = self.lookahead if lookahead is None else lookahead
            self.stats = IndexStats(*snap["stats"])
            self._workers, self._free_bits, self._next_bit, self._blocks = {}, [], 0, 0
            self._media = {name: m for m, name in enumerate(snap["media"])}
            self._holders = [{} for _ in self._media]
            self._extra_holds = {}
            for name, flat in snap["workers"]:
                self._restore_worker(self._worker(name), flat)
            # A snapshot of an index with a larger bound: held to this one's at once.
            if self._blocks > self.max_blocks:
                self._evict()

    def _snapshot_settings(self) -> list:
        spec = None if self.engine_spec is None else repr(self.engine_spec)
        return [self.mode, spec, self.group_idx]

    def _restore_worker(self, w: _Worker, flat: list[int]) -> None:
        wbit = 1 << w.bit
        for i in range(0, len(flat), 3):
            engine_hash, key, mask = flat[i], flat[i + 1], flat[i + 2]
            w.keys[engine_hash] = key
            w.media[engine_hash] = mask
            m = 0
            while mask:
                if mask & 1:
                    held = self._holders[m].get(key, 0)
                    if held & wbit:
                        self._add_extra(key, w.bit, m)
                    else:
                        self._holders[m][key] = held | wbit
                mask >>= 1
                m += 1
        self._blocks += len(w.keys)

    # --- internals (called with the lock held) -------------------------------------------------

    def _worker(self, name: str) -> _Worker:
        w = self._workers.get(name)
        if w is None:
            bit = self._free_bits.pop() if self._free_bits else self._next_bit
            if bit == self._next_bit:
                self._next_bit += 1
            w = self._workers[name] = _Worker(name, bit)
        return w

    def _medium(self, name: str) -> int | None:
        """The medium's number, registering it; None past `MAX_MEDIA` distinct media."""
        m = self._media.get(name)
        if m is None:
            if len(self._holders) >= MAX_MEDIA:
                return None
            m = self._media[name] = len(self._holders)
            self._holders.append({})
        return m

    def _apply(self, w: _Worker, event: Event) -> None:
        if isinstance(event, BlockStored):
            self._store(w, event)
        elif isinstance(event, BlockRemoved):
            self._remove(w, event)
        elif isinstance(event, AllBlocksCleared):
            self._clear(w)

    def _store(self, w: _Worker, event: BlockStored) -> None:
        indexed = event.locality != "REMOTE" and (event.group_idx is None or event.group_idx == self.group_idx)
        if self.block_size is None and indexed and 0 < event.block_size <= 0xFFFF_FFFF:
            # Only a size that fits 32 bits is learned (the native index's bound): a wilder first
            # store is skipped below and teaches nothing; nor does a store of another KV-cache
            # group (a hybrid model's other group has blocks of another size) or a remote one.
            self.block_size = event.block_size
        # vLLM's offloading connector names a block it offloaded without self-describing metadata
        # by its hash alone (block_size 0, no tokens): that block is held in the medium named.
        by_hash = event.block_size == 0 and not event.token_ids
        if (event.block_size != self.block_size and not by_hash) or not indexed:
            self.stats.skipped_events += 1
            return
        hashes = event.block_hashes
        if by_hash and self.engine_spec is None:
            # No tokens to key: only blocks the worker already holds (under their keys).
            held = _held_prefix(w.keys, hashes)
            if not held:
                self.stats.skipped_events += 1
                return
            hashes = hashes[:held]
            keys = [w.keys[h] for h in hashes]
        elif self.engine_spec is None and not self._lookahead_fits(event):
            self.stats.skipped_events += 1
            return
        elif self.engine_spec is not None:
            if event.bigram:
                # SGLang with EAGLE hashes each page's token pairs: no request hashed with the
                # spec could ever match these hashes (content keys of the first elements do).
                self.stats.skipped_events += 1
                return
            keys = hashes
        else:
            parent_key = None
            salt = ""
            # Leading blocks of the store the worker already holds: they keep their keys.
            held = 0
            if event.parent_block_hash is not None:
                parent_key = w.keys.get(event.parent_block_hash)
                if parent_key is None:
                    # A store in a second medium (vLLM's offloading connector stores a block held
                    # on GPU to CPU) after the parent left: an engine hash names its whole prefix,
                    # so a block the worker holds keeps its key, and the blocks after it chain
                    # from it. Orphans only from a first block that is not held.
                    held = _held_prefix(w.keys, hashes)
                    if not held:
                        self.stats.orphan_blocks += len(hashes)
                        return
                    parent_key = w.keys[hashes[held - 1]]
            else:
                salt = cache_salt_of(event)
            bs = self.block_size
            if len(event.token_ids) // bs > len(hashes):
                # More full blocks of tokens than hashes: the engine left blocks out (a hybrid
                # model's sliding-window or Mamba group stores sparse blocks), and the event does
                # not say which, so no hash's tokens are known. Skipped, not keyed by the wrong
                # tokens; `--kv-group` names the full-attention group.
                self.stats.skipped_events += 1
                return
            tokens = event.token_ids[held * bs : len(hashes) * bs]
            mm_keys = mm_keys_of(event)
            lookahead = self.lookahead or 0
            try:
                if held:
                    # The held blocks' tokens are not hashed, but checked as any store's are
                    # (their lookahead lists too, as the native index checks every block's).
                    check_token_ids(event.token_ids[: held * bs])
                    if lookahead:
                        full = min(held, len(event.token_ids[: len(hashes) * bs]) // bs)
                        for after in event.lookahead_token_ids[:full]:
                            check_token_ids(after)
                if lookahead:
                    # Each block followed by its own lookahead tokens, keyed as one block of B + L
                    # (`request_keys` keys a request's blocks the same way).
                    check_token_ids(tokens)
                    tokens = lookahead_windows(tokens, bs, lookahead, event.lookahead_token_ids[held:])
                if mm_keys:
                    keys = self.hasher.prefix_keys(tokens, bs + lookahead, event.lora_name or "", salt, parent_key,
                                                   mm_keys=mm_keys[held : len(hashes)])
                else:
                    keys = self.hasher.prefix_keys(tokens, bs + lookahead, event.lora_name or "", salt, parent_key)
            except InvalidTokens:
                # Ids no tokenizer has (negative, past 2^32): the event cannot be keyed. Skipped,
                # as the native index skips it, and the rest of the batch applied.
                self.stats.skipped_events += 1
                return
            if held:
                keys = [w.keys[h] for h in hashes[:held]] + keys
            if len(keys) < len(hashes):
                # Fewer tokens than blocks: index what the tokens cover.
                hashes = hashes[: len(keys)]
        if not hashes:
            # Nothing to hold: its medium is not registered (an index has room for 8 media,
            # which stores of no blocks could otherwise use up for good).
            return
        m = self._medium(event.medium)
        if m is None:
            self.stats.skipped_events += 1  # as the native index counts it
            return
        mbit = 1 << m
        wbit = 1 << w.bit
        holders = self._holders[m]
        wkeys, wmedia = w.keys, w.media
        added = 0
        for engine_hash, key in zip(hashes, keys):
            old_key = wkeys.get(engine_hash)
            if old_key is None:
                wkeys[engine_hash] = key
                wmedia[engine_hash] = mbit
                added += 1
            else:
                mask = wmedia[engine_hash]
                # A re-store (vLLM reports cache hits again in "full" mode) refreshes recency.
                del wkeys[engine_hash]
                wkeys[engine_hash] = old_key
                if mask & mbit:
                    continue
                wmedia[engine_hash] = mask | mbit
                key = old_key
            held = holders.get(key, 0)
            if held & wbit:
                self._add_extra(key, w.bit, m)
            else:
                holders[key] = held | wbit
        self._blocks += added
        self.stats.blocks_stored += len(hashes)

    def _lookahead_fits(self, event: BlockStored) -> bool:
        """Whether a store's lookahead is the index's, learning it from the first that says: a
        store without `lookahead_token_ids` has L = 0, one with them the length of its lists, which
        must be one per block hash, all of one length (an empty list tells nothing)."""
        lists = event.lookahead_token_ids
        if lists is None:
            theirs: int | None = 0
        elif len(lists) != len(event.block_hashes):
            return False
        else:
            theirs = len(lists[0]) if lists else None
            if any(len(after) != theirs for after in lists) or (theirs or 0) > MAX_LOOKAHEAD:
                return False
        if theirs is None:
            return True
        if self.lookahead is None:
            self.lookahead = theirs
        return theirs == self.lookahead

    def _remove(self, w: _Worker, event: BlockRemoved) -> None:
        if event.locality == "REMOTE" or (event.group_idx is not None and event.group_idx != self.group_idx):
            self.stats.skipped_events += 1
            return
        m = self._media.get(event.medium)
        for engine_hash in event.block_hashes:
            mask = w.media.get(engine_hash)
            if mask is None or m is None or not mask & (1 << m):
                self.stats.unknown_removals += 1
                continue
            key = w.keys[engine_hash]
            mask &= ~(1 << m)
            if mask:
                w.media[engine_hash] = mask
            else:
                del w.media[engine_hash]
                del w.keys[engine_hash]
                self._blocks -= 1
            self._release(key, w.bit, m)
            self.stats.blocks_removed += 1

    def _add_extra(self, key: int, bit: int, m: int) -> None:
        mine = self._extra_holds.setdefault(bit, {})
        mine[(key, m)] = mine.get((key, m), 0) + 1

    def _release(self, key: int, bit: int, m: int) -> None:
        mine = self._extra_holds.get(bit)
        extra = mine.get((key, m)) if mine else None
        if extra:
            if extra > 1:
                mine[(key, m)] = extra - 1
            else:
                del mine[(key, m)]
                if not mine:
                    del self._extra_holds[bit]
            return
        holders = self._holders[m]
        held = holders.get(key, 0) & ~(1 << bit)
        if held:
            holders[key] = held
        else:
            holders.pop(key, None)

    def _clear(self, w: _Worker) -> None:
        clear_bit = ~(1 << w.bit)
        for engine_hash, key in w.keys.items():
            mask = w.media[engine_hash]
            m = 0
            while mask:
                if mask & 1:
                    holders = self._holders[m]
                    held = holders.get(key, 0) & clear_bit
                    if held:
                        holders[key] = held
                    else:
                        holders.pop(key, None)
                mask >>= 1
                m += 1
        self._extra_holds.pop(w.bit, None)
        self._blocks -= len(w.keys)
        w.keys = {}
        w.media = {}

    def _evict(self) -> None:
        # Evict in chunks (1% of the bound) so a full index does not pay for eviction per block.
        # A pass takes at most a quarter of the largest worker: in a fleet of many small workers a
        # chunk is larger than one of them, and taking whole workers would leave them blind (their
        # newest blocks gone, and the stores that follow orphaned). Largest first, ties to the
        # worker registered first.
        target = self.max_blocks - max(1, self.max_blocks // 100)
        if self._blocks <= target:
            return
        largest = [(-len(w.keys), position, w) for position, w in enumerate(self._workers.values())]
        heapq.heapify(largest)
        while self._blocks > target and largest:
            _, position, w = heapq.heappop(largest)
            count = min(-(-len(w.keys) // EVICTION_PASS_SHARE), self._blocks - target)
            if count <= 0:
                return
            oldest = []
            for engine_hash in w.keys:
                oldest.append(engine_hash)
                if len(oldest) == count:
                    break
            for engine_hash in oldest:
                key = w.keys.pop(engine_hash)
                mask = w.media.pop(engine_hash)
                m = 0
                while mask:
                    if mask & 1:
                        self._release(key, w.bit, m)
                    mask >>= 1
                    m += 1
            self._blocks -= len(oldest)
            self.stats.evicted_blocks += len(oldest)
            heapq.heappush(largest, (-len(w.keys), position, w))


def _held_prefix(keys: dict[int, int], hashes: Sequence[int]) -> int:
    """How many of `hashes`, from the first, are in `keys` (a worker's engine hash -> key)."""
    held = 0
    for engine_hash in hashes:
        if engine_hash not in keys:
            break
        held += 1
    return held


#: Workers a snapshot may hold, as the native index (native/src/index/snapshot.rs): far past a real
#: fleet's engines, and what keeps a restore's eviction and every Score's rows bounded.
MAX_SNAPSHOT_WORKERS = 1 << 16


def _snapshot_problem(snap: dict) -> str | None:
    """What makes a decoded snapshot unfit to restore (it comes from another replica through the
    object store), checked before the index is touched; None when it is sound."""
    def is_int(value: object) -> bool:
        return type(value) is int

    stats, media, workers, block_size = snap.get("stats"), snap.get("media"), snap.get("workers"), snap.get(
        "block_size")
    if not (block_size is None or (is_int(block_size) and 0 < block_size <= 0xFFFF_FFFF)):
        return f"block_size {block_size!r}"
    if not (isinstance(stats, list) and len(stats) == len(IndexStats.__slots__)
            and all(is_int(v) and 0 <= v < 1 << 63 for v in stats)):
        return "stats"
    if not (isinstance(media, list) and all(isinstance(m, str) for m in media) and len(set(media)) == len(media)
            and len(media) <= MAX_MEDIA):
        return "media"
    if not isinstance(workers, list):
        return "workers"
    if len(workers) > MAX_SNAPSHOT_WORKERS:
        return f"{len(workers)} workers (a snapshot holds at most {MAX_SNAPSHOT_WORKERS})"
    names = set()
    for item in workers:
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], list)):
            return "a worker"
        name, flat = item
        if name in names:
            return f"worker {name!r} twice"
        names.add(name)
        hashes, masks = flat[0::3], flat[2::3]
        if len(flat) % 3 or not all(is_int(v) for v in flat):
            return f"the entries of worker {name!r}"
        if len(set(hashes)) != len(hashes) or not all(0 < m < 1 << len(media) for m in masks):
            return f"an entry of worker {name!r}"
    return None


#: What a restore's shared keys' worker bitsets may take, as the native index allows: 64 bytes per
#: block of this index's bound plus 64 MiB (native/src/index/snapshot.rs).
SHARED_BITS_PER_BLOCK = 64
SHARED_BITS_FIXED = 64 << 20


def _shared_bits_problem(snap: dict, max_blocks: int) -> str | None:
    """A key held by several workers keeps one int per medium as wide as its highest holder's bit
    (worker i of a snapshot gets bit i): keys shared by the first and the last of 65,536 workers
    take 8 KB each for a few bytes of entries. None when they fit what the bound allows."""
    budget = SHARED_BITS_PER_BLOCK * max_blocks + SHARED_BITS_FIXED
    highest: dict[tuple[int, int], int] = {}
    shared: set[tuple[int, int]] = set()
    total = 0
    for bit, (_, flat) in enumerate(snap["workers"]):
        for key, mask in zip(flat[1::3], flat[2::3]):
            m = 0
            while mask:
                if mask & 1:
                    held = (m, key)
                    before = highest.get(held)
                    if before is not None:
                        if held in shared:
                            total -= before // 8 + 1
                        shared.add(held)
                        total += bit // 8 + 1
                    highest[held] = bit
                mask >>= 1
                m += 1
            if total > budget:
                return (f"its shared keys' worker sets take more than {budget} bytes ({SHARED_BITS_PER_BLOCK} per "
                        f"block of this index's bound, plus {SHARED_BITS_FIXED}): not an index's")
    return None


def _walk(keys: list[int], holders_by_medium: list[dict[int, int]], active: int) -> dict[int, int]:
    """Worker bit -> number of leading `keys` it holds (in any of the given media)."""
    depth: dict[int, int] = {}
    if not active:
        return depth
    if len(holders_by_medium) == 1:
        present = list(map(holders_by_medium[0].get, keys, repeat(0, len(keys))))
    else:
        gets = [holders.get for holders in holders_by_medium]
        present = [reduce(or_, [get(key, 0) for get in gets], 0) for key in keys]
    # running[j]: the workers holding all of keys[:j]. Each value's bits are a subset of the one
    # before, so the list is non-increasing as integers and each value is one contiguous run: the
    # lookups and intersections run in C, and Python only visits the (at most one per worker)
    # places where a worker drops out.
    running = list(accumulate(present, and_, initial=active))
    j = 0
    current = active
    while current:
        j = bisect_right(running, -current, lo=j, key=neg)
        if j == len(running):
            _record(depth, current, len(keys))
            break
        _record(depth, current & ~running[j], j - 1)
        current = running[j]
    return depth


def _record(depth: dict[int, int], bits: int, value: int) -> None:
    while bits:
        low = bits & -bits
        depth[low.bit_length() - 1] = value
        bits ^= low
