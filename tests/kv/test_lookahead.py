"""Content keys with vLLM's lookahead hashing (vLLM >= 0.33 with an EAGLE/EAGLE3/MTP drafter hashes
each block over its tokens and the L tokens after it): both indexes key a block over that window,
and score only blocks the engine would reuse.

Data first: tests/data/kv/events/vllm-0.33-lookahead-*.msgpack are vLLM 0.33.0's own stores, and
each request's `engine_blocks` is how many leading blocks vLLM's own hasher finds held
(tests/kv/generate_lookahead_events.py). Then the Python index (the reference) against the native
one on seeded random operation sequences with lookahead, and snapshots."""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import msgspec
import pytest

from router_adapter import _reference
from router_adapter.events import DecodeError, decode_batch
from router_adapter.index import PrefixIndex
from router_adapter.spec import HashSpec, MmItem
from sidecar.native.kv_index import NativePrefixIndex

DATA = Path(__file__).resolve().parents[1] / "data" / "kv" / "events"
SCENARIOS = ["over", "mm", "mixed"]


def load(name: str) -> tuple[bytes, dict]:
    stem = f"vllm-0.33-lookahead-{name}-int"
    return (DATA / f"{stem}.msgpack").read_bytes(), json.loads((DATA / f"{stem}.expected.json").read_text())


def request_args(r: dict) -> dict:
    return {"lora_name": r["lora_name"] or "", "cache_salt": r["cache_salt"],
            "mm_items": [MmItem(i, o, n) for i, o, n in r["mm_items"]]}


def fed(kind: str, payload: bytes, **options):  # noqa: ANN003, ANN201
    """An index of `kind` holding the payload as worker w0 (the native one by its own decoder, or
    through the Python decoder's events)."""
    if kind == "python":
        index = PrefixIndex(**options)
        index.apply_batch("w0", decode_batch(payload))
    else:
        index = NativePrefixIndex(**options)
        if kind == "native":
            index.apply_payload("w0", payload)
        else:
            index.apply_batch("w0", decode_batch(payload))
    return index


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_decoder_reads_the_engines_lookahead_lists(name: str) -> None:
    payload, expected = load(name)
    batch = decode_batch(payload)
    assert [e.lookahead_token_ids for e in batch.events] == [e["lookahead_token_ids"] for e in expected["events"]]
    assert all(e.lookahead_token_ids for e in batch.events)


@pytest.mark.parametrize("configured", [False, True])
@pytest.mark.parametrize("kind", ["python", "native", "native-events"])
@pytest.mark.parametrize("name", SCENARIOS)
def test_content_scores_are_the_engines_cached_blocks(name: str, kind: str, configured: bool) -> None:
    """`over`: a request diverging right after a block boundary, or ending on one, scored blocks the
    engine cannot reuse (engine 0, we said 1); `mm`: an image starting right at a block boundary is
    in the previous block's window, and nothing matched from there (engine 3, we said 0)."""
    payload, expected = load(name)
    options = {"block_size": 4, "lookahead": expected["lookahead"]} if configured else {}
    index = fed(kind, payload, **options)
    for r in expected["requests"]:
        score = index.score(r["token_ids"], **request_args(r))
        assert score.workers[0].blocks == r["engine_blocks"], r
    assert index.stats.skipped_events == 0 and index.stats.orphan_blocks == 0


@pytest.mark.parametrize("make", [PrefixIndex, NativePrefixIndex])
def test_a_store_of_another_lookahead_is_skipped_and_counted(make) -> None:  # noqa: ANN001
    payload, expected = load("over")
    index = make(4, lookahead=2)
    index.apply_batch("w0", decode_batch(payload))
    assert index.stats.skipped_events == 1 and index.num_blocks == 0
    # Learned from the first store: then a store without the field (L = 0) is another lookahead.
    learned = make()
    learned.apply_batch("w0", decode_batch(payload))
    plain = msgspec.msgpack.encode([0.0, [{"type": "BlockStored", "block_hashes": [5], "parent_block_hash": None,
                                           "token_ids": [1, 2, 3, 4], "block_size": 4}]])
    learned.apply_batch("w1", decode_batch(plain))
    assert learned.stats.skipped_events == 1 and learned.workers == ["w0", "w1"] and learned.num_blocks == 2


