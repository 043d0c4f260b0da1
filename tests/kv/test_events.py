"""Event decoding on payloads recorded with the engines' own msgspec classes (tests/data/kv/events),
plus the shapes those recordings do not cover (unknown fields, omitted rank, malformed input)."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from router_adapter.events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    DecodeError,
    cache_salt_of,
    decode_batch,
    hash_value,
    mm_keys_of,
)
from router_adapter.index import PrefixIndex
from router_adapter.router import KvRouter, ModelOptions
from sidecar.native.kv_index import NativePrefixIndex

DATA = Path(__file__).resolve().parents[1] / "data" / "kv" / "events"
RECORDED = sorted(p.name.removesuffix(".msgpack") for p in DATA.glob("*.msgpack"))


def test_recordings_cover_both_encodings_and_hash_kinds() -> None:
    assert {"vllm-0.33-int", "vllm-0.33-bytes", "vllm-0.23-int", "vllm-0.23-bytes", "sglang-int",
            "sglang-eagle-int", "vllm-0.33-mm-int", "vllm-0.33-mm-bytes", "vllm-0.33-lookahead-over-int",
            "vllm-0.33-lookahead-mm-int", "vllm-0.33-lookahead-mixed-int"} <= set(RECORDED)


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_batches_decode_to_the_expected_events(name: str) -> None:
    batch = decode_batch((DATA / f"{name}.msgpack").read_bytes())
    expected = json.loads((DATA / f"{name}.expected.json").read_text())
    assert batch.ts == expected["ts"]
    assert len(batch.events) == len(expected["events"])
    for event, want in zip(batch.events, expected["events"]):
        assert type(event).__name__ == want["type"]
        if isinstance(event, BlockStored):
            assert [str(h) for h in event.block_hashes] == want["block_hashes"]
            assert (None if event.parent_block_hash is None else str(event.parent_block_hash)) == want["parent_block_hash"]
            assert event.token_ids == want["token_ids"]
            assert event.bigram == want.get("bigram", False)
            assert event.block_size == want["block_size"]
            assert event.medium == want["medium"]
            assert event.lora_name == want["lora_name"]
            assert cache_salt_of(event) == want["cache_salt"]
            assert [[list(k) for k in keys] for keys in mm_keys_of(event)] == want.get("mm_keys", [])
            assert event.lookahead_token_ids == want.get("lookahead_token_ids")
        elif isinstance(event, BlockRemoved):
            assert [str(h) for h in event.block_hashes] == want["block_hashes"]
            assert event.medium == want["medium"]


def _encode(obj: object) -> bytes:
    return msgspec.msgpack.encode(obj)


def test_unknown_fields_and_a_missing_rank_are_accepted() -> None:
    stored = {
        "type": "BlockStored", "block_hashes": [2**64 - 1, -1, b"\x00" * 24 + b"\x01" * 8], "parent_block_hash": -2,
        "token_ids": list(range(48)), "block_size": 16, "lora_id": None, "medium": None, "lora_name": None,
        "ownership": "x", "session_id": "s", "lookahead_token_ids": [[1]], "a_field_from_the_future": {"k": [1]},
    }
    batch = decode_batch(_encode([1.5, [stored, {"type": "AllBlocksCleared", "new": 1}]]))
    assert batch.dp_rank is None
    event = batch.events[0]
    assert isinstance(event, BlockStored)
    assert event.block_hashes == [2**64 - 1, 2**64 - 1, int.from_bytes(b"\x01" * 8, "big")]
    assert event.parent_block_hash == 2**64 - 2
    assert event.medium == "GPU"  # unnamed medium = GPU
    assert isinstance(batch.events[1], AllBlocksCleared)


def test_positional_arrays_with_trailing_fields() -> None:
    # vLLM <= 0.23: [tag, hashes, parent, tokens, block_size, lora_id, medium, lora_name, extra_keys,
    # group_idx, kind, window, ...more from later versions].
    arr = ["BlockStored", [5], None, list(range(16)), 16, None, "CPU", "ad", [["ad", "salt"]], 1, "full", None, "x", "y"]
    event = decode_batch(_encode([0.0, [arr, ["BlockRemoved", [5], "CPU", 1]], 3])).events[0]
    assert isinstance(event, BlockStored)
    assert (event.medium, event.lora_name, event.group_idx) == ("CPU", "ad", 1)
    assert cache_salt_of(event) == "salt"


@pytest.mark.parametrize(
    "payload",
    [b"", b"\xc1", _encode({"ts": 1}), _encode([1.0, "x"]), _encode([1.0, [{"type": 3}]]),
     _encode([1.0, [{"type": "BlockStored", "block_hashes": ["s"]}]]), _encode([1.0, [["BlockRemoved"]]]),
     _encode([1.0, [{"type": "BlockRemoved", "block_hashes": [b"short"]}]])],
)
def test_malformed_payloads_raise_decode_error(payload: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_batch(payload)


def test_hash_value_normalization() -> None:
    assert hash_value(-1) == 2**64 - 1
    assert hash_value(2**63) == 2**63
    assert hash_value(bytes(range(32))) == int.from_bytes(bytes(range(24, 32)), "big")


def test_multimodal_key_extraction_rules() -> None:
    """Block i's `[identifier, offset]` pairs, in order; bare strings (LoRA name, salt, a legacy bare
    identifier), bytes, booleans and other shapes are not multimodal keys."""
    def stored(extra):  # noqa: ANN001, ANN202
        return BlockStored([1, 2, 3], None, list(range(48)), 16, lora_name="ad", extra_keys=extra)

    assert mm_keys_of(stored(None)) == mm_keys_of(stored([None, ("ad",)])) == []
    assert mm_keys_of(stored([("ad", ["x", 3], "salt", ("y", -2)), None, ["ad", ["x", -13]]])) == [
        [("x", 3), ("y", -2)], [], [("x", -13)]]
    assert mm_keys_of(stored([["img-bare", "salt"], [b"embeds", ["x", True], ["x", 1, 2], [1, "x"], ["x", 1.0],
                                                   [["x", 1]]]])) == []


def test_salt_extraction_rules() -> None:
    def stored(extra, lora=None, parent=None, salt=None):  # noqa: ANN001, ANN202
        return BlockStored([1], parent, list(range(16)), 16, lora_name=lora, extra_keys=extra, cache_salt=salt)

    assert cache_salt_of(stored([("salt",)])) == "salt"
    assert cache_salt_of(stored([("ad", ["img", 3], "salt")], lora="ad")) == "salt"
    assert cache_salt_of(stored([("ad",)], lora="ad")) == ""
    assert cache_salt_of(stored([("salt",)], parent=7)) == ""  # only a sequence start carries it
    assert cache_salt_of(stored(None, salt="sg")) == "sg"  # SGLang's field
    assert cache_salt_of(stored([None])) == ""


# [[[...[nil]...]]], 2,000 arrays deep: past both decoders' limits (the native one refuses nesting past
# 1,000; msgspec fails near Python's recursion limit, which depends on the stack already in use).
DEEP = b"\x91" * 2000 + b"\xc0"
DEEP_STORE = (b"\x84\xa4type\xabBlockStored\xacblock_hashes\x91\x01\xa9token_ids\x90"
              b"\xaaextra_keys\x91" + DEEP)  # a store whose extra_keys holds it


@pytest.mark.parametrize("payload", [b"\x92\x00\x91" + DEEP, b"\x92\x00\x91" + DEEP_STORE, b"\x92\x00" + DEEP])
def test_deeply_nested_payloads_are_refused_as_malformed(payload: bytes) -> None:
    """msgspec raised RecursionError on a few kilobytes nested that deep: the subscriber took it
    for a failing sink (an `apply_error` reset of the worker) and the NATS feed reset every worker
    of the run. It is refused like any malformed payload, as the native decoder refuses it."""
    with pytest.raises(DecodeError, match="nested too deep"):
        decode_batch(payload)
    good = _encode([0.0, [{"type": "BlockStored", "block_hashes": [7], "parent_block_hash": None,
                           "token_ids": [1, 2, 3, 4], "block_size": 4}]])
    for factory in (PrefixIndex, NativePrefixIndex):
        router = KvRouter([], models={"m": ModelOptions(block_size=4)}, silence_timeout_s=None, index_factory=factory)
        refused = router.feed_payloads("m", [("a", good), ("b", payload), ("b", good)])
        assert [position for position, _ in refused] == [1], factory
        index = router.index("m")
        assert (index.worker_blocks("a"), index.worker_blocks("b")) == (1, 1), factory


def _stored_map(token_ids: list, **fields: object) -> dict:
    return {"type": "BlockStored", "block_hashes": [7, 8], "parent_block_hash": None, "token_ids": token_ids,
            "block_size": 2, "lora_id": None, "medium": "GPU", **fields}


def _both(payload: bytes) -> tuple[object, object]:
    """What each decoder makes of a payload: the Python batch (or DecodeError) and the native
    index's stats after applying it (or DecodeError)."""
    results = []
    try:
        results.append(decode_batch(payload))
    except DecodeError as e:
        results.append(e)
    native = NativePrefixIndex(2)
    try:
        native.apply_payload("w", payload)
        results.append(native.stats)
    except DecodeError as e:
        results.append(e)
    return results[0], results[1]


