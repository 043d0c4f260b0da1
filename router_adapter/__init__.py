"""The router adapter: engine-exact KV block hashing, KV-event ingestion and prefix scoring.

Usable as a library (this export list is the public API, pinned by a test) and served over gRPC by
`sidecar serve --kv-events ...` (the `KvRouter` service).
"""

from router_adapter.events import AllBlocksCleared, Batch, BlockRemoved, BlockStored, DecodeError, decode_batch
from router_adapter.hashing import block_hashes, prefix_keys
from router_adapter.index import PrefixIndex, Score, WorkerScore
from router_adapter.router import KvRouter, ModelOptions
from router_adapter.spec import HashSpec, MmItem
from router_adapter.subscriber import Source, Subscriber

__all__ = [
    "AllBlocksCleared",
    "Batch",
    "BlockRemoved",
    "BlockStored",
    "DecodeError",
    "HashSpec",
    "KvRouter",
    "MmItem",
    "ModelOptions",
    "PrefixIndex",
    "Score",
    "Source",
    "Subscriber",
    "WorkerScore",
    "block_hashes",
    "decode_batch",
    "prefix_keys",
]
