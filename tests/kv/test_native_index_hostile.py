"""The native index under input chosen to hurt it: snapshots (written by another replica, read from
the object store) and engine payloads. Each case broke the process or the index before its fix;
the ones that aborted (an allocation failure is not a panic the C ABI can catch) run in a child
process with an address-space limit, so a regression shows as a failed child, not a dead run.

Snapshots are built from the layout in native/src/index/snapshot.rs."""

from __future__ import annotations

import os
import resource
import struct
import subprocess
import sys

import pytest
import xxhash
from msgspec.msgpack import encode

from router_adapter import PrefixIndex
from router_adapter.events import Batch, BlockRemoved, BlockStored
from sidecar.errors import InvalidArgument
from sidecar.native import kv_index
from sidecar.native.kv_index import NativePrefixIndex
from tests.conftest import REPO
from tests.kv.test_native_index import refused_one_at_a_time

BS = 4
MASK64 = (1 << 64) - 1
# MurmurHash3's finalizer and its inverse: the index's `mix` before it was keyed per process.
C1, C2 = 0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53
C1_INV, C2_INV = pow(C1, -1, 1 << 64), pow(C2, -1, 1 << 64)
JOINED = kv_index._joined


def unkeyed_unmix(h: int) -> int:
    k = h ^ (h >> 33)
    k = (k * C2_INV) & MASK64
    k ^= k >> 33
    k = (k * C1_INV) & MASK64
    return k ^ (k >> 33)


def snapshot(workers: list[tuple[str, int, list[tuple[int, ...]]]], next_order: int | None = None,
             media: tuple[str, ...] = ("GPU",), stats: tuple[int, ...] = (0,) * 8) -> bytes:
    """A content-mode snapshot: workers as (name, order, [(engine hash, key, stamp[, media mask])]),
    the mask 1 (the first medium) unless given."""
    out = bytearray(b"SCKVIDX1") + struct.pack("<I", 1)
    out += struct.pack("<BIQq", 1, BS, 4_000_000, 0) + struct.pack("<I", 0)  # block size, bound, group, no spec
    out += struct.pack("<8Q", *stats)
    out += struct.pack("<Q", len(workers) if next_order is None else next_order)
    out += struct.pack("<B", len(media)) + b"".join(struct.pack("<H", len(m)) + m.encode() for m in media)
    out += struct.pack("<I", len(workers))
    for name, order, entries in workers:
        out += struct.pack("<I", len(name)) + name.encode() + struct.pack("<QI", order, len(entries))
        for engine_hash, key, stamp, *mask in entries:
            out += struct.pack("<QQI", engine_hash, key, (stamp << 8) | (mask[0] if mask else 1))
    return bytes(out + struct.pack("<Q", xxhash.xxh3_64_intdigest(bytes(out))))


def stored(hashes: list[int], block_size: int = BS) -> Batch:
    tokens = list(range(len(hashes) * BS))  # for a wilder block size, its event is skipped anyway
    return Batch(ts=0.0, events=[BlockStored(block_hashes=hashes, parent_block_hash=None, token_ids=tokens,
                                             block_size=block_size)])


