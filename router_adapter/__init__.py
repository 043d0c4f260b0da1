"""The router adapter: engine-exact KV block hashing, KV-event ingestion and prefix scoring.

Usable as a library (this export list is the public API, pinned by a test) and served over gRPC by
`sidecar serve --kv-events ...` (the `KvRouter` service). Dependencies point one way: `sidecar`
imports this package, never the reverse; the native hasher is handed in (`hasher=`) by whoever has it.
"""

from router_adapter.events import AllBlocksCleared, Batch, BlockRemoved, BlockStored, DecodeError, decode_batch
from router_adapter.errors import InvalidSpec, InvalidTokens, RouterAdapterError
from router_adapter.hashing import REFERENCE_HASHER, BlockHasher, block_hashes, prefix_keys
from router_adapter.index import PrefixIndex, Score, WorkerScore
from router_adapter.router import KvRouter, ModelOptions
from router_adapter.spec import HashSpec, MmItem
from router_adapter.subscriber import Source, Subscriber

__all__ = [
    "AllBlocksCleared",
    "Batch",
    "BlockHasher",
    "BlockRemoved",
    "BlockStored",
    "DecodeError",
    "HashSpec",
    "InvalidSpec",
    "InvalidTokens",
    "KvRouter",
    "MmItem",
    "ModelOptions",
    "PrefixIndex",
    "REFERENCE_HASHER",
    "RouterAdapterError",
    "Score",
    "Source",
    "Subscriber",
    "WorkerScore",
    "block_hashes",
    "decode_batch",
    "prefix_keys",
]
