"""Block hashing in the native core (`sc_block_hashes`, `sc_prefix_keys`)."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Sequence

from router_adapter.hashing import MmKeys
from router_adapter.spec import HashSpec
from sidecar.native._calls import cancel_arg, ids_arg, str_arg, uint32_ids
from sidecar.native._errors import raise_for_status
from sidecar.native._ffi import ffi, lib


@lru_cache(maxsize=1024)
def _spec_json(spec: HashSpec) -> bytes:
    # Specs repeat (one per router configuration), and JSON-encoding a dataclass costs as much as
    # hashing a few hundred blocks.
    spec.validate()
    return spec.to_json()


def _hashes(fn, count: int, *args) -> list[int]:  # noqa: ANN001 - cffi function
    """Calls `fn(*args, out, count, written, err)`, which writes at most `count` values to `out`."""
    out = ffi.new("uint64_t[]", max(count, 1))
    written = ffi.new("uintptr_t *")
    err = ffi.new("sc_error **")
    raise_for_status(fn(*args, out, count, written, err), err)
    return ffi.unpack(out, written[0]) if written[0] else []


def block_hashes(tokens: Sequence[int], spec: HashSpec) -> list[int]:
    """The engine's 64-bit value of every full block of `tokens` (see `HashSpec`)."""
    spec_bytes = _spec_json(spec)
    arr = uint32_ids(tokens)
    # The offloaded call's cancel flag (NULL inline and outside the server): a long prompt's chained
    # hashes stop with the call.
    return _hashes(lib.sc_block_hashes, len(arr) // spec.block_size, str_arg(spec_bytes), ids_arg(arr), cancel_arg())


def prefix_keys(
    tokens: Sequence[int], block_size: int, lora_name: str = "", namespace: str = "", parent: int | None = None,
    mm_keys: Sequence[MmKeys | None] = (),
) -> list[int]:
    """Dynamo-style SequenceHash keys of the full blocks of `tokens`, continuing after `parent`;
    `mm_keys[i]` are block i's multimodal (identifier, offset) keys (`router_adapter.hashing`)."""
    arr = uint32_ids(tokens)
    count = len(arr) // block_size if block_size > 0 else 0
    mm = b""
    if any(mm_keys):
        mm = json.dumps([[[i, o] for i, o in keys] if keys else None for keys in mm_keys]).encode()
    return _hashes(
        lib.sc_prefix_keys, count, ids_arg(arr), block_size, str_arg(lora_name.encode()), str_arg(namespace.encode()),
        parent is not None, parent or 0, str_arg(mm),
    )