def run_child(code: str, limit_gib: int) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter whose address space is limited to `limit_gib` GiB."""
    limit = limit_gib << 30

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          preexec_fn=limited, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_two_entries_with_one_stamp_are_refused() -> None:
    """Eviction counts on distinct stamps: such a snapshot, restored, made every later apply
    panic (the index stayed over its bound, so the next apply evicted again)."""
    index = NativePrefixIndex(BS, max_blocks=2)
    with pytest.raises(InvalidArgument, match='worker "a": two entries with one stamp'):
        index.restore(snapshot([("a", 0, [(1, 11, 5), (2, 12, 5)])]))
    index.apply_batch("b", stored([7, 8, 9]))  # the index still works, and evicts
    assert index.num_blocks <= 2


WIDE_STAMPS = """
from sidecar.native.kv_index import NativePrefixIndex
from tests.kv.test_native_index_hostile import snapshot
index = NativePrefixIndex(4)
index.restore(snapshot([(f"w{i}", i, [(1, 100 + i, 0), (2, 200 + i, (1 << 24) - 1)]) for i in range(1000)]))
print(index.num_blocks, index.allocated_bytes)
"""


def test_stamps_spread_wide_are_renumbered_in_their_order() -> None:
    """A worker's live stamps are a bitmap over their range: 1,000 workers of two entries stamped
    0 and 2^24 - 1 (a 60 KB snapshot) took 2 GB. Renumbered by rank, the order (which eviction
    follows) is kept."""
    child = run_child(WIDE_STAMPS, limit_gib=1)
    assert child.returncode == 0, child.stderr[-2000:]
    blocks, allocated = map(int, child.stdout.split())
    assert blocks == 2000 and allocated < 16 << 20
    # One worker, stamps out of order and far apart: the oldest go first.
    index = NativePrefixIndex(BS, max_blocks=3)
    index.restore(snapshot([("a", 0, [(1, 11, 900_000), (2, 12, 7), (3, 13, (1 << 24) - 1)])]))
    index.apply_batch("b", stored([20]))  # 4 blocks: down to 2, the largest worker's two oldest
    assert (index.worker_blocks("a"), index.worker_blocks("b")) == (1, 1)
    index.apply_batch("a", Batch(ts=0.0, events=[BlockRemoved(block_hashes=[3])]))
    assert (index.worker_blocks("a"), index.stats.unknown_removals) == (0, 0)  # hash 3 was the one kept


def test_worker_count_and_orders_are_checked() -> None:
    index = NativePrefixIndex(BS)
    too_many = bytearray(snapshot([]))[:-12] + struct.pack("<I", (1 << 16) + 1)
    too_many += struct.pack("<Q", xxhash.xxh3_64_intdigest(bytes(too_many)))
    with pytest.raises(InvalidArgument, match=r"65537 workers \(a snapshot holds at most 65536\)"):
        index.restore(bytes(too_many))
    with pytest.raises(InvalidArgument, match="an order another worker has"):
        index.restore(snapshot([("a", 3, []), ("b", 3, [])], next_order=9))
    with pytest.raises(InvalidArgument, match="next_order is not above"):
        index.restore(snapshot([("a", 3, [])], next_order=3))
    with pytest.raises(InvalidArgument, match="next_order is not above"):
        index.restore(snapshot([("a", 3, [])], next_order=MASK64))


HASH_FLOOD = """
from router_adapter.spec import HashSpec
from sidecar.native.kv_index import NativePrefixIndex
from tests.kv.test_native_index_hostile import unkeyed_unmix
import msgspec
# Hashes whose unkeyed mix shares its low 45 bits: one segment of the worker table (2^18 slots) and
# 40 more could only split on ever higher bits, doubling the directory each time.
hashes = [unkeyed_unmix(i << 45) for i in range(1, (1 << 18) + 41)]
payload = msgspec.msgpack.encode([0.0, [{"type": "BlockStored", "block_hashes": hashes,
                                        "parent_block_hash": None, "token_ids": [], "block_size": 1}]])
index = NativePrefixIndex(engine_spec=HashSpec("vllm_sha256", 1, seed="0"))
index.apply_payload("w", payload)
print(index.num_blocks, index.allocated_bytes)
"""


def test_chosen_engine_hashes_do_not_crowd_the_tables() -> None:
    """The tables' `mix` was a public bijection: hashes chosen through its inverse took the
    process to an allocation failure (abort) with one 2.4 MB payload. Keyed per process, they
    land as random ones do."""
    child = run_child(HASH_FLOOD, limit_gib=2)
    assert child.returncode == 0, child.stderr[-2000:]
    blocks, allocated = map(int, child.stdout.split())
    assert blocks == (1 << 18) + 40 and allocated < 64 << 20


EVENTS_DECLARED = """
from sidecar.native.kv_index import NativePrefixIndex
from router_adapter.events import DecodeError
n = 8_000_000  # events declared, each one byte (an int, not an event): refused at the first
payload = bytes([0x93, 0xcb]) + bytes(8) + bytes([0xdd]) + n.to_bytes(4, "big") + bytes(n) + bytes([0])
try:
    NativePrefixIndex(4).apply_payload("w", payload)
except DecodeError as e:
    print("refused:", e)
