"""Engine-exact block hashing and the index's own prefix keys, behind one interface.

`BlockHasher.block_hashes(tokens, spec)` gives the 64-bit values an engine publishes in its KV
events for the full blocks of a token sequence (see `HashSpec` for the algorithms and options).
`BlockHasher.prefix_keys` gives the router adapter's own content keys (XXH3 SequenceHashes in
Dynamo's scheme, the LoRA name in every block's seed and the salt in the first block's), which do
not depend on any engine's seed or version.

This library ships one implementation, `REFERENCE_HASHER` (pure Python, `_reference`), and uses it
unless it is handed another: the sidecar server injects the native core's hasher
(`sidecar.factory.get_hasher("native")`), and so can any program that has it. Nothing here tries
an implementation and falls back to another.
"""

from __future__ import annotations

from typing import Protocol, Sequence

from router_adapter import _reference
from router_adapter._reference import MmKeys, block_mm_keys, lookahead_windows
from router_adapter.spec import HashSpec

__all__ = ["BlockHasher", "MmKeys", "REFERENCE_HASHER", "ReferenceHasher", "block_hashes", "block_mm_keys",
           "lookahead_windows", "prefix_keys"]


class BlockHasher(Protocol):
    """Block hashes and prefix keys; implementations must agree bit for bit (tests/kv/test_hashing.py)."""

    #: Shown in logs: which implementation a router or a server runs.
    name: str

    def block_hashes(self, tokens: Sequence[int], spec: HashSpec) -> list[int]:
        """The engine's 64-bit value of every full block (unsigned; SGLang's signed values as bits);
        raises `InvalidSpec` naming the field of a spec no engine could produce."""
        ...

    def prefix_keys(
        self, tokens: Sequence[int], block_size: int, lora_name: str = "", namespace: str = "",
        parent: int | None = None, mm_keys: Sequence[MmKeys | None] = (),
    ) -> list[int]:
        """The index's content keys of the full blocks of `tokens`, chained after `parent`;
        `mm_keys[i]` are block i's multimodal (identifier, offset) keys (`_reference.prefix_keys`)."""
        ...


class ReferenceHasher:
    """The pure-Python implementation: the engines' algorithms written the obvious way."""

    name = "reference"

    def block_hashes(self, tokens: Sequence[int], spec: HashSpec) -> list[int]:
        return _reference.block_hashes(tokens, spec)

    def prefix_keys(
        self, tokens: Sequence[int], block_size: int, lora_name: str = "", namespace: str = "",
        parent: int | None = None, mm_keys: Sequence[MmKeys | None] = (),
    ) -> list[int]:
        return _reference.prefix_keys(tokens, block_size, lora_name, namespace, parent, mm_keys)


REFERENCE_HASHER: BlockHasher = ReferenceHasher()


def block_hashes(tokens: Sequence[int], spec: HashSpec) -> list[int]:
    """`REFERENCE_HASHER.block_hashes`: the library's hashing without a native core."""
    return _reference.block_hashes(tokens, spec)


def prefix_keys(
    tokens: Sequence[int], block_size: int, lora_name: str = "", namespace: str = "", parent: int | None = None,
    mm_keys: Sequence[MmKeys | None] = (),
) -> list[int]:
    """`REFERENCE_HASHER.prefix_keys`."""
    return _reference.prefix_keys(tokens, block_size, lora_name, namespace, parent, mm_keys)
