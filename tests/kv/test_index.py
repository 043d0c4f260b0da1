"""The prefix index: content keys from events, engine-hash bookkeeping, scoring, bounds; for the
Python index (with native and reference hashing) and the native one (sidecar.native.kv_index)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from router_adapter import _reference
from router_adapter.events import AllBlocksCleared, BlockRemoved, BlockStored
from router_adapter.index import PrefixIndex
from router_adapter.spec import HashSpec
from sidecar.factory import get_hasher, get_index_factory
from tests.kv.cases import spec_of, tokens_of

BS = 4
TOKENS = list(range(100, 132))  # 8 blocks


def engine_hashes(tokens: list[int], **kw: str) -> list[int]:
    return _reference.block_hashes(tokens, HashSpec("vllm_sha256", BS, **kw))


def store(tokens: list[int], start: int, end: int, *, medium: str = "GPU", lora: str | None = None,
          salt: str = "", **kw: str) -> BlockStored:
    """A vLLM-like store of blocks [start, end) of `tokens`."""
    hashes = engine_hashes(tokens, cache_salt=salt, lora_name=lora or "", lora_path="/p" if lora else "", **kw)
    extra = None
    if start == 0 and (salt or lora):
        extra = [tuple(x for x in (lora, salt) if x)]
    return BlockStored(
        block_hashes=hashes[start:end], parent_block_hash=hashes[start - 1] if start else None,
        token_ids=tokens[start * BS : end * BS], block_size=BS, medium=medium, lora_name=lora, extra_keys=extra,
    )


def depths(index: PrefixIndex, tokens: list[int], **kw: str) -> dict[str, int]:
    return {w.worker: w.blocks for w in index.score(tokens, **kw).workers}


def make_index(kind: str, *args: object, **kw: object) -> PrefixIndex:
    """A Python index hashing with `kind` ("native", "reference"), or the native index."""
    if kind == "native-index":
        return get_index_factory("native")(*args, **kw)
    return PrefixIndex(*args, hasher=get_hasher(kind), **kw)


KINDS = ["native", "reference", "native-index"]


@pytest.fixture(params=KINDS)
def index(request: pytest.FixtureRequest) -> PrefixIndex:
    return make_index(request.param, BS)


def test_stores_in_spans_match_the_whole_request(index: PrefixIndex) -> None:
    index.apply("a", store(TOKENS, 0, 3))
    index.apply("a", store(TOKENS, 3, 6))
    index.apply("b", store(TOKENS, 0, 2))
    score = index.score(TOKENS + [1, 2])
    assert [(w.worker, w.blocks, w.tokens) for w in score.workers] == [("a", 6, 24), ("b", 2, 8)]
    assert len(score.block_hashes) == 8 and score.mode == "content"
    # A request that diverges in block 2 matches only the common prefix.
    other = TOKENS[:8] + [7] * 24
    assert depths(index, other) == {"a": 2, "b": 2}


def test_removal_is_per_medium_and_breaks_the_prefix(index: PrefixIndex) -> None:
    index.apply("a", store(TOKENS, 0, 4))
    index.apply("a", store(TOKENS, 0, 4, medium="CPU"))
    index.apply("a", BlockRemoved(engine_hashes(TOKENS)[1:2], medium="GPU"))
    w = index.score(TOKENS).workers[0]
    assert (w.blocks, w.blocks_by_medium) == (4, {"GPU": 1, "CPU": 4})
    index.apply("a", BlockRemoved(engine_hashes(TOKENS)[1:2], medium="CPU"))
    assert depths(index, TOKENS) == {"a": 1}
    assert index.num_blocks == 3


def test_clear_and_drop_worker(index: PrefixIndex) -> None:
    index.apply("a", store(TOKENS, 0, 4))
    index.apply("b", store(TOKENS, 0, 4))
    index.apply("a", AllBlocksCleared())
    assert depths(index, TOKENS) == {"b": 4, "a": 0}
    index.drop_worker("b")
    assert depths(index, TOKENS) == {"a": 0}
    assert index.num_blocks == 0


def test_lora_and_salt_separate_tenants(index: PrefixIndex) -> None:
    index.apply("plain", store(TOKENS, 0, 4))
    index.apply("salted", store(TOKENS, 0, 2, salt="t1"))
    index.apply("salted", store(TOKENS, 2, 4, salt="t1"))  # continuation: no salt in the event
    index.apply("lora", store(TOKENS, 0, 4, lora="ad"))
    assert depths(index, TOKENS) == {"plain": 4, "lora": 0, "salted": 0}
    assert depths(index, TOKENS, cache_salt="t1") == {"salted": 4, "lora": 0, "plain": 0}
    assert depths(index, TOKENS, lora_name="ad") == {"lora": 4, "plain": 0, "salted": 0}


def test_orphans_and_unknown_removals_are_counted(index: PrefixIndex) -> None:
    index.apply("a", store(TOKENS, 2, 4))  # parent never seen
    index.apply("a", BlockRemoved([12345]))
    assert index.stats.orphan_blocks == 2 and index.stats.unknown_removals == 1
    assert depths(index, TOKENS) == {"a": 0}


def test_restore_is_idempotent_and_equal_content_under_two_engine_hashes(index: PrefixIndex) -> None:
    index.apply("a", store(TOKENS, 0, 4))
    index.apply("a", store(TOKENS, 0, 4))
    assert index.num_blocks == 4
    # Same tokens, different engine hashes (e.g. different images behind the placeholders).
    index.apply("a", store_with_seed(TOKENS, "x"))
    index.apply("a", BlockRemoved(engine_hashes(TOKENS)[:4]))
    assert depths(index, TOKENS) == {"a": 4}  # still held under the other engine hashes


def store_with_seed(tokens: list[int], seed: str) -> BlockStored:
    hashes = _reference.block_hashes(tokens, HashSpec("vllm_sha256", BS, seed=seed))
    return BlockStored(hashes[:4], None, tokens[: 4 * BS], BS)


def test_other_block_sizes_groups_and_remote_blocks_are_skipped(index: PrefixIndex) -> None:
    index.apply("a", store(TOKENS, 0, 2))
    index.apply("a", BlockStored([1], None, list(range(8)), 8))
    remote = store(TOKENS, 0, 4)
    remote.locality = "REMOTE"
    index.apply("b", remote)
    grouped = store(TOKENS, 0, 4)
    grouped.group_idx = 1
    index.apply("c", grouped)
    assert index.stats.skipped_events == 3
    assert depths(index, TOKENS)["a"] == 2


@pytest.mark.parametrize("kind", KINDS)
def test_block_size_is_learned_from_the_first_store(kind: str) -> None:
    index = make_index(kind)
    assert index.score(TOKENS).workers == []
    index.apply("a", store(TOKENS, 0, 3))
    assert index.block_size == BS and depths(index, TOKENS) == {"a": 3}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("skipped", ["other_group", "remote"])
def test_block_size_is_not_learned_from_a_store_that_is_skipped(kind: str, skipped: str) -> None:
    """A hybrid model's other KV-cache group (blocks of another size) or a remote store came first
    and fixed the block size: every store of the indexed group was skipped after it, for good."""
    index = make_index(kind)
    other = BlockStored([77], None, list(range(64)), 64)
    if skipped == "other_group":
        other.group_idx = 1
    else:
        other.locality = "REMOTE"
    index.apply("a", other)
    index.apply("a", store(TOKENS, 0, 3))
    assert index.block_size == BS and depths(index, TOKENS) == {"a": 3} and index.stats.skipped_events == 1


@pytest.mark.parametrize("kind", KINDS)
def test_stores_of_no_blocks_register_no_medium(kind: str) -> None:
    """The native index has room for 8 media: 8 stores of no blocks under made-up media used up
    the slots for good, and every store in another medium (GPU included) was skipped after them;
    the Python index, then without the bound, indexed it."""
    index = make_index(kind)
    for i in range(8):
        index.apply("junk", BlockStored([], None, [], BS, medium=f"m{i}"))
    index.apply("a", store(TOKENS, 0, 3))
    workers = {w.worker: w for w in index.score(TOKENS).workers}
    assert workers["a"].blocks == 3 and workers["a"].blocks_by_medium == {"GPU": 3}
    assert index.stats.skipped_events == 0


@pytest.mark.parametrize("kind", KINDS)
def test_eviction_keeps_memory_bounded(kind: str) -> None:
    index = make_index(kind, BS, max_blocks=100)
    for i in range(60):
        seq = [i * 1000 + t for t in range(4 * BS)]
        index.apply("big" if i % 3 else "small", BlockStored(engine_hashes(seq), None, seq, BS))
    assert index.num_blocks <= 100
    assert index.stats.evicted_blocks == 240 - index.num_blocks
    newest = [59 * 1000 + t for t in range(4 * BS)]
    assert depths(index, newest)["big"] == 4


@pytest.mark.parametrize("kind", KINDS)
def test_a_bound_of_0_keeps_no_blocks(kind: str) -> None:
    """What `--kv-max-blocks 0` documents: every store is evicted as it is applied."""
    index = make_index(kind, BS, max_blocks=0)
    seq = list(range(4 * BS))
    index.apply("a", BlockStored(engine_hashes(seq), None, seq, BS))
    assert (index.num_blocks, index.stats.evicted_blocks, depths(index, seq).get("a", 0)) == (0, 4, 0)


@pytest.mark.parametrize("kind", KINDS)
def test_eviction_trims_many_workers_rather_than_wiping_one(kind: str) -> None:
    """A fleet at the bound: 200 workers of 20 blocks, a round (1% of 4,000) larger than any one of
    them. Each pass takes at most a quarter of the largest worker, so every worker keeps its
    newest sequence; taking a whole worker per pass left some blind, their newest blocks gone."""
    index, sequences = fleet_past_the_bound(make_index(kind, BS, max_blocks=4000))
    assert index.num_blocks <= 4000 and index.stats.evicted_blocks == 200 * 24 - index.num_blocks
    for worker, seq in sequences[-200:]:
        assert depths(index, seq)[worker] == 4, worker


def fleet_past_the_bound(index: PrefixIndex) -> tuple[PrefixIndex, list[tuple[str, list[int]]]]:
    """200 workers store six 4-block sequences each, round-robin; the sixth round passes the bound."""
    sequences = []
    for round_ in range(6):
        for n in range(200):
            seq = [(round_ * 1000 + n) * 100 + t for t in range(4 * BS)]
            index.apply(f"w{n:03}", store(seq, 0, 4))
            sequences.append((f"w{n:03}", seq))
    return index, sequences


def test_eviction_across_workers_is_the_same_in_both_indexes() -> None:
    python, sequences = fleet_past_the_bound(make_index("native", BS, max_blocks=4000))
    native, _ = fleet_past_the_bound(make_index("native-index", BS, max_blocks=4000))
    assert python.stats == native.stats
    for _, seq in sequences:
        assert depths(python, seq) == depths(native, seq)


@pytest.mark.parametrize("kind", KINDS)
def test_engine_mode_matches_the_engines_hashes(kind: str) -> None:
    spec = HashSpec("vllm_sha256", BS, seed="0")
    index = make_index(kind, engine_spec=spec)
    hashes = _reference.block_hashes(TOKENS, spec)
    # No token ids needed: engine mode keys on the published hashes.
    index.apply("a", BlockStored(hashes[:5], None, [], BS))
    score = index.score(TOKENS)
    assert score.mode == "engine" and score.block_hashes == hashes
    assert [(w.worker, w.blocks) for w in score.workers] == [("a", 5)]
    salted = _reference.block_hashes(TOKENS, HashSpec("vllm_sha256", BS, seed="0", cache_salt="t"))
    index.apply("b", BlockStored(salted[:2], None, [], BS))
    assert depths(index, TOKENS, cache_salt="t") == {"b": 2, "a": 0}


@pytest.mark.parametrize("kind", KINDS)
def test_engine_mode_matches_a_lora_request_given_the_adapters_path(kind: str) -> None:
    """vLLM >= 0.31 hashes ("lora", name, path) into every block of an adapter's request: the
    request must name the path too (ScoreRequest.lora_path), or it matches nothing."""
    spec = HashSpec("vllm_sha256_cbor", BS, seed="0")
    index = make_index(kind, engine_spec=spec)
    hashes = _reference.block_hashes(TOKENS, HashSpec("vllm_sha256_cbor", BS, seed="0", lora_name="sql",
                                                      lora_path="/adapters/sql"))
    index.apply("a", BlockStored(hashes[:5], None, [], BS, lora_name="sql"))
    assert depths(index, TOKENS, lora_name="sql", lora_path="/adapters/sql") == {"a": 5}
    assert depths(index, TOKENS, lora_name="sql") == {"a": 0}
    assert depths(index, TOKENS, lora_name="sql", lora_path="/adapters/other") == {"a": 0}
    assert index.request_keys(TOKENS, "sql", lora_path="/adapters/sql") == hashes


def _lookahead_vector(**want: object) -> dict:
    """A vectors.json case of vLLM 0.33.0's own lookahead hashes (tests/kv/generate_vectors.py)."""
    cases = json.loads((Path(__file__).resolve().parents[1] / "data" / "kv" / "vectors.json").read_text())["cases"]
    return next(c for c in cases if c["spec"].get("lookahead") and all(
        bool(c["spec"].get(k)) == v if isinstance(v, bool) else c["spec"].get(k) == v for k, v in want.items()))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("want", [
    {"algorithm": "vllm_sha256", "lookahead": 1, "mm_items": False, "lora_name": False},
    {"algorithm": "vllm_sha256_cbor", "lookahead": 3, "mm_items": True, "lora_name": True, "cache_salt": True},
], ids=["L1", "L3-lora-mm-salt"])
def test_engine_mode_matches_an_engine_hashing_with_lookahead(kind: str, want: dict) -> None:
    """vLLM >= 0.33 with an EAGLE/EAGLE3/MTP drafter and prefix caching publishes lookahead hashes
    (each block's hash covers the next L tokens): an index given the engine's lookahead matches the
    stores the engine published (its own values, from vectors.json); one without matches nothing."""
    case = _lookahead_vector(**want)
    spec, tokens = spec_of(case), tokens_of(case)
    published = [int(h) for h in case["hashes"]]
    facts = {"lora_name": spec.lora_name, "lora_path": spec.lora_path, "cache_salt": spec.cache_salt,
             "mm_items": spec.mm_items}
    index = make_index(kind, engine_spec=replace(spec, lora_name="", lora_path="", cache_salt="", mm_items=()))
    bs = spec.block_size
    index.apply("a", BlockStored(published[:2], None, tokens[: 2 * bs], bs, lora_name=spec.lora_name or None))
    index.apply("a", BlockStored(published[2:], published[1], tokens[2 * bs : len(published) * bs], bs,
                                 lora_name=spec.lora_name or None))
    index.apply("b", BlockStored(published[:1], None, tokens[:bs], bs, lora_name=spec.lora_name or None))
    score = index.score(tokens, **facts)
    assert score.block_hashes == published
    assert [(w.worker, w.blocks) for w in score.workers] == [("a", len(published)), ("b", 1)]
    # A shorter request: its last full block lacks L followers, so it has no key (nor in the engine).
    shorter = len(published) * bs - 1
    assert (shorter - spec.lookahead) // bs == len(published) - 1
    assert depths(index, tokens[:shorter], **facts) == {"a": len(published) - 1, "b": 1}
    # The same engine spec without the lookahead (as before `lookahead` existed) matches nothing.
    plain = make_index(kind, engine_spec=replace(spec, lora_name="", lora_path="", cache_salt="", mm_items=(),
                                                 lookahead=0))
    plain.apply("a", BlockStored(published, None, tokens[: len(published) * bs], bs, lora_name=spec.lora_name or None))
    assert depths(plain, tokens, **facts) == {"a": 0}


