"""Chooses implementations by name: the backend (tokenizer, renderer, parser), the block hasher and
the KV prefix index.

This is the one module that imports the implementations; the servicers, the registry and the router
adapter see only the interfaces (`sidecar.backend`, `router_adapter.hashing.BlockHasher`). Nothing
is tried and replaced by something else: an unknown name or an unbuilt native library is an error.

    backend = get_backend("native")      # sidecar.native: the Rust core
    hasher = get_hasher("native")        # the same core's block hashing
    make_index = get_index_factory("native")  # the same core's prefix index (for KvRouter)
"""

from __future__ import annotations

import functools
from typing import Sequence

from router_adapter.hashing import REFERENCE_HASHER, BlockHasher
from router_adapter.index import PrefixIndex
from router_adapter.router import IndexFactory
from sidecar.backend import Backend, ParseLimits, ParseModel, ParseOpenConfig

#: What `--backend` accepts.
BACKENDS = ("native", "reference")


def get_backend(name: str) -> Backend:
    """The backend called `name`: "native" (the Rust core) or "reference" (pure Python)."""
    if name == "native":
        return _native_backend_class()()
    if name == "reference":
        from sidecar.reference import ReferenceBackend

        return ReferenceBackend()
    raise ValueError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}")


@functools.cache
def _native_backend_class() -> type:
    """`sidecar.native`'s backend, its multiplexer taking the typed `ParseOpenConfig`. The native
    wrapper reads the configuration as a dict; the subclass converts at `open` only, so the per-step
    `handle` path is the native method itself."""
    from sidecar.native import NativeBackend, NativeParseMux

    class TypedParseMux(NativeParseMux):
        def open(self, model: ParseModel, request_id: str, fingerprint: str, config: ParseOpenConfig,
                 prompt_ids: Sequence[int]) -> None:
            super().open(model, request_id, fingerprint, config.as_dict(), prompt_ids)

    class TypedNativeBackend(NativeBackend):
        def new_parse_mux(self, limits: ParseLimits) -> TypedParseMux:
            return TypedParseMux(limits)

    return TypedNativeBackend


class NativeHasher:
    """`sidecar.native.hashing` as a `BlockHasher` (its functions bound directly: no extra call)."""

    name = "native"

    def __init__(self) -> None:
        from sidecar.native import hashing

        self.block_hashes = hashing.block_hashes
        self.prefix_keys = hashing.prefix_keys


def get_hasher(name: str) -> BlockHasher:
    """The block hasher of the backend called `name` (the native core's, or router_adapter's reference)."""
    if name == "native":
        return NativeHasher()
    if name == "reference":
        return REFERENCE_HASHER
    raise ValueError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}")


def get_index_factory(name: str) -> IndexFactory:
    """What makes one model's prefix index for `KvRouter(index_factory=...)`: the native core's
    index (`sidecar.native.kv_index.NativePrefixIndex`, the same API and scores), or
    router_adapter's Python `PrefixIndex` with the reference backend."""
    if name == "native":
        from sidecar.native.kv_index import NativePrefixIndex

        return NativePrefixIndex
    if name == "reference":
        return PrefixIndex
    raise ValueError(f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}")