@pytest.mark.parametrize("make", [PrefixIndex, NativePrefixIndex])
def test_without_lookahead_nothing_changes(make) -> None:  # noqa: ANN001
    """L = 0 (configured, learned from a store without the field, or from empty lists) keys blocks
    exactly as before lookahead existed."""
    tokens = list(range(40, 52))
    keys = _reference.prefix_keys(tokens, 4)
    for options, lists in [({"lookahead": 0}, None), ({}, None), ({}, [[], [], []])]:
        index = make(4, **options)
        event = {"type": "BlockStored", "block_hashes": [7, 8, 9], "parent_block_hash": None, "token_ids": tokens,
                 "block_size": 4, "lookahead_token_ids": lists}
        index.apply_batch("w0", decode_batch(msgspec.msgpack.encode([0.0, [event]])))
        assert index.score(tokens).block_hashes == keys and index.score(tokens).workers[0].blocks == 3


@pytest.mark.parametrize("make", [PrefixIndex, NativePrefixIndex])
def test_snapshots_record_the_lookahead(make) -> None:  # noqa: ANN001
    payload, expected = load("mixed")
    source = make()
    source.apply_batch("w0", decode_batch(payload))
    restored = make()
    restored.restore(source.snapshot())
    for r in expected["requests"]:
        assert restored.score(r["token_ids"], **request_args(r)).workers[0].blocks == r["engine_blocks"]
    with pytest.raises(Exception, match="lookahead"):
        make(lookahead=1).restore(source.snapshot())
    # Without lookahead (L = 0 learned) a snapshot is what it was before lookahead was recorded.
    plain = make()
    plain.apply_batch("w0", decode_batch(msgspec.msgpack.encode([0.0, [{
        "type": "BlockStored", "block_hashes": [5], "parent_block_hash": None, "token_ids": [1, 2, 3, 4],
        "block_size": 4}]])))
    old = plain.snapshot()
    if make is PrefixIndex:
        decoded = msgspec.msgpack.decode(old)
        assert decoded.pop("lookahead") == 0
        old = msgspec.msgpack.encode(decoded)
    else:
        assert struct.unpack_from("<I", old, 8)[0] == 1  # version 1: old replicas read it
    for options, fits in [({}, True), ({"lookahead": 0}, True), ({"lookahead": 1}, False)]:
        index = make(**options)
        if not fits:
            with pytest.raises(Exception, match="lookahead"):
                index.restore(old)
            continue
        index.restore(old)
        assert index.score([1, 2, 3, 4]).workers[0].blocks == 1


@pytest.mark.parametrize("make", [PrefixIndex, NativePrefixIndex])
def test_the_index_reports_its_lookahead(make) -> None:  # noqa: ANN001
    """What KvStatus shows: configured, or learned from a store or a snapshot (None until then: 0
    is a value); None in engine mode, whose spec carries its own."""
    payload, expected = load("mixed")
    assert expected["lookahead"] == 3
    assert [make(4).lookahead, make(4, lookahead=0).lookahead, make(lookahead=2).lookahead] == [None, 0, 2]
    assert make(engine_spec=HashSpec("vllm_sha256", 4, seed="0", lookahead=1)).lookahead is None
    learned = make(4)
    learned.apply_batch("w0", decode_batch(payload))
    assert learned.lookahead == 3
    restored = make()
    restored.restore(learned.snapshot())
    assert restored.lookahead == 3
    # A snapshot taken before anything was learned leaves a configured lookahead as it was.
    configured = make(4, lookahead=2)
    configured.restore(make(4).snapshot())
    assert configured.lookahead == 2


# --- the Python index against the native one -------------------------------------------------

BS = 4


def random_store(rng: random.Random, lookahead: int, prompts: list, damage: bool) -> tuple[dict, list[int]]:
    """A store of a span of one prompt's blocks, as vLLM publishes it, sometimes made wrong."""
    tokens, spec = rng.choice(prompts)
    hashes = _reference.block_hashes(tokens, spec)
    # From the start, or continuing a span (an orphan when the worker does not hold its parent).
    first = rng.choice([0, 0, rng.randrange(len(hashes))])
    end = rng.randrange(first + 1, len(hashes) + 1)
    mm = _reference.block_mm_keys(spec.mm_items, end, BS, lookahead) if spec.mm_items else [[]] * end
    # vLLM's untagged extra keys: the LoRA name, the block's [identifier, offset] pairs, the salt.
    extra = [([spec.lora_name] if spec.lora_name else []) + [list(k) for k in mm[i]]
             + ([spec.cache_salt] if i == 0 and spec.cache_salt else []) for i in range(first, end)]
    lists = [tokens[(i + 1) * BS:(i + 1) * BS + lookahead] for i in range(first, end)]
    event = {"type": "BlockStored", "block_hashes": hashes[first:end],
             "parent_block_hash": hashes[first - 1] if first else None,
             "token_ids": tokens[first * BS:end * BS], "block_size": BS, "lora_name": spec.lora_name or None,
             "extra_keys": [keys or None for keys in extra] if any(extra) else None,
             "lookahead_token_ids": lists}
    damage = rng.random() if damage else 1.0
    if damage < 0.05:
        event["lookahead_token_ids"] = None  # another lookahead (0)
    elif damage < 0.1 and lists:
        event["lookahead_token_ids"] = lists[:-1]  # not one list per hash
    elif damage < 0.15 and lists:
        event["lookahead_token_ids"] = lists[:-1] + [lists[-1] + [1]]  # ragged
    elif damage < 0.2 and lists:
        event["lookahead_token_ids"] = [[1 << 33] * lookahead] + lists[1:]  # a token id past 2^32
    return event, hashes[first:end]