def test_walk_equals_the_definition_on_random_holdings() -> None:
    """`_walk` (C-level lookups, visiting only drop-out points) against the plain definition: each
    active worker's count of leading keys it holds in any medium. Holdings here need not be
    prefix-closed, so drop-outs happen anywhere."""
    import random

    from router_adapter.index import _walk

    rng = random.Random(7)
    for _ in range(3000):
        keys = [rng.randrange(40) for _ in range(rng.randrange(30))]
        media = [{k: rng.getrandbits(5) for k in rng.sample(range(40), rng.randrange(40))}
                 for _ in range(rng.choice([0, 1, 1, 2, 3]))]
        active = rng.getrandbits(5)
        expected = {}
        for bit in range(5):
            if active >> bit & 1:
                held = 0
                while held < len(keys) and any(m.get(keys[held], 0) >> bit & 1 for m in media):
                    held += 1
                expected[bit] = held
        assert _walk(keys, media, active) == expected


@pytest.mark.parametrize("kind", KINDS)
def test_the_event_rate_is_read_while_events_are_applied(kind: str) -> None:
    """KvStatus reads the event rate on one thread while the subscriber applies on another: the
    Python index read its deque of event times without its lock ("deque mutated during iteration",
    which KvStatus answered as INTERNAL, 612 times in 37k reads with a short switch interval)."""
    import sys
    import threading

    index = make_index(kind, BS)
    done = threading.Event()

    def apply() -> None:
        seq = 0
        while not done.is_set():
            tokens = list(range(seq * BS, (seq + 1) * BS))
            index.apply("w", BlockStored(engine_hashes(tokens), None, tokens, BS))
            seq += 1

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    applier = threading.Thread(target=apply)
    applier.start()
    try:
        for _ in range(20_000):
            assert index.events_per_second() >= 0.0
    finally:
        done.set()
        applier.join()
        sys.setswitchinterval(interval)