def test_bigram_token_ids_decode_to_their_first_elements() -> None:
    """SGLang with EAGLE publishes every token of a page as the pair [t_i, t_i+1]
    (`mem_cache/events.py` `record_store`): both decoders accept it as the first elements."""
    pairs = [[10, 11], [11, 12], [12, 13], [13, 99]]
    for event in (_stored_map(pairs), ["BlockStored", [7, 8], None, pairs, 2, None, "GPU"]):
        payload = _encode([1.0, [event, {"type": "BlockRemoved", "block_hashes": [5]}], 0])
        python, native = _both(payload)
        stored = python.events[0]
        assert isinstance(stored, BlockStored) and stored.bigram
        assert stored.token_ids == [10, 11, 12, 13] and stored.block_size == 2
        assert not isinstance(native, DecodeError) and native.blocks_stored == 2 and native.unknown_removals == 1
    # A plain store is not bigram; a first element past 32 bits is kept (the index skips the store).
    assert not decode_batch(_encode([1.0, [_stored_map([1, 2, 3, 4])]])).events[0].bigram
    wide = decode_batch(_encode([1.0, [_stored_map([[2**40, 1], [1, 2], [2, 3], [3, 4]])]])).events[0]
    assert wide.token_ids[0] == 2**40
    python, native = _both(_encode([1.0, [_stored_map([[2**40, 1], [1, 2], [2, 3], [3, 4]])]]))
    assert native.skipped_events == 1


