"""`HashSpec`: which engine algorithm to reproduce and the request facts it mixes in.

The same fields as the native `HashSpec` (native/src/hash/spec.rs) and the `BlockHashing` proto
message; `to_json()` is what a native hasher reads. Validation lives here so every hasher refuses
the same specs with the same messages.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from router_adapter.errors import InvalidSpec

ALGORITHMS = ("vllm_sha256", "vllm_sha256_cbor", "vllm_xxhash", "vllm_xxhash_cbor", "sglang_sha256", "dynamo_xxh3")
VLLM_ALGORITHMS = ALGORITHMS[:4]
#: vLLM >= 0.29: the NONE_HASH seed when PYTHONHASHSEED is unset (sha256 and sha256_cbor only).
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"


@dataclass(frozen=True, slots=True)
class MmItem:
    """A multimodal item: its identifier (vLLM's mm hash) and placeholder run."""

    identifier: str
    offset: int
    length: int


@dataclass(frozen=True, slots=True)
class HashSpec:
    """How to hash (see `BlockHashing` in protos/sidecar/v1/preprocessor.proto)."""

    algorithm: str
    block_size: int
    #: vLLM: the engine's PYTHONHASHSEED string; None = unset.
    seed: str | None = None
    cache_salt: str = ""
    lora_name: str = ""
    lora_path: str = ""
    #: vLLM extra-key layout: "tagged" (>= 0.31) or "legacy" (0.20 to 0.30).
    extra_keys: str = "tagged"
    #: Dynamo cache namespace.
    namespace: str = ""
    mm_items: tuple[MmItem, ...] = field(default_factory=tuple)
    #: SGLang: the radix key's extra_key.
    sglang_extra_key: str = ""
    #: SGLang: "default" or "dynamo" event format.
    sglang_event_format: str = "default"
    #: Dynamo: report SequenceHashes instead of local block hashes.
    sequence_hashes: bool = False

    def validate(self) -> None:
        """Raises InvalidSpec naming the field when no engine could produce these hashes."""
        if self.algorithm not in ALGORITHMS:
            raise InvalidSpec(
                f"block_hashing.algorithm: unknown {self.algorithm!r}; expected one of {', '.join(ALGORITHMS)}"
            )
        if not isinstance(self.block_size, int) or self.block_size <= 0:
            raise InvalidSpec("block_hashing.block_size: must be > 0")
        if self.algorithm in ("vllm_xxhash", "vllm_xxhash_cbor") and self.seed is None:
            raise InvalidSpec(
                f"block_hashing.seed: {self.algorithm} without PYTHONHASHSEED uses a random per-process seed in "
                "vLLM, so its hashes cannot be reproduced; give the engine's PYTHONHASHSEED"
            )
        if self.extra_keys not in ("tagged", "legacy"):
            raise InvalidSpec(f"block_hashing.vllm_extra_keys: expected 'tagged' or 'legacy', got {self.extra_keys!r}")
        if self.sglang_event_format not in ("default", "dynamo"):
            raise InvalidSpec(
                f"block_hashing.sglang_event_format: expected 'default' or 'dynamo', got {self.sglang_event_format!r}"
            )
        previous = 0
        for i, item in enumerate(self.mm_items):
            if not item.identifier:
                raise InvalidSpec(f"block_hashing.mm_items[{i}].identifier: empty")
            if item.offset < 0 or item.length < 0:
                raise InvalidSpec(f"block_hashing.mm_items[{i}]: offset and length must be >= 0")
            if item.offset + item.length >= 1 << 64 or item.offset >= 1 << 63:
                # The native spec's bound (a position of the engine's int64 token positions).
                raise InvalidSpec(f"block_hashing.mm_items[{i}]: offset + length overflows")
            if item.offset < previous:
                raise InvalidSpec(
                    f"block_hashing.mm_items[{i}].offset: items must be sorted by offset (as the engine keeps them)"
                )
            previous = item.offset

    @property
    def effective_seed(self) -> str:
        """The seed string vLLM's chain starts from; empty for the other algorithms."""
        if self.algorithm not in VLLM_ALGORITHMS:
            return ""
        return DEFAULT_NONE_HASH_SEED if self.seed is None else self.seed

    @property
    def event_value(self) -> str:
        """Which 64 bits each reported value is (`BlockHashSpec.event_value`)."""
        if self.algorithm == "sglang_sha256":
            return "first8_be_signed_as_u64"
        if self.algorithm == "dynamo_xxh3":
            return "xxh3_64_sequence" if self.sequence_hashes else "xxh3_64_local"
        return "last8_be_unsigned"

    def to_json(self) -> bytes:
        """The spec as the native core reads it."""
        data = asdict(self)
        data["mm_items"] = [asdict(m) for m in self.mm_items]
        return json.dumps(data, separators=(",", ":")).encode()
