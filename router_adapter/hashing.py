"""Engine-exact block hashing and the index's own prefix keys.

`block_hashes(tokens, spec)` gives the 64-bit values an engine publishes in its KV events for the
full blocks of a token sequence (see `HashSpec` for the algorithms and options). `prefix_keys`
gives the router adapter's own content keys (XXH3 SequenceHashes in Dynamo's scheme, the LoRA name
in every block's seed and the salt in the first block's), which do not depend on any engine's
seed or version.

Both run in the native core when it is built (`make native`) and fall back to the pure-Python
reference otherwise; `backend=` forces one.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from router_adapter import _reference
from router_adapter.spec import HashSpec


@lru_cache(maxsize=1)
def _native():  # noqa: ANN202 - module
    try:
        from sidecar.native import hashing
    except ImportError:
        return None
    return hashing


def _pick(backend: str):  # noqa: ANN202 - module
    if backend == "reference":
        return _reference
    native = _native()
    if native is None:
        if backend == "native":
            raise ImportError("the native library is not built; run `make native`")
        return _reference
    return native


def block_hashes(tokens: Sequence[int], spec: HashSpec, *, backend: str = "auto") -> list[int]:
    """The engine's 64-bit value of every full block (unsigned; SGLang's signed values as bits)."""
    return _pick(backend).block_hashes(tokens, spec)


def prefix_keys(
    tokens: Sequence[int],
    block_size: int,
    lora_name: str = "",
    namespace: str = "",
    parent: int | None = None,
    *,
    backend: str = "auto",
) -> list[int]:
    """The index's content keys of the full blocks of `tokens`, chained after `parent`."""
    return _pick(backend).prefix_keys(tokens, block_size, lora_name, namespace, parent)


def native_available() -> bool:
    """Whether the native core is loaded."""
    return _native() is not None