@pytest.mark.parametrize("token_ids", [
    [1, [2, 3]], [[1, 2], 3], [[1, 2, 3]], [[1]], [[1, "a"]], [["a", 1]], [[1, 2], [1.5, 2]], [[1, None]],
    [[1, 2], "x"],
])
def test_malformed_bigram_token_ids_are_refused_by_both(token_ids: list) -> None:
    python, native = _both(_encode([1.0, [_stored_map(token_ids)]]))
    assert isinstance(python, DecodeError) and isinstance(native, DecodeError)


def _raw_map(*pairs: tuple[object, object]) -> bytes:
    """A map with its pairs as given (keys repeated, in any order): msgspec encodes dicts."""
    return bytes([0x80 | len(pairs)]) + b"".join(_encode(k) + _encode(v) for k, v in pairs)


def _batch_of(*raw_events: bytes) -> bytes:
    return b"\x93" + _encode(1.0) + bytes([0x90 | len(raw_events)]) + b"".join(raw_events) + b"\x00"


REMOVAL = _encode({"type": "BlockRemoved", "block_hashes": [5]})


@pytest.mark.parametrize("unknown", [
    _encode({"type": "BlockMoved", "block_hashes": [1], "to": "CPU"}),
    _raw_map(("note", [1, {"a": b"x"}]), ("type", "KVFuture")),  # the tag after other keys
    _raw_map(("type", "KVFuture"), (1, 2)),  # after the tag, keys need only be well-formed
    _raw_map(("type", "KVFuture"), ("type", "BlockStored")),  # the first "type" names the class
    _encode(["BlockMoved", [1], {"x": None}]),
    _encode(["KVFuture"]),
    _raw_map(("type", "BlockStore\xe9")),
])
def test_events_of_unknown_classes_are_left_out_and_counted(unknown: bytes) -> None:
    """A newer engine's event class: skipped by both decoders, not a refusal of the batch (whose
    removal is applied)."""
    payload = _batch_of(unknown, REMOVAL, unknown)
    python, native = _both(payload)
    assert [type(e) for e in python.events] == [BlockRemoved] and python.unknown_events == 2
    assert native.events == 3 and native.skipped_events == 2 and native.unknown_removals == 1
    index = PrefixIndex(2)
    index.apply_batch("w", python)
    assert index.stats == native


@pytest.mark.parametrize("event", [
    _raw_map((1, 2), ("type", "KVFuture")),  # a key before the tag that is no string
    _raw_map(("type", 3)),
    _raw_map(("type", None)),
    _raw_map(("block_hashes", [1])),  # no tag
    _raw_map(("type", "BlockStored"), ("block_hashes", [1]), ("type", "KVFuture")),  # two classes
    _encode([]),
    _encode([3, "BlockMoved"]),
    _encode({"type": "KVFuture", "x": 1})[:-1],  # cut short
])
def test_events_that_name_no_class_are_still_refused(event: bytes) -> None:
    python, native = _both(_batch_of(event, REMOVAL))
    assert isinstance(python, DecodeError) and isinstance(native, DecodeError)


def test_sglang_eagle_recording_keys_like_its_plain_tokens() -> None:
    """The bigram store SGLang's own publisher recorded (pages of [t_i, t_i+1] pairs): content mode
    keys it as a request's plain tokens; its hashes are of the pairs (not what SGLang publishes for
    the plain tokens), so engine mode skips it in both indexes."""
    from router_adapter import _reference
    from router_adapter.spec import HashSpec

    payload = (DATA / "sglang-eagle-int.msgpack").read_bytes()
    tokens = list(range(2000, 2064))
    stored = decode_batch(payload).events[0]
    spec = HashSpec("sglang_sha256", 16)
    assert not set(stored.block_hashes) & {h & (2**64 - 1) for h in _reference.sglang_block_hashes(tokens, spec)}
    for factory in (PrefixIndex, NativePrefixIndex):
        content = factory(16)
        content.apply_batch("w", decode_batch(payload))
        # The batch removes the second node's two pages again.
        assert [w.blocks for w in content.score(tokens + [1]).workers] == [2]
        assert content.stats.blocks_stored == 4 and content.stats.blocks_removed == 2
        engine = factory(16, engine_spec=spec)
        engine.apply_batch("w", decode_batch(payload))
        assert engine.stats.skipped_events == 1 and engine.num_blocks == 0
