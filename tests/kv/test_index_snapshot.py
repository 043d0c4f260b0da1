"""`PrefixIndex.snapshot` / `restore` (what a `--kv-nats` replica catches up from): a restored index
answers, counts and evolves exactly as the original, whatever operations came before and after."""

from __future__ import annotations

import random

import pytest

from router_adapter import PrefixIndex
from router_adapter.events import AllBlocksCleared, Batch, BlockRemoved, BlockStored
from router_adapter.spec import HashSpec

BS = 4
PROMPTS = [[(p * 131 + i * 7) % 97 for i in range(6 * BS)] for p in range(6)]


def random_ops(rng: random.Random, count: int) -> list[tuple[str, object]]:
    """(worker, event or None for drop_worker). Hashes may repeat content under another engine hash
    (an extra hold) and stores use two media, so the snapshot must carry every kind of entry."""
    ops: list[tuple[str, object]] = []
    held: dict[str, list[tuple[int, str]]] = {}
    for _ in range(count):
        worker = f"w{rng.randrange(4)}"
        mine = held.setdefault(worker, [])
        roll = rng.random()
        if roll < 0.05:
            ops.append((worker, None))
            mine.clear()
        elif roll < 0.1:
            ops.append((worker, AllBlocksCleared()))
            mine.clear()
        elif roll < 0.35 and mine:
            h, medium = mine.pop(rng.randrange(len(mine)))
            ops.append((worker, BlockRemoved([h], medium=medium)))
        else:
            prompt = rng.randrange(len(PROMPTS))
            n = rng.randint(1, 6)
            salt = rng.randrange(3)  # the same tokens under up to three engine hashes
            hashes = [hash((prompt, b, salt)) & ((1 << 64) - 1) for b in range(n)]
            medium = rng.choice(["GPU", "CPU"])
            ops.append((worker, BlockStored(hashes, None, PROMPTS[prompt][: n * BS], BS, medium=medium)))
            mine += [(h, medium) for h in hashes]
    return ops


def apply(index: PrefixIndex, ops: list[tuple[str, object]]) -> None:
    for worker, event in ops:
        if event is None:
            index.drop_worker(worker)
        else:
            index.apply_batch(worker, Batch(0.0, [event]))


def view(index: PrefixIndex) -> tuple:
    scores = [[(w.worker, w.blocks, w.blocks_by_medium) for w in index.score(p[:n]).workers]
              for p in PROMPTS for n in range(0, len(p) + 1, BS)]
    return scores, index.num_blocks, index.stats, {w: index.worker_blocks(w) for w in index.workers}


@pytest.mark.parametrize("seed", range(6))
def test_restored_index_equals_the_original_now_and_after(seed: int) -> None:
    rng = random.Random(seed)
    before, after = random_ops(rng, 300), random_ops(rng, 300)
    max_blocks = 40 if seed % 2 else 4_000_000  # odd seeds evict
    original = PrefixIndex(BS, max_blocks=max_blocks)
    apply(original, before)
    copy = PrefixIndex(BS, max_blocks=max_blocks)
    copy.restore(original.snapshot())
    assert view(copy) == view(original)
    assert copy.snapshot() == original.snapshot()
    apply(original, after)
    apply(copy, after)
    assert view(copy) == view(original)


def test_restore_refuses_what_is_not_a_matching_snapshot() -> None:
    index = PrefixIndex(BS)
    apply(index, random_ops(random.Random(1), 50))
    state = view(index)
    with pytest.raises(ValueError, match="not a PrefixIndex snapshot"):
        index.restore(b"\x93garbage")
    engine = PrefixIndex(engine_spec=HashSpec(algorithm="vllm_sha256_cbor", block_size=BS))
    with pytest.raises(ValueError, match="other settings"):
        engine.restore(index.snapshot())
    assert view(index) == state


