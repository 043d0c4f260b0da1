"""Pure-Python block hashing: the engines' algorithms written the obvious way, on the same
libraries the engines call (`pickle`, `cbor2`, `hashlib`, `xxhash`).

It is the reference the native core is held to (tests/kv/test_hashing.py) and the Python baseline of the
benchmarks. It is checked itself against vectors produced with the engines' own code
(tests/data/kv, tests/kv/generate_vectors.py).
"""

from __future__ import annotations

import hashlib
import pickle
import struct
from array import array
from typing import Any, Callable, Sequence

import cbor2
import xxhash

from router_adapter.errors import InvalidTokens, quoted
from router_adapter.spec import HashSpec, MmItem

#: vLLM >= 0.29: the NONE_HASH seed when PYTHONHASHSEED is unset (sha256 and sha256_cbor only).
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"
DYNAMO_SEED = 1337
_SGLANG_SALT_TAG = b"sglang-cache-salt-v1\0"
_SGLANG_NAMESPACE_TAG = b"sglang-kv-event-namespace-v1"
_MASK64 = (1 << 64) - 1


def _pickle(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _cbor(obj: Any) -> bytes:
    return cbor2.dumps(obj, canonical=True)


VLLM_HASH_FUNCTIONS: dict[str, Callable[[Any], bytes]] = {
    "vllm_sha256": lambda obj: hashlib.sha256(_pickle(obj)).digest(),
    "vllm_sha256_cbor": lambda obj: hashlib.sha256(_cbor(obj)).digest(),
    "vllm_xxhash": lambda obj: xxhash.xxh3_128_digest(_pickle(obj)),
    "vllm_xxhash_cbor": lambda obj: xxhash.xxh3_128_digest(_cbor(obj)),
}


def _fresh(s: str) -> str:
    # vLLM builds each string of an extra key from its own request field, so equal strings are
    # distinct objects and pickle writes each one (the memo shares objects, not values). A copy
    # keeps the same behaviour here even when a caller passes one object twice.
    return (s + "\0")[:-1]


def vllm_digests(tokens: Sequence[int], spec: HashSpec) -> list[bytes]:
    """vLLM's chained block digests (full length) of the full blocks of `tokens` (with lookahead:
    of the full blocks followed by at least `spec.lookahead` tokens)."""
    spec.validate()
    hash_fn = VLLM_HASH_FUNCTIONS[spec.algorithm]
    seed = DEFAULT_NONE_HASH_SEED if spec.seed is None else spec.seed
    parent = hash_fn(_fresh(seed))
    bs = spec.block_size
    lookahead = spec.lookahead
    out = []
    mm_index = 0
    for start in range(0, len(tokens) - lookahead - bs + 1, bs):
        end = start + bs
        if lookahead:
            # `get_request_block_hasher` with num_hash_lookahead_tokens: the extra keys of the
            # block and its lookahead tokens, then those tokens themselves.
            extra, mm_index = vllm_lookahead_extra_keys(spec, start, end, end + lookahead, mm_index)
            extra = (extra, *tokens[end : end + lookahead])
        else:
            extra, mm_index = vllm_extra_keys(spec, start, end, mm_index)
        parent = hash_fn((parent, tuple(tokens[start:end]), extra))
        out.append(parent)
    return out


def vllm_lookahead_extra_keys(
    spec: HashSpec, start: int, end: int, hash_end: int, mm_index: int
) -> tuple[tuple | None, int]:
    """`generate_lookahead_block_hash_extra_keys`: the extra keys of `[start, hash_end)` (multimodal
    items overlapping the lookahead tokens count, at their offset from `start`), and the multimodal
    cursor moved back to the first item that runs past `end`, as the next block may overlap it."""
    extra, mm_index = vllm_extra_keys(spec, start, hash_end, mm_index)
    while mm_index > 0:
        item = spec.mm_items[mm_index - 1]
        if item.offset + item.length <= end:
            break
        mm_index -= 1
    return extra, mm_index


def vllm_extra_keys(spec: HashSpec, start: int, end: int, mm_index: int) -> tuple[tuple | None, int]:
    """`generate_block_hash_extra_keys`: LoRA, multimodal items, then the salt on block 0."""
    tagged = spec.extra_keys == "tagged"
    keys: list[Any] = []
    if spec.lora_name:
        keys.append(("lora", _fresh(spec.lora_name), _fresh(spec.lora_path)) if tagged else _fresh(spec.lora_name))
    mm, mm_index = _mm_keys(spec.mm_items, start, end, mm_index)
    for identifier, relative in mm:
        keys.append(("mm", _fresh(identifier), relative) if tagged else (_fresh(identifier), relative))
    if start == 0 and spec.cache_salt:
        keys.append(("cache_salt", _fresh(spec.cache_salt)) if tagged else _fresh(spec.cache_salt))
    return (tuple(keys) if keys else None), mm_index


def _mm_keys(items: Sequence[MmItem], start: int, end: int, index: int) -> tuple[list[tuple[str, int]], int]:
    keys: list[tuple[str, int]] = []
    if not items or items[-1].offset + items[-1].length <= start:
        return keys, index
    while index < len(items):
        item = items[index]
        if end <= item.offset:
            break
        if start >= item.offset + item.length:
            index += 1
            continue
        keys.append((item.identifier, item.offset - start))
        if end >= item.offset + item.length:
            index += 1
        else:
            break
    return keys, index


def vllm_event_value(digest: bytes) -> int:
    """What vLLM publishes: the last 8 digest bytes, big-endian (`maybe_convert_block_hash`)."""
    return int.from_bytes(digest, "big") & _MASK64


def sglang_block_hashes(tokens: Sequence[int], spec: HashSpec) -> list[int]:
    """SGLang's event values (signed int64) of the full pages of `tokens`."""
    prior = hashlib.sha256(_SGLANG_SALT_TAG + spec.cache_salt.encode()).digest() if spec.cache_salt else b""
    extra_key = spec.sglang_extra_key or None
    salt = spec.cache_salt or None
    if spec.sglang_event_format == "default":
        extra_key, salt = (extra_key if spec.lora_name else None), None
    seed = _sglang_namespace_seed(extra_key, salt)
    out = []
    page = spec.block_size
    for start in range(0, len(tokens) - page + 1, page):
        prior = hashlib.sha256(prior + struct.pack(f"<{page}I", *tokens[start : start + page])).digest()
        value = int.from_bytes(prior[:8], "big", signed=True)
        if seed is not None:
            value = int.from_bytes(hashlib.sha256(seed + value.to_bytes(8, "big", signed=True)).digest()[:8], "big", signed=True)
        out.append(value)
    return out


def _sglang_namespace_seed(extra_key: str | None, salt: str | None) -> bytes | None:
    if extra_key is None and salt is None:
        return None
    h = hashlib.sha256(_SGLANG_NAMESPACE_TAG)
    for part in (extra_key, salt):
        if part is None:
            h.update(b"\x00")
        else:
            encoded = part.encode()
            h.update(b"\x01" + len(encoded).to_bytes(8, "little") + encoded)
    return h.digest()


def dynamo_block_seed(lora_name: str, namespace: str) -> int:
    seed = DYNAMO_SEED
    if lora_name:
        seed = (seed + xxhash.xxh3_64_intdigest(lora_name.encode(), seed=0)) & _MASK64
    if namespace:
        seed = (seed + xxhash.xxh3_64_intdigest(namespace.encode(), seed=1)) & _MASK64
    return seed


def dynamo_mm_identifier_hash(identifier: str) -> int:
    if len(identifier) == 64 and all(c in "0123456789abcdefABCDEF" for c in identifier):
        return int(identifier[:16], 16)
    return xxhash.xxh3_64_intdigest(identifier.encode())


def dynamo_local_hashes(tokens: Sequence[int], spec: HashSpec) -> list[int]:
    """Dynamo's LocalBlockHash of each full block."""
    seed = dynamo_block_seed(spec.lora_name, spec.namespace)
    bs = spec.block_size
    out = []
    for start in range(0, len(tokens) - bs + 1, bs):
        end = start + bs
        data = struct.pack(f"<{bs}I", *tokens[start:end])
        mm = sorted(
            dynamo_mm_identifier_hash(m.identifier)
            for m in spec.mm_items
            if m.length and m.offset < end and m.offset + m.length > start
        )
        data += b"".join(struct.pack("<Q", h) for h in mm)
        out.append(xxhash.xxh3_64_intdigest(data, seed=seed))
    return out


def dynamo_sequence_hashes(local: Sequence[int], parent: int | None = None) -> list[int]:
    """Dynamo's SequenceHash chain over local hashes."""
    out = []
    for h in local:
        parent = h if parent is None else xxhash.xxh3_64_intdigest(struct.pack("<QQ", parent, h), seed=DYNAMO_SEED)
        out.append(parent)
    return out


def check_token_ids(tokens: Sequence[int], field: str = "token_ids") -> None:
    """Raises `InvalidTokens` naming `field[i]` for the first element that is not an integer in
    [0, 2^32). (vLLM would hash such a value and SGLang and Dynamo would fail to pack it; no engine
    produces one, so the library refuses it rather than hash something no engine will publish.)"""
    try:
        array("I", tokens)
    except (OverflowError, TypeError):
        for i, token in enumerate(tokens):
            if not isinstance(token, int) or not 0 <= token < 1 << 32:
                raise InvalidTokens(f"{field}[{i}]: {quoted(repr(token), str)} is not a token id (an integer in [0, 2^32))") from None
        raise


def block_hashes(tokens: Sequence[int], spec: HashSpec) -> list[int]:
    """The 64-bit values of every full block, as the native `block_hashes` reports them (unsigned)."""
    spec.validate()
    check_token_ids(tokens)
    if spec.algorithm.startswith("vllm_"):
        return [vllm_event_value(d) for d in vllm_digests(tokens, spec)]
    if spec.algorithm == "sglang_sha256":
        return [v & _MASK64 for v in sglang_block_hashes(tokens, spec)]
    local = dynamo_local_hashes(tokens, spec)
    return dynamo_sequence_hashes(local) if spec.sequence_hashes else local


#: A block's multimodal keys in the index's content keys: (identifier, offset) pairs, vLLM's
#: `("mm", identifier, offset)` without the tag (the offset of the item relative to the block start).
MmKeys = Sequence[tuple[str, int]]


def prefix_keys(tokens: Sequence[int], block_size: int, lora_name: str = "", namespace: str = "",
                parent: int | None = None, mm_keys: Sequence[MmKeys | None] = ()) -> list[int]:
    """The index's content keys: Dynamo local hashes chained into SequenceHashes after `parent`.

    The LoRA name seeds every block; the namespace (the cache salt) only the first block of a
    sequence, as vLLM does with the salt, so a store event that continues a sequence (which does not
    repeat the salt) gets the same keys as the whole request. `mm_keys[i]` are block i's multimodal
    keys (`block_mm_keys`, `events.mm_keys_of`): a block with some hashes them after its tokens
    (`content_block_bytes`), so another image under the same placeholder tokens is another key; a
    block with none keeps the key it had before multimodal keys were hashed.
    """
    check_token_ids(tokens)
    local = dynamo_local_hashes(tokens, HashSpec("dynamo_xxh3", block_size, lora_name=lora_name))
    if parent is None and namespace and local:
        first = HashSpec("dynamo_xxh3", block_size, lora_name=lora_name, namespace=namespace)
        local[0] = dynamo_local_hashes(tokens[:block_size], first)[0]
    for i, keys in enumerate(mm_keys[: len(local)]):
        if keys:
            seed = dynamo_block_seed(lora_name, namespace if i == 0 and parent is None else "")
            block = tokens[i * block_size : (i + 1) * block_size]
            local[i] = xxhash.xxh3_64_intdigest(content_block_bytes(block, keys), seed=seed)
    return dynamo_sequence_hashes(local, parent)


def content_block_bytes(block: Sequence[int], mm_keys: MmKeys) -> bytes:
    """What a content key hashes for a block with multimodal keys: its token ids (u32 little-endian,
    as every block), then per key the XXH3-64 of the identifier's UTF-8 and the offset, both u64
    little-endian (the offset's two's complement: it is negative for an item that began in an
    earlier block). The tokens have a fixed length, so the bytes of a block without keys are the
    bytes it always had."""
    data = struct.pack(f"<{len(block)}I", *block)
    for identifier, offset in mm_keys:
        data += struct.pack("<QQ", xxhash.xxh3_64_intdigest(identifier.encode()), offset & _MASK64)
    return data


def block_mm_keys(items: Sequence[MmItem], blocks: int, block_size: int,
                  lookahead: int = 0) -> list[list[tuple[str, int]]]:
    """Each of the first `blocks` blocks' multimodal keys by vLLM's rule (`_mm_keys`, what vLLM
    hashes and publishes in a store's `extra_keys`); empty without items. With `lookahead` L > 0
    a block's keys are those of its window, the block and the L tokens after it, with the cursor
    moved back as `generate_lookahead_block_hash_extra_keys` moves it (vLLM >= 0.33 publishes a
    store's `extra_keys` over the same window: `BlockPool._generate_event_extra_keys`)."""
    if not items:
        return []
    out = []
    index = 0
    for start in range(0, blocks * block_size, block_size):
        end = start + block_size
        if lookahead:
            keys, index = _mm_keys(items, start, end + lookahead, index)
            while index > 0 and items[index - 1].offset + items[index - 1].length > end:
                index -= 1
        else:
            keys, index = _mm_keys(items, start, end, index)
        out.append(keys)
    return out


def lookahead_windows(tokens: Sequence[int], block_size: int, lookahead: int,
                      after: Sequence[Sequence[int]] | None = None) -> list[int]:
    """The tokens content keys hash with lookahead L: each block's tokens followed by the L tokens
    after it, block after block, so that `prefix_keys(windows, block_size + L, ...)` keys block i
    over its window. The tokens after block i are `after[i]` (a store's `lookahead_token_ids`), or
    those that follow it in `tokens` (a request: only blocks whose whole window exists count)."""
    out: list[int] = []
    if after is None:
        blocks = (len(tokens) - lookahead) // block_size if len(tokens) >= lookahead else 0
        for i in range(blocks):
            out += tokens[i * block_size : (i + 1) * block_size + lookahead]
    else:
        for i in range(min(len(tokens) // block_size, len(after))):
            out += tokens[i * block_size : (i + 1) * block_size]
            out += after[i]
    return out
