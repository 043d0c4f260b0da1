"""`HashSpec`: which engine algorithm to reproduce and the request facts it mixes in.

The same fields as the native `HashSpec` (native/src/hash/spec.rs) and the `BlockHashing` proto
message; `to_json()` is what a native hasher reads. Validation lives here so every hasher refuses
the same specs with the same messages.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from router_adapter.errors import InvalidSpec, quoted

ALGORITHMS = ("vllm_sha256", "vllm_sha256_cbor", "vllm_xxhash", "vllm_xxhash_cbor", "sglang_sha256", "dynamo_xxh3")
VLLM_ALGORITHMS = ALGORITHMS[:4]
#: vLLM >= 0.29: the NONE_HASH seed when PYTHONHASHSEED is unset (sha256 and sha256_cbor only).
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"
#: The most lookahead tokens a spec may ask for (vLLM's is 1, or num_speculative_tokens for a
#: multi-module MTP drafter: a handful). Each block's hash pickles that many more ints.
MAX_LOOKAHEAD = 256
#: The largest block a spec may name (engines use 16 to a few hundred tokens): a caller's number
#: must not size a hashing buffer (the native core's SGLang page buffer is 4 bytes per token).
MAX_BLOCK_SIZE = 1 << 16


@dataclass(frozen=True, slots=True)
class MmItem:
    """A multimodal item: its identifier (vLLM's mm hash) and placeholder run."""

    identifier: str
    offset: int
    length: int


@dataclass(frozen=True, slots=True, repr=False)
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
    #: vLLM (>= 0.33, tagged layout): tokens after each block that its hash covers
    #: (`num_hash_lookahead_tokens`: 1 with an EAGLE/EAGLE3/MTP drafter, num_speculative_tokens with
    #: a multi-module MTP one, 0 without; see `BlockHashing.vllm_lookahead`). A block is hashed only
    #: once that many tokens follow it, and its extra keys become `(E, *next_tokens)`.
    lookahead: int = 0

    def validate(self) -> None:
        """Raises InvalidSpec naming the field when no engine could produce these hashes."""
        if self.algorithm not in ALGORITHMS:
            raise InvalidSpec(
                f"block_hashing.algorithm: unknown {quoted(self.algorithm)}; expected one of {', '.join(ALGORITHMS)}"
            )
        if not isinstance(self.block_size, int) or self.block_size <= 0:
            raise InvalidSpec("block_hashing.block_size: must be > 0")
        if self.block_size > MAX_BLOCK_SIZE:
            raise InvalidSpec(f"block_hashing.block_size: {self.block_size} is more than {MAX_BLOCK_SIZE}")
        if self.algorithm in ("vllm_xxhash", "vllm_xxhash_cbor") and self.seed is None:
            raise InvalidSpec(
                f"block_hashing.seed: {self.algorithm} without PYTHONHASHSEED uses a random per-process seed in "
                "vLLM, so its hashes cannot be reproduced; give the engine's PYTHONHASHSEED"
            )
        if self.extra_keys not in ("tagged", "legacy"):
            raise InvalidSpec(f"block_hashing.vllm_extra_keys: expected 'tagged' or 'legacy', got {quoted(self.extra_keys)}")
        if self.sglang_event_format not in ("default", "dynamo"):
            raise InvalidSpec(
                f"block_hashing.sglang_event_format: expected 'default' or 'dynamo', got {quoted(self.sglang_event_format)}"
            )
        if not isinstance(self.lookahead, int) or isinstance(self.lookahead, bool) or self.lookahead < 0:
            raise InvalidSpec(f"block_hashing.vllm_lookahead: must be an integer >= 0, got {quoted(repr(self.lookahead), str)}")
        if self.lookahead:
            if self.algorithm not in VLLM_ALGORITHMS:
                raise InvalidSpec(
                    f"block_hashing.vllm_lookahead: only vLLM's algorithms hash lookahead tokens, not {self.algorithm}"
                )
            if self.extra_keys != "tagged":
                raise InvalidSpec(
                    "block_hashing.vllm_lookahead: the legacy extra-key layout (vLLM 0.20 to 0.30) has no "
                    "lookahead hashing; it needs the tagged layout"
                )
            if self.lookahead > MAX_LOOKAHEAD:
                raise InvalidSpec(f"block_hashing.vllm_lookahead: {self.lookahead} is more than {MAX_LOOKAHEAD}")
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

    def __repr__(self) -> str:
        # The dataclass repr, leaving out `lookahead` when 0: a Python index's snapshot names its
        # spec by this repr, so snapshots taken before the field existed still restore.
        parts = [f"{name}={getattr(self, name)!r}" for name in self.__dataclass_fields__
                 if name != "lookahead" or self.lookahead]
        return f"HashSpec({', '.join(parts)})"

    def to_json(self) -> bytes:
        """The spec as the native core reads it (`lookahead` only when set, so a spec without it
        reads the same as before the field existed, e.g. in index snapshots)."""
        data = asdict(self)
        data["mm_items"] = [asdict(m) for m in self.mm_items]
        if not self.lookahead:
            del data["lookahead"]
        return json.dumps(data, separators=(",", ":")).encode()