"""


def test_declared_events_are_not_reserved_ahead_of_the_bytes() -> None:
    """Each declared event reserved an `Event` (176 bytes) before any was read: an 8 MB payload of
    one-byte elements asked for 1.4 GB, an abort under a 2 GiB address space."""
    child = run_child(EVENTS_DECLARED, limit_gib=2)
    assert child.returncode == 0 and "refused: payload: events[0]" in child.stdout, child.stderr[-2000:]


@pytest.mark.parametrize("make", [PrefixIndex, NativePrefixIndex])
def test_a_block_size_past_32_bits_is_not_learned(make) -> None:  # noqa: ANN001
    """The native index cannot learn such a size; the Python one did, and the two diverged for good."""
    index = make()
    index.apply_batch("w", stored([1], block_size=1 << 32))
    index.apply_batch("w", stored([2]))
    assert (index.block_size, index.num_blocks, index.stats.skipped_events) == (BS, 1, 1)


def test_shared_keys_may_not_take_more_than_the_bound_sizes_a_snapshot_at() -> None:
    """A shared key's worker bitsets are as wide as its highest holder's id, in each medium: keys
    held by the first and the last of 65,536 workers (all but two empty) in 8 media take 64 KB
    each for 40 bytes of entries (with a million workers, a 24 MB snapshot aborted a replica on an
    allocation failure). A restore stops at what 64 bytes per block of its bound allow."""
    media = tuple(f"m{i}" for i in range(8))
    shared = [(key, 1000 + key, key, 0xFF) for key in range(1, 1200)]
    workers = [("first", 0, shared)] + [(f"w{i}", i, []) for i in range(1, 65_535)]
    workers.append(("last", 65_535, [(h, k, s + 2000, m) for h, k, s, m in shared]))
    hostile = snapshot(workers, media=media)
    index = NativePrefixIndex(BS, max_blocks=1000)
    index.apply_batch("w", stored([1, 2]))
    with pytest.raises(InvalidArgument, match="shared keys' worker sets take more than"):
        index.restore(hostile)
    assert index.num_blocks == 2 and index.workers == ["w"]  # unchanged


def test_a_medium_named_twice_and_counters_past_2_63_are_refused() -> None:
    """Blocks held under a second slot of one medium's name could never be removed by events (they
    name the first); counters restored near 2^64 wrapped to zero at the next event."""
    index = NativePrefixIndex(BS)
    with pytest.raises(InvalidArgument, match="a medium named twice"):
        index.restore(snapshot([("a", 0, [(1, 11, 0, 0b10)])], media=("GPU", "GPU")))
    with pytest.raises(InvalidArgument, match="past 2\\^63"):
        index.restore(snapshot([("a", 0, [(1, 11, 0)])], stats=(MASK64,) * 8))
    index.restore(snapshot([("a", 0, [(1, 11, 0)])], media=("GPU", "CPU"), stats=((1 << 63) - 1,) * 8))
    assert index.num_blocks == 1


def test_a_run_with_many_refused_payloads_is_joined_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """After each refused payload the rest of the run was joined into new buffers again: 1,000
    refused 200 KB payloads copied some 100 GB. The buffers are now joined once and each call
    after a refusal starts inside them; what is applied and refused is what one call per payload
    gives, with worker names of several bytes per character (the offsets count bytes)."""
    good = [encode([0.0, [{"type": "BlockStored", "block_hashes": [i + 1], "parent_block_hash": None,
                           "token_ids": list(range(BS)), "block_size": BS}]]) for i in range(300)]
    bad = encode([0.0, [{"type": "BlockRemoved", "block_hashes": [1.5]}]])
    # Refusals alone, in runs, and far apart; the last payload refused too.
    layout = [bad] * 70 + good[:100] + [bad, good[100], bad] + good[101:300] + [bad] * 5
    items = [(("wé", "w0", "ø")[i % 3], data) for i, data in enumerate(layout)]
    one, many = NativePrefixIndex(BS), NativePrefixIndex(BS)
    expected = refused_one_at_a_time(one, items)
    joins = []
    monkeypatch.setattr(kv_index, "_joined", lambda run: joins.append(len(run)) or JOINED(run))
    assert [(i, str(e)) for i, e in many.apply_payloads(items)] == expected
    assert joins == [len(items)] and len(expected) == 77
    assert many.stats == one.stats and many.num_blocks == one.num_blocks == 300
    for worker in ("wé", "w0", "ø"):
        assert many.worker_blocks(worker) == one.worker_blocks(worker) == 100
