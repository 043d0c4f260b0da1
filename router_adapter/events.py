"""Decoding of engine KV-event payloads (msgpack, as vLLM and SGLang publish them). No ZMQ, no index.

Accepted shapes (see shared/docs/kv-hashing.md sections 1.7 and 2):
- the batch is an array `[ts, events]` or `[ts, events, dp_rank]`;
- each event is a map tagged by `"type"` (vLLM >= 0.24, SGLang) or an array whose first element is
  the tag, then the fields in declaration order (vLLM <= 0.23);
- block hashes are unsigned or signed 64-bit integers, or digest bytes (vLLM with
  `VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0`), all normalized to the unsigned 64-bit value the engine
  would publish as an integer (bytes: the last 8, big-endian; signed: two's complement);
- a store's `token_ids` are ints, or all pairs `[t_i, t_i+1]` (SGLang with EAGLE speculative
  decoding publishes *bigram* pages: `mem_cache/events.py` `record_store`); a bigram store is
  normalized to the pairs' first elements (the page's own tokens) with `bigram=True`;
- a store's `lookahead_token_ids` (vLLM >= 0.33 with lookahead hashing: per block, the tokens
  after it that its hash covers) are a list of int lists, or nil;
- fields this decoder does not know are ignored, so newer engines keep decoding;
- an event whose tag names no class this decoder knows (a newer engine's event type) is left out
  and counted (`Batch.unknown_events`); the tag is the first `"type"` of a map (the keys before it
  must be strings) or the first element of an array, a string. Anything else that is not an event
  of a known class refuses the batch.

`decode_batch(payload)` returns a `Batch` of `BlockStored` / `BlockRemoved` / `AllBlocksCleared`,
or raises `DecodeError`.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence, Union

import msgspec

MASK64 = (1 << 64) - 1
#: The medium of events that do not name one (engines before the field existed stored on GPU).
DEFAULT_MEDIUM = "GPU"

HashValue = Union[int, bytes]


class DecodeError(ValueError):
    """A payload that is not a KV-event batch."""


def apply_each(apply: Callable[[str, Any], None], items: Sequence[tuple[str, Any]]) -> list[tuple[int, DecodeError]]:
    """`apply(worker, payload)` for each item in order, going on past a payload refused as
    malformed: those as (position, DecodeError). Any other error is raised where it happens."""
    refused: list[tuple[int, DecodeError]] = []
    for i, (worker, payload) in enumerate(items):
        try:
            apply(worker, payload)
        except DecodeError as e:
            refused.append((i, e))
    return refused


# --- the normalized events handed to the index -------------------------------------------------


class BlockStored(msgspec.Struct, gc=False):
    """Blocks a worker now holds: `block_hashes[i]` covers `token_ids[i*block_size:(i+1)*block_size]`."""

    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    medium: str = DEFAULT_MEDIUM
    lora_name: str | None = None
    #: SGLang publishes the salt; vLLM only inside `extra_keys` (see `cache_salt_of`).
    cache_salt: str | None = None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None
    locality: str | None = None
    #: Published as bigram pairs (SGLang with EAGLE): `token_ids` are the pairs' first elements,
    #: and the engine's block hashes cover the pairs (engine mode cannot reproduce them).
    bigram: bool = False
    #: vLLM >= 0.33 with lookahead hashing (an EAGLE/EAGLE3/MTP drafter): per block, the tokens
    #: after it that its hash (and its `extra_keys`) also cover; None when not published.
    lookahead_token_ids: list[list[int]] | None = None


class BlockRemoved(msgspec.Struct, gc=False):
    """Blocks a worker evicted from one medium."""

    block_hashes: list[int]
    medium: str = DEFAULT_MEDIUM
    group_idx: int | None = None
    locality: str | None = None


class AllBlocksCleared(msgspec.Struct, gc=False):
    """The worker dropped its whole cache."""


Event = Union[BlockStored, BlockRemoved, AllBlocksCleared]


class Batch(msgspec.Struct, gc=False):
    """One published batch."""

    ts: float
    events: list[Event]
    dp_rank: int | None = None
    #: Events of a class this decoder does not know, left out of `events` (indexes count them as
    #: skipped).
    unknown_events: int = 0


# --- wire shapes -------------------------------------------------------------------------------
# Field names and order follow the engines' msgspec classes; only what the index needs is typed.


class _MapStored(msgspec.Struct, tag="BlockStored", tag_field="type", gc=False):
    block_hashes: list[HashValue]
    parent_block_hash: HashValue | None = None
    token_ids: list[int] = []
    block_size: int = 0
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None
    cache_salt: str | None = None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None
    locality: str | None = None
    # vLLM >= 0.33 (map-encoded only: the positional form ended with vLLM 0.23).
    lookahead_token_ids: list[list[int]] | None = None


class _MapRemoved(msgspec.Struct, tag="BlockRemoved", tag_field="type", gc=False):
    block_hashes: list[HashValue]
    medium: str | None = None
    group_idx: int | None = None
    locality: str | None = None


class _MapCleared(msgspec.Struct, tag="AllBlocksCleared", tag_field="type", gc=False):
    pass


class _ArrayStored(msgspec.Struct, tag="BlockStored", array_like=True, gc=False):
    # vLLM <= 0.23 order: hashes, parent, tokens, block_size, lora_id, medium (0.10+), lora_name,
    # extra_keys, group_idx (0.20+), kv_cache_spec_kind, kv_cache_spec_sliding_window, locality.
    block_hashes: list[HashValue]
    parent_block_hash: HashValue | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None = None
    medium: str | None = None
    lora_name: str | None = None
    extra_keys: list[Any] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: Any = None
    kv_cache_spec_sliding_window: Any = None
    locality: str | None = None


class _ArrayRemoved(msgspec.Struct, tag="BlockRemoved", array_like=True, gc=False):
    block_hashes: list[HashValue]
    medium: str | None = None
    group_idx: int | None = None
    locality: str | None = None


class _ArrayCleared(msgspec.Struct, tag="AllBlocksCleared", array_like=True, gc=False):
    pass


class _WireBatch(msgspec.Struct, array_like=True, gc=False):
    ts: float
    events: list[msgspec.Raw]
    dp_rank: int | None = None


# A bigram store (SGLang with EAGLE): every token a pair. Tried only when the plain decoders
# refuse an event, so that plain stores decode as fast as before and a list mixing ints and pairs
# is refused by both.
class _BigramMapStored(_MapStored, tag="BlockStored", tag_field="type"):
    token_ids: list[tuple[int, int]] = []


class _BigramArrayStored(_ArrayStored, tag="BlockStored", array_like=True):
    token_ids: list[tuple[int, int]]


_batch_decoder = msgspec.msgpack.Decoder(_WireBatch)
_map_decoder = msgspec.msgpack.Decoder(Union[_MapStored, _MapRemoved, _MapCleared])
_array_decoder = msgspec.msgpack.Decoder(Union[_ArrayStored, _ArrayRemoved, _ArrayCleared])
# The same unions with the bigram store: tags are looked up as by the plain decoders.
_bigram_map_decoder = msgspec.msgpack.Decoder(Union[_BigramMapStored, _MapRemoved, _MapCleared])
_bigram_array_decoder = msgspec.msgpack.Decoder(Union[_BigramArrayStored, _ArrayRemoved, _ArrayCleared])
#: The event classes this decoder knows, by tag.
KNOWN_TAGS = frozenset({b"BlockStored", b"BlockRemoved", b"AllBlocksCleared"})


def hash_value(h: HashValue) -> int:
    """A published block hash as an unsigned 64-bit value."""
    if isinstance(h, int):
        return h & MASK64
    if isinstance(h, (bytes, bytearray, memoryview)):
        if len(h) < 8:
            raise DecodeError(f"block hash of {len(h)} bytes; expected a digest of at least 8")
        return int.from_bytes(bytes(h[-8:]), "big")
    raise DecodeError(f"block hash of type {type(h).__name__}")


def _is_map(raw: bytes) -> bool:
    first = raw[0]
    return 0x80 <= first <= 0x8F or first in (0xDE, 0xDF)


def _skip(raw: bytes, pos: int) -> int:
    """The position after the msgpack value at `pos` (`raw` is well-formed: msgspec found its end)."""
    pending = 1
    while pending:
        pending -= 1
        m = raw[pos]
        pos += 1
        if m <= 0x7F or m >= 0xE0 or m in (0xC0, 0xC2, 0xC3):
            continue
        if 0x80 <= m <= 0x8F:
            pending += 2 * (m & 0x0F)
        elif 0x90 <= m <= 0x9F:
            pending += m & 0x0F
        elif 0xA0 <= m <= 0xBF:
            pos += m & 0x1F
        elif m in (0xCC, 0xD0):
            pos += 1
        elif m in (0xCD, 0xD1):
            pos += 2
        elif m in (0xCA, 0xCE, 0xD2):
            pos += 4
        elif m in (0xCB, 0xCF, 0xD3):
            pos += 8
        elif m in (0xC4, 0xD9):
            pos += 1 + raw[pos]
        elif m in (0xC5, 0xDA):
            pos += 2 + int.from_bytes(raw[pos:pos + 2], "big")
        elif m in (0xC6, 0xDB):
            pos += 4 + int.from_bytes(raw[pos:pos + 4], "big")
        elif m == 0xDC:
            pending += int.from_bytes(raw[pos:pos + 2], "big")
            pos += 2
        elif m == 0xDD:
            pending += int.from_bytes(raw[pos:pos + 4], "big")
            pos += 4
        elif m == 0xDE:
            pending += 2 * int.from_bytes(raw[pos:pos + 2], "big")
            pos += 2
        elif m == 0xDF:
            pending += 2 * int.from_bytes(raw[pos:pos + 4], "big")
            pos += 4
        elif 0xD4 <= m <= 0xD8:  # fixext 1, 2, 4, 8, 16: a type byte and the data
            pos += 1 + (1 << (m - 0xD4))
        elif m in (0xC7, 0xC8, 0xC9):  # ext 8, 16, 32: length, type byte, data
            width = 1 << (m - 0xC7)
            pos += width + 1 + int.from_bytes(raw[pos:pos + width], "big")
        else:
            raise ValueError(f"invalid opcode {m:#x}")
    return pos


def _str_at(raw: bytes, pos: int) -> tuple[bytes, int] | None:
    """The bytes of the string at `pos` and the position after it; None for another type."""
    m = raw[pos]
    if 0xA0 <= m <= 0xBF:
        n, pos = m & 0x1F, pos + 1
    elif 0xD9 <= m <= 0xDB:
        width = 1 << (m - 0xD9)
        n, pos = int.from_bytes(raw[pos + 1:pos + 1 + width], "big"), pos + 1 + width
    else:
        return None
    return raw[pos:pos + n], pos + n


def _tag(raw: bytes) -> bytes | None:
    """The tag of a (well-formed) event: the first `"type"` of a map whose keys before it are
    strings, and whose value is a string; the first element of an array, a string. None otherwise."""
    try:
        m = raw[0]
        if _is_map(raw):
            if m <= 0x8F:
                pairs, pos = m & 0x0F, 1
            else:
                width = 2 if m == 0xDE else 4
                pairs, pos = int.from_bytes(raw[1:1 + width], "big"), 1 + width
            for _ in range(pairs):
                key = _str_at(raw, pos)
                if key is None:
                    return None
                if key[0] == b"type":
                    value = _str_at(raw, key[1])
                    return None if value is None else value[0]
                pos = _skip(raw, key[1])
            return None
        if 0x91 <= m <= 0x9F:
            pos = 1
        elif m in (0xDC, 0xDD) and int.from_bytes(raw[1:3 if m == 0xDC else 5], "big") > 0:
            pos = 3 if m == 0xDC else 5
        else:
            return None
        value = _str_at(raw, pos)
        return None if value is None else value[0]
    except (IndexError, ValueError):
        return None


def _normalize(wire: Any) -> Event:
    if isinstance(wire, (_MapStored, _ArrayStored)):
        bigram = isinstance(wire, (_BigramMapStored, _BigramArrayStored))
        return BlockStored(
            block_hashes=[hash_value(h) for h in wire.block_hashes],
            parent_block_hash=None if wire.parent_block_hash is None else hash_value(wire.parent_block_hash),
            token_ids=[pair[0] for pair in wire.token_ids] if bigram else wire.token_ids,
            block_size=wire.block_size,
            medium=wire.medium or DEFAULT_MEDIUM,
            lora_name=wire.lora_name,
            cache_salt=getattr(wire, "cache_salt", None),
            extra_keys=wire.extra_keys,
            group_idx=wire.group_idx,
            locality=wire.locality,
            bigram=bigram,
            lookahead_token_ids=getattr(wire, "lookahead_token_ids", None),
        )
    if isinstance(wire, (_MapRemoved, _ArrayRemoved)):
        return BlockRemoved(
            block_hashes=[hash_value(h) for h in wire.block_hashes],
            medium=wire.medium or DEFAULT_MEDIUM,
            group_idx=wire.group_idx,
            locality=wire.locality,
        )
    return AllBlocksCleared()


def decode_event(raw: bytes) -> Event | None:
    """Decodes one event (map or positional array); None for one whose tag names no class this
    decoder knows (see the module docs)."""
    is_map = _is_map(raw)
    try:
        wire = (_map_decoder if is_map else _array_decoder).decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        try:
            wire = (_bigram_map_decoder if is_map else _bigram_array_decoder).decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as bigram_error:
            tag = _tag(raw)
            if tag is not None and tag not in KNOWN_TAGS:
                return None
            if str(e).endswith(("got `array` - at `$.token_ids[0]`", "got `array` - at `$[3][0]`")):
                e = bigram_error  # a list of pairs, one of them malformed: what is wrong with it
            raise DecodeError(f"event: {e}") from None
    except RecursionError:
        # msgspec decodes nested arrays and maps (an `extra_keys` value) recursively: a payload of
        # a kilobyte nested a thousand deep is malformed input, refused like any other (the
        # native decoder refuses nesting past 1000), not an error of the sink.
        raise DecodeError("event: nested too deep") from None
    return _normalize(wire)


def decode_batch(payload: bytes) -> Batch:
    """Decodes one published batch; raises DecodeError for anything else."""
    try:
        wire = _batch_decoder.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise DecodeError(f"batch: {e}") from None
    except RecursionError:  # as in `decode_event`
        raise DecodeError("batch: nested too deep") from None
    events = []
    unknown = 0
    for i, raw in enumerate(wire.events):
        try:
            event = decode_event(bytes(raw))
        except DecodeError as e:
            raise DecodeError(f"events[{i}]: {e}") from None
        if event is None:
            unknown += 1
        else:
            events.append(event)
    return Batch(ts=wire.ts, events=events, dp_rank=wire.dp_rank, unknown_events=unknown)


def cache_salt_of(event: BlockStored) -> str:
    """The cache salt of a store that starts a sequence; empty when there is none.

    SGLang publishes it as a field. vLLM publishes it only as a bare string in the first block's
    untagged `extra_keys`, after the LoRA name (also a bare string) and multimodal pairs.
    """
    if event.cache_salt:
        return event.cache_salt
    if event.parent_block_hash is not None or not event.extra_keys:
        return ""
    first = event.extra_keys[0]
    if not isinstance(first, (list, tuple)):
        return ""
    strings = [k for k in first if isinstance(k, str)]
    if event.lora_name and strings and strings[0] == event.lora_name:
        strings = strings[1:]
    return strings[-1] if strings else ""


def mm_keys_of(event: BlockStored) -> list[list[tuple[str, int]]]:
    """Each block's multimodal keys, from vLLM's untagged per-block `extra_keys`
    (`to_event_extra_keys`): the elements of `extra_keys[i]` that are `[identifier, offset]` pairs
    (a string and an integer), in order, for block i. Empty when there are none (SGLang, vLLM
    without images).

    Other elements are not multimodal keys: bare strings (the LoRA name, the cache salt) and
    bytes (prompt-embeds digests). Older vLLM hashed an item by its bare identifier (0.15 does, and
    publishes no `extra_keys`): a bare identifier is a string like the LoRA name and the salt,
    cannot be told from them, and is ignored, so such blocks keep their text-only keys (a request
    with an image may then match a worker that holds another image, as before this rule).
    """
    extra = event.extra_keys
    if not extra:
        return []
    out: list[list[tuple[str, int]]] = []
    found = False
    for keys in extra:
        pairs: list[tuple[str, int]] = []
        if isinstance(keys, (list, tuple)):
            for key in keys:
                if (isinstance(key, (list, tuple)) and len(key) == 2 and type(key[0]) is str
                        and type(key[1]) is int):
                    pairs.append((key[0], key[1]))
        found = found or bool(pairs)
        out.append(pairs)
    return out if found else []
