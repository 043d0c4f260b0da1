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