def test_a_malformed_snapshot_changes_nothing() -> None:
    """A snapshot comes from another replica through the object store: one that parses but whose
    entries are malformed is refused with the index as it was (it used to be left half restored)."""
    import msgspec

    index = PrefixIndex(BS)
    apply(index, random_ops(random.Random(2), 50))
    state, snapshot = view(index), msgspec.msgpack.decode(index.snapshot())
    source = PrefixIndex(BS)
    apply(source, random_ops(random.Random(3), 50))
    broken = msgspec.msgpack.decode(source.snapshot())
    broken["workers"] = broken["workers"][:1] + [["w9", [1, 2]]]  # a worker's entries cut short
    worker = snapshot["workers"][0]
    for bad in [broken, {**snapshot, "workers": 7}, {**snapshot, "stats": [0] * 20}, {"magic": snapshot["magic"]},
                {**snapshot, "stats": ["x"] * 8}, {**snapshot, "block_size": "x"},
                {**snapshot, "workers": [worker, worker]},  # one worker twice
                {**snapshot, "workers": [[worker[0], worker[1][:2] + [0]]]},  # an entry in no medium
                # Past what the native index restores (its counters past 2^63 wrapped; more workers
                # than a fleet has made every Score and the restore's eviction slow).
                {**snapshot, "stats": [1 << 63] * 8},
                {**snapshot, "media": [f"m{i}" for i in range(9)]},  # more media than the index registers
                {**snapshot, "workers": [[f"w{i}", []] for i in range((1 << 16) + 1)]}]:
        with pytest.raises(ValueError, match="snapshot: "):
            index.restore(msgspec.msgpack.encode(bad))
        assert view(index) == state


@pytest.mark.parametrize("kind", ["python", "native"])
def test_block_size_on_restore_as_the_native_index(kind: str) -> None:
    """A configured block size refuses a snapshot of another (its entries were hashed over other
    blocks: none would ever match); an index that learned its size takes the snapshot's with its
    state. The Python index kept its own size with the other's entries."""
    from sidecar.factory import get_index_factory

    make = PrefixIndex if kind == "python" else get_index_factory("native")
    source = make(8)
    source.apply_batch("w", Batch(0.0, [BlockStored([1, 2], None, list(range(16)), 8)]))
    configured = make(BS)
    with pytest.raises(Exception, match="another block_size"):
        configured.restore(source.snapshot())
    assert configured.num_blocks == 0 and configured.block_size == BS
    learned = make()
    learned.apply_batch("x", Batch(0.0, [BlockStored([5], None, list(range(BS)), BS)]))
    assert learned.block_size == BS
    learned.restore(source.snapshot())
    assert (learned.block_size, learned.workers, learned.num_blocks) == (8, ["w"], 2)
    assert [w.blocks for w in learned.score(list(range(16))).workers] == [2]


def test_shared_keys_may_not_take_more_than_the_bound_sizes_a_snapshot_at() -> None:
    """As the native index (tests/kv/test_native_index_hostile.py): keys held by the first and the
    last of 65,536 workers in 8 media keep 8 KB ints each for a few bytes of entries; a restore
    stops at what 64 bytes per block of its bound allow, and changes nothing."""
    import msgspec

    index = PrefixIndex(BS, max_blocks=1000)
    apply(index, random_ops(random.Random(4), 20))
    state = view(index)
    media = [f"m{i}" for i in range(8)]
    shared = [x for key in range(1, 1200) for x in (key, 1000 + key, 0xFF)]
    workers = [["first", shared]] + [[f"w{i}", []] for i in range(1, 65_535)] + [["last", shared]]
    snap = msgspec.msgpack.decode(index.snapshot())
    hostile = {**snap, "media": media, "workers": workers}
    with pytest.raises(ValueError, match="shared keys' worker sets take more than"):
        index.restore(msgspec.msgpack.encode(hostile))
    assert view(index) == state
    # The same keys shared by the first two workers fit.
    index.restore(msgspec.msgpack.encode({**hostile, "workers": [["first", shared], ["second", shared]]}))
    assert 0 < index.num_blocks <= 1000 and index.workers == ["first", "second"]


@pytest.mark.parametrize("seed", range(3))
def test_a_snapshot_larger_than_the_bound_is_evicted_down_to_it_on_restore(seed: int) -> None:
    """Another replica's --kv-max-blocks may be larger: restored as is, the index stayed over this
    one's bound until its next event. Both indexes evict the same blocks."""
    from sidecar.factory import get_index_factory

    ops = random_ops(random.Random(seed), 300)
    views = []
    for make in (PrefixIndex, get_index_factory("native")):
        original = make(BS, max_blocks=4_000_000)
        apply(original, ops)
        bound = original.num_blocks // 2
        copy = make(BS, max_blocks=bound)
        copy.restore(original.snapshot())
        assert copy.num_blocks <= bound and copy.stats.evicted_blocks > original.stats.evicted_blocks
        views.append(view(copy))
    assert views[0] == views[1]