@pytest.mark.parametrize("kind", KINDS)
def test_a_store_of_sparse_blocks_is_skipped_not_misattributed(kind: str) -> None:
    """A hybrid model's sliding-window (or Mamba) group: vLLM 0.33's `BlockPool.cache_full_blocks`
    publishes `token_ids` for the whole range but leaves null or masked blocks out of
    `block_hashes`, without saying which. Keying the hashes by the first blocks' tokens attached
    wrong content keys; the store is skipped and counted instead. The full group is indexed."""
    index = make_index(kind, BS, group_idx=1)
    tokens = TOKENS[: 4 * BS]
    index.apply("a", BlockStored([1, 2], None, tokens, BS, group_idx=1))  # blocks 2 and 3 only
    assert index.num_blocks == 0 and index.stats.skipped_events == 1
    assert depths(index, tokens) == {"a": 0}
    index.apply("a", BlockStored([11, 12, 13, 14], None, tokens, BS, group_idx=1))
    assert depths(index, tokens) == {"a": 4} and index.stats.skipped_events == 1


@pytest.mark.parametrize("kind", KINDS)
def test_a_held_block_stored_in_another_medium_keeps_its_key_without_its_parent(kind: str) -> None:
    """vLLM's offloading connector stores a block the worker holds on GPU to CPU, naming its
    parent, which the GPU may have evicted meanwhile. The block's engine hash names its whole
    prefix, so it keeps the content key it has; the blocks after it chain from it. Dropped as an
    orphan, the CPU copy was lost when the GPU evicted the block too."""
    index = make_index(kind, BS)
    hashes = engine_hashes(TOKENS)
    index.apply("a", store(TOKENS, 0, 3))
    index.apply("a", BlockRemoved(hashes[:1]))
    index.apply("a", store(TOKENS, 1, 2, medium="CPU"))  # parent: block 0, no longer held
    index.apply("a", BlockRemoved(hashes[1:2]))  # the GPU copy
    assert index.worker_blocks("a") == 2 and index.stats.orphan_blocks == 0
    # Blocks 2 (held) and 3 (not yet): 3 is keyed after 2's key.
    index.apply("a", store(TOKENS, 2, 4, medium="CPU"))
    index.apply("a", store(TOKENS, 0, 1))
    w = index.score(TOKENS).workers[0]
    assert (w.blocks, w.blocks_by_medium) == (4, {"GPU": 1, "CPU": 0})
    index.apply("a", store(TOKENS, 0, 1, medium="CPU"))
    assert index.score(TOKENS).workers[0].blocks_by_medium == {"GPU": 1, "CPU": 4}
    # A first block that is not held: an orphan, as before.
    index.apply("a", store(TOKENS, 5, 7, medium="CPU"))
    assert index.stats.orphan_blocks == 2 and index.worker_blocks("a") == 4


