"""The snapshot object replicas publish and load (router_adapter.nats_feed, docs/kv_fanout.md): a
versioned header, JSON meta, the index's own bytes; what is not one is refused with the reason."""

from __future__ import annotations

import msgspec
import pytest

from router_adapter import PrefixIndex
from router_adapter.events import Batch, BlockStored
from router_adapter.nats_feed import SNAPSHOT_MAGIC, SNAPSHOT_VERSION, build_snapshot, parse_snapshot
from sidecar.native.kv_index import NativePrefixIndex

META = {"stream": "S", "stream_seq": 42, "created": 1.5, "index_kind": "NativePrefixIndex",
        "workers": {"w0": [7, 3, 1.25]}}


def filled(index):  # noqa: ANN001, ANN201
    index.apply_batch("w0", Batch(ts=0.0, events=[BlockStored(block_hashes=[1, 2], parent_block_hash=None,
                                                              token_ids=list(range(32)), block_size=16)]))
    return index


@pytest.mark.parametrize("make", [NativePrefixIndex, PrefixIndex])
def test_round_trip_restores_the_index_from_a_view(make) -> None:  # noqa: ANN001
    source = filled(make(16))
    data = build_snapshot(META, source.snapshot())
    assert data.startswith(SNAPSHOT_MAGIC)
    meta, index_bytes = parse_snapshot(memoryview(bytearray(data)))  # as the feed receives it
    assert meta == META and isinstance(index_bytes, memoryview)
    restored = make(16)
    restored.restore(index_bytes)
    tokens = list(range(40))
    assert restored.score(tokens) == source.score(tokens) and restored.num_blocks == 2


def test_refused_with_the_reason() -> None:
    good = build_snapshot(META, b"index")
    old_format = msgspec.msgpack.encode({"format": 1, "index": b""})
    other_version = good.replace(SNAPSHOT_VERSION.to_bytes(4, "little"), (SNAPSHOT_VERSION + 1).to_bytes(4, "little"), 1)
    for data, reason in [(b"", "only 0 bytes"), (old_format, "not a sidecar KV snapshot"),
                         (other_version, f"format version {SNAPSHOT_VERSION + 1}"), (good[:20], "truncated")]:
        with pytest.raises(ValueError, match=reason):
            parse_snapshot(data)
