"""The library's public surface, and the helper Tokenize/Render use for block hashes."""

from __future__ import annotations

import router_adapter
from router_adapter import _reference
from router_adapter.spec import HashSpec, MmItem
from sidecar.factory import get_hasher
from sidecar.hashing import block_hashes_for
from sidecar.v1 import preprocessor_pb2 as pb


def test_export_list_is_pinned() -> None:
    assert sorted(router_adapter.__all__) == [
        "AllBlocksCleared", "Batch", "BlockHasher", "BlockRemoved", "BlockStored", "DecodeError", "HashSpec",
        "InvalidSpec", "InvalidTokens", "KvRouter", "MmItem", "ModelOptions", "PrefixIndex", "REFERENCE_HASHER", "RouterAdapterError",
        "Score", "Source", "Subscriber", "WorkerScore", "block_hashes", "decode_batch", "prefix_keys",
    ]
    for name in router_adapter.__all__:
        assert getattr(router_adapter, name) is not None


def test_block_hashes_for_maps_every_proto_field() -> None:
    msg = pb.BlockHashing(
        algorithm="vllm_sha256", block_size=4, seed="9", cache_salt="s", lora_name="l", lora_path="/l",
        vllm_extra_keys="legacy", mm_items=[pb.MultimodalItem(identifier="img", offset=2, length=5)],
    )
    tokens = list(range(20))
    hashes, spec = block_hashes_for(get_hasher("native"), tokens, msg)
    expected = _reference.block_hashes(tokens, HashSpec(
        "vllm_sha256", 4, seed="9", cache_salt="s", lora_name="l", lora_path="/l", extra_keys="legacy",
        mm_items=(MmItem("img", 2, 5),)))
    assert hashes == expected
    assert (spec.algorithm, spec.block_size, spec.seed, spec.vllm_extra_keys) == ("vllm_sha256", 4, "9", "legacy")
    sg = pb.BlockHashing(algorithm="sglang_sha256", block_size=4, sglang_extra_key="k", sglang_event_format="dynamo")
    hashes, spec = block_hashes_for(get_hasher("reference"), tokens, sg)
    assert hashes == _reference.block_hashes(tokens, HashSpec("sglang_sha256", 4, sglang_extra_key="k",
                                                              sglang_event_format="dynamo"))
    assert (spec.seed, spec.event_value, spec.vllm_extra_keys) == ("", "first8_be_signed_as_u64", "")
    look = pb.BlockHashing(algorithm="vllm_xxhash_cbor", block_size=4, seed="1", vllm_lookahead=3)
    hashes, spec = block_hashes_for(get_hasher("native"), tokens, look)
    assert hashes == _reference.block_hashes(tokens, HashSpec("vllm_xxhash_cbor", 4, seed="1", lookahead=3))
    assert len(hashes) == 4 and spec.vllm_lookahead == 3
    dy = pb.BlockHashing(algorithm="dynamo_xxh3", block_size=4, namespace="n", sequence_hashes=True)
    assert block_hashes_for(router_adapter.REFERENCE_HASHER, tokens, dy)[1].event_value == "xxh3_64_sequence"


def test_skipped_events_are_in_kv_status_and_metrics() -> None:
    """Events received but not indexed (here a newer engine's event class) show in `KvStatus` and
    as `sidecar_kv_skipped_events_total`, for either index."""
    import msgspec

    from router_adapter.router import KvRouter, ModelOptions
    from router_adapter.index import PrefixIndex
    from sidecar.native.kv_index import NativePrefixIndex
    from sidecar.servicers.kv_router import KvMetricsCollector, _status

    payload = msgspec.msgpack.encode([1.0, [{"type": "KVFuture"}, {"type": "AllBlocksCleared"}]])
    for factory in (PrefixIndex, NativePrefixIndex):
        router = KvRouter([], models={"m": ModelOptions(block_size=4)}, silence_timeout_s=None, index_factory=factory)
        router.indexes["m"].apply_batch("w", router_adapter.decode_batch(payload))
        row = _status(router).models[0]
        assert (row.events, row.skipped_events) == (2, 1)
        metrics = {m.name: m for m in KvMetricsCollector(router).collect()}
        assert metrics["sidecar_kv_skipped_events"].samples[0].value == 1


def test_a_spec_without_lookahead_reads_as_before_the_field() -> None:
    """A Python index's snapshot names its spec by repr, the native one's by to_json: a spec without
    lookahead keeps the strings it had before the field existed, so earlier snapshots restore."""
    plain = HashSpec("vllm_sha256", 16, seed="0")
    assert "lookahead" not in repr(plain) and b"lookahead" not in plain.to_json()
    assert repr(plain) == (
        "HashSpec(algorithm='vllm_sha256', block_size=16, seed='0', cache_salt='', lora_name='', lora_path='', "
        "extra_keys='tagged', namespace='', mm_items=(), sglang_extra_key='', sglang_event_format='default', "
        "sequence_hashes=False)")
    look = HashSpec("vllm_sha256", 16, seed="0", lookahead=1)
    assert repr(look).endswith(", lookahead=1)") and b'"lookahead":1' in look.to_json() and look != plain