def placeholder(engine_hash: int, medium: str = "CPU") -> BlockStored:
    """vLLM's offloading connector's store without self-describing metadata: the hash alone."""
    return BlockStored([engine_hash], None, [], 0, medium=medium, group_idx=0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("mode", ["content", "engine"])
def test_a_block_offloaded_by_hash_alone_is_held_in_its_medium(kind: str, mode: str) -> None:
    """A store of block size 0 without tokens (the offloading connector's placeholder) says the
    worker holds that engine hash in the medium named. Engine mode keys on the hash: indexed. In
    content mode it has no tokens to key: indexed when the worker holds the block (its key),
    skipped otherwise. Either way no block size is learned from it."""
    spec = HashSpec("vllm_sha256", BS) if mode == "engine" else None
    index = make_index(kind, engine_spec=spec)
    hashes = engine_hashes(TOKENS)
    index.apply("b", placeholder(hashes[0]))
    assert index.block_size == (BS if mode == "engine" else None)
    index.apply("a", store(TOKENS, 0, 4))
    index.apply("a", placeholder(hashes[1]))
    index.apply("a", BlockRemoved(hashes[1:2]))
    scores = {w.worker: (w.blocks, w.blocks_by_medium) for w in index.score(TOKENS).workers}
    if mode == "engine":
        assert scores == {"a": (4, {"GPU": 1, "CPU": 0}), "b": (1, {"GPU": 0, "CPU": 1})}
        assert index.stats.skipped_events == 0
    else:
        assert scores == {"a": (4, {"GPU": 1, "CPU": 0}), "b": (0, {"GPU": 0, "CPU": 0})}
        assert index.stats.skipped_events == 1
    index.apply("a", BlockRemoved(hashes[1:2], medium="CPU"))
    assert depths(index, TOKENS)["a"] == 1