@pytest.mark.parametrize("seed", range(6))
def test_python_and_native_agree_with_lookahead(seed: int) -> None:
    rng = random.Random(seed)
    lookahead = [1, 3, 1, 2, 5, 1][seed]
    base = [rng.randrange(1000) for _ in range(BS * 6)]
    prompts = []
    for _ in range(6):
        cut = rng.choice([0, 1, 2, 3]) * BS + rng.choice([0, 0, 1])
        tokens = base[:cut] + [rng.randrange(1000) for _ in range(BS * 6 + lookahead - cut)]
        mm = ()
        if rng.random() < 0.5:
            o = rng.choice([BS, 2 * BS - 1, 2 * BS + 1, rng.randrange(BS * 4)])
            mm = (MmItem(f"img-{rng.randrange(2)}", o, rng.randrange(1, 2 * BS)),)
        prompts.append((tokens, HashSpec("vllm_sha256", BS, seed="0", lookahead=lookahead, mm_items=mm,
                                         lora_name=rng.choice(["", "ad"]), cache_salt=rng.choice(["", "t"]))))
    options = rng.choice([{}, {"block_size": BS, "lookahead": lookahead}])
    python, native, native_events = PrefixIndex(**options), NativePrefixIndex(**options), NativePrefixIndex(**options)
    held: dict[str, list[int]] = {}
    matched = 0
    for step in range(150):
        worker = rng.choice(["w0", "w1", "w2"])
        r = rng.random()
        if r < 0.7:
            event, hashes = random_store(rng, lookahead, prompts, damage=step >= 5)
            held.setdefault(worker, []).extend(hashes)
        elif r < 0.9 and held.get(worker):
            event = {"type": "BlockRemoved", "block_hashes": rng.sample(held[worker], 1)}
        else:
            event = {"type": "AllBlocksCleared"}
        payload = msgspec.msgpack.encode([float(step), [event]])
        python.apply_batch(worker, decode_batch(payload))
        native.apply_payload(worker, payload)
        native_events.apply_batch(worker, decode_batch(payload))
        tokens, spec = rng.choice(prompts)
        cut = rng.randrange(len(tokens) + 1)
        args = {"lora_name": spec.lora_name, "cache_salt": spec.cache_salt,
                "mm_items": [m for m in spec.mm_items if m.offset + m.length <= cut]}
        want = python.score(tokens[:cut], **args)
        matched += bool(want.workers and want.workers[0].blocks)
        for index in (native, native_events):
            assert index.score(tokens[:cut], **args) == want
            assert index.stats == python.stats and index.num_blocks == python.num_blocks
    assert matched > 20 and python.stats.skipped_events and python.num_blocks  # the walk did something
    snapshot = NativePrefixIndex(**options)
    snapshot.restore(native.snapshot())
    copy = PrefixIndex(**options)
    copy.restore(python.snapshot())
    for tokens, spec in prompts:
        args = {"lora_name": spec.lora_name, "cache_salt": spec.cache_salt, "mm_items": list(spec.mm_items)}
        assert snapshot.score(tokens, **args).workers == copy.score(tokens, **args).workers \
            == python.score(tokens, **args).workers


@pytest.mark.parametrize("bad", ["x", ["x"], [["x"]], [[1.5]], [[1], 2]])
def test_a_malformed_lookahead_field_is_refused_by_both_decoders(bad) -> None:  # noqa: ANN001
    payload = msgspec.msgpack.encode([0.0, [{"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None,
                                             "token_ids": [1, 2, 3, 4], "block_size": 4,
                                             "lookahead_token_ids": bad}]])
    with pytest.raises(DecodeError, match="lookahead_token_ids"):
        decode_batch(payload)
    index = NativePrefixIndex()
    with pytest.raises(DecodeError, match="lookahead_token_ids"):
        index.apply_payload("w0", payload)
    assert index.stats.events == 0
