"""Deterministic block-hashing cases shared by the vector generator and the parity tests.

Token sequences come from a 64-bit LCG (so a case is a few numbers, not a long list) and cover
small and large ids (up to 2^32 - 1, which pickle writes as LONG1), every algorithm, block sizes
from 1 to 30000 (pickle frames of 64 KiB), seeds, salts, LoRA, multimodal items, both vLLM
extra-key layouts and vLLM's lookahead hashing.
"""

from __future__ import annotations

from typing import Any, Iterator

from router_adapter.spec import HashSpec, MmItem

_A = 6364136223846793005
_C = 1442695040888963407


def lcg_tokens(seed: int, count: int, modulus: int) -> list[int]:
    """`count` ids in [0, modulus): x = x * A + C mod 2^64, id = (x >> 16) % modulus."""
    x = seed & ((1 << 64) - 1)
    out = []
    for _ in range(count):
        x = (x * _A + _C) & ((1 << 64) - 1)
        out.append((x >> 16) % modulus)
    return out


def tokens_of(case: dict[str, Any]) -> list[int]:
    gen = case["tokens"]
    return lcg_tokens(gen["seed"], gen["count"], gen["modulus"])


def spec_of(case: dict[str, Any]) -> HashSpec:
    fields = dict(case["spec"])
    fields["mm_items"] = tuple(MmItem(**m) for m in fields.get("mm_items", ()))
    return HashSpec(**fields)


VLLM = ("vllm_sha256", "vllm_sha256_cbor", "vllm_xxhash", "vllm_xxhash_cbor")


def vector_cases() -> Iterator[dict[str, Any]]:
    """The cases written to tests/data/kv (small enough to keep as files)."""
    n = 0

    def case(spec: dict[str, Any], count: int, modulus: int = 160_000) -> dict[str, Any]:
        nonlocal n
        n += 1
        return {"spec": spec, "tokens": {"seed": n, "count": count, "modulus": modulus}}

    mm = [
        {"identifier": "a" * 64, "offset": 3, "length": 10},
        {"identifier": "img-2", "offset": 13, "length": 40},
        {"identifier": "0123456789abcdef" * 4, "offset": 70, "length": 1},
    ]
    for algorithm in VLLM:
        for seed in ([None, "0", "42", "seed with ünïcode"] if "sha256" in algorithm else ["0", "1234"]):
            for bs in (1, 3, 16, 17):
                yield case({"algorithm": algorithm, "block_size": bs, "seed": seed}, 5 * bs + bs // 2)
            yield case({"algorithm": algorithm, "block_size": 16, "seed": seed}, 100, 2**32)
        for layout in ("tagged", "legacy"):
            base = {"algorithm": algorithm, "block_size": 16, "seed": "0", "extra_keys": layout}
            yield case({**base, "cache_salt": "tenant-a"}, 64)
            yield case({**base, "lora_name": "adapter-x", "lora_path": "/loras/x"}, 64)
            yield case({**base, "lora_name": "x", "lora_path": "x", "cache_salt": "s"}, 48)
            yield case({**base, "mm_items": mm}, 96)
            yield case({**base, "mm_items": mm, "lora_name": "ad", "lora_path": "/p", "cache_salt": "salt"}, 96)
        # Pickle framing: blocks whose pickle crosses 64 KiB.
        yield case({"algorithm": algorithm, "block_size": 30000, "seed": "0"}, 60000, 2**32)
    for salt in ("", "tenant-a"):
        for extra_key in ("", "extra-key-with-lora-id-0123456789abcdef0123456789ab"):
            for fmt in ("default", "dynamo"):
                for lora in ("", "adapter-x"):
                    for bs in (1, 16, 64):
                        yield case({"algorithm": "sglang_sha256", "block_size": bs, "cache_salt": salt,
                                    "sglang_extra_key": extra_key, "sglang_event_format": fmt,
                                    "lora_name": lora}, 3 * bs + 1)
    for lora in ("", "adapter-x"):
        for namespace in ("", "tenant-a"):
            for bs in (1, 16, 64):
                yield case({"algorithm": "dynamo_xxh3", "block_size": bs, "lora_name": lora,
                            "namespace": namespace}, 4 * bs + 3, 2**32)
            yield case({"algorithm": "dynamo_xxh3", "block_size": 16, "lora_name": lora,
                        "namespace": namespace, "mm_items": mm}, 96)
    # vLLM >= 0.33 lookahead hashing (EAGLE-family: L = 1; multi-module MTP: L = speculative tokens).
    # Lengths around block boundaries, so the last full block has fewer than L followers or
    # exactly L; mm items that begin or end in a block's lookahead tokens.
    look_mm = [
        {"identifier": "b" * 64, "offset": 16, "length": 8},
        {"identifier": "img-3", "offset": 30, "length": 3},
        {"identifier": "img-4", "offset": 49, "length": 15},
        {"identifier": "img-5", "offset": 65, "length": 1},
    ]
    for lookahead in (1, 3):
        for algorithm in VLLM:
            base = {"algorithm": algorithm, "block_size": 16, "seed": "0", "lookahead": lookahead}
            for count in (64, 65, 66, 67):
                yield case(base, count)
            yield case({**base, "seed": None} if "sha256" in algorithm else base, 100, 2**32)
            yield case({**base, "cache_salt": "tenant-a"}, 64 + lookahead)
            yield case({**base, "lora_name": "adapter-x", "lora_path": "/loras/x"}, 63 + lookahead)
            yield case({**base, "mm_items": look_mm}, 66)
            yield case({**base, "mm_items": mm}, 96)
            yield case({**base, "mm_items": look_mm, "lora_name": "ad", "lora_path": "/p", "cache_salt": "salt"},
                       80 + lookahead)
        for bs in (1, 3):  # lookahead tokens spanning whole blocks
            yield case({"algorithm": "vllm_sha256", "block_size": bs, "seed": "0", "lookahead": lookahead,
                        "mm_items": [{"identifier": "c" * 64, "offset": 2, "length": 4}], "cache_salt": "s"},
                       5 * bs + 2)
        yield case({"algorithm": "vllm_sha256", "block_size": 16, "seed": "0", "lookahead": lookahead},
                   lookahead - 1)
