"""`NativePrefixIndex`: the KV prefix index in the native core (`sc_kv_index`), with the API of
`router_adapter.index.PrefixIndex` plus `apply_payload` for raw engine payloads.

A payload handed to `apply_payload` is decoded and applied in native code (no Python object per
event). `apply_batch` takes already-decoded events: it copies each event's hashes and token ids
into arrays, encodes the rest with msgspec in one call (`SC_KV_PAYLOAD_PACKED`), and the native
side reads that, so it costs a few Python operations per event and none per block or token.

The handle locks internally: one thread may apply while others score (every call releases the
GIL). It is held in a `Handle`: every call takes a lease, and `close()` frees the index when the
last call in flight returns; a call after `close()` raises FailedPrecondition.
"""

from __future__ import annotations

import json
import struct
import threading
import time
from array import array
from itertools import accumulate
from dataclasses import asdict, replace
from typing import Any, Sequence

import msgspec

from router_adapter.events import (
    AllBlocksCleared,
    Batch,
    BlockRemoved,
    BlockStored,
    DecodeError,
    Event,
    apply_each,
    cache_salt_of,
    mm_keys_of,
)
from router_adapter.hashing import BlockHasher
from router_adapter.index import IndexStats, Score, WorkerScore
from router_adapter.spec import MAX_LOOKAHEAD, HashSpec, MmItem
from sidecar.errors import InvalidArgument, SidecarError
from sidecar.native._calls import (
    call_bytes, call_out, ids_arg, owned_u32_view, split_refusal, str_arg, take_bytes, uint32_ids,
)
from sidecar.native._errors import raise_for_status
from sidecar.native._ffi import ffi, lib
from sidecar.native._handle import Handle

_ENCODER = msgspec.msgpack.Encoder()
# Looked up once: attribute reads on an ABI-mode `lib` cost a noticeable part of a small call.
_OK = lib.SC_STATUS_OK
_ENGINE = lib.SC_KV_PAYLOAD_ENGINE
_NORMALIZED = lib.SC_KV_PAYLOAD_NORMALIZED
_APPLY = lib.sc_kv_index_apply
_APPLY_COLUMNS = lib.sc_kv_index_apply_columns
_APPLY_MANY = lib.sc_kv_index_apply_many
#: Items the first `apply_many` call after a refused payload covers (see `apply_payloads`).
_WINDOW_AFTER_REFUSAL = 64
_HEADER = struct.Struct("<4I")
#: `sc_kv_status.lookahead` while the index has not learned it (0 is a value: no lookahead).
_LOOKAHEAD_UNKNOWN = 0xFFFF_FFFF
_ERRORS = threading.local()


def _err_box():  # noqa: ANN202 - cffi cdata
    """This thread's `sc_error **` (a call writes it only when it fails, and the error record is
    freed when it is raised), so the hot calls allocate nothing for it."""
    box = getattr(_ERRORS, "box", None)
    if box is None:
        box = _ERRORS.box = ffi.new("sc_error **")
    return box


class NativePrefixIndex:
    """One model's index in the native core (see the module docs)."""

    def __init__(
        self,
        block_size: int | None = None,
        *,
        engine_spec: HashSpec | None = None,
        max_blocks: int = 4_000_000,
        group_idx: int = 0,
        hasher: BlockHasher | None = None,
        lookahead: int | None = None,
    ) -> None:
        # The same checks and messages as PrefixIndex. `hasher` is accepted for KvRouter's
        # `index_factory` signature and not used: this index hashes in the native core, whose
        # values equal every `BlockHasher`'s (tests/kv/test_hashing.py).
        del hasher
        if lookahead is not None and (type(lookahead) is not int or not 0 <= lookahead <= MAX_LOOKAHEAD):
            raise ValueError(f"lookahead must be an integer in [0, {MAX_LOOKAHEAD}]")
        if lookahead is not None and engine_spec is not None:
            raise ValueError("lookahead is for content mode (engine mode hashes with engine_spec.lookahead)")
        if engine_spec is not None:
            engine_spec.validate()
            if block_size is not None and block_size != engine_spec.block_size:
                raise ValueError("block_size differs from engine_spec.block_size")
            block_size = engine_spec.block_size
        if block_size is not None and block_size <= 0:
            raise ValueError("block_size must be > 0")
        if max_blocks < 0:
            raise ValueError("max_blocks must be >= 0")
        self.engine_spec = engine_spec
        self.mode = "engine" if engine_spec is not None else "content"
        self.max_blocks = max_blocks
        self.group_idx = group_idx
        options = {
            "block_size": block_size,
            "engine_spec": json.loads(engine_spec.to_json()) if engine_spec is not None else None,
            "max_blocks": max_blocks,
            "group_idx": group_idx,
            "lookahead": lookahead,
        }
        handle = call_out("sc_kv_index *", lib.sc_kv_index_new, str_arg(json.dumps(options).encode()))
        self._handle = Handle(handle, lib.sc_kv_index_free, "kv index")
        #: worker name -> (its UTF-8 buffer, an `sc_str` pointing at it): names repeat on every
        #: batch, and building the argument costs as much as a small native call.
        self._names: dict[str, tuple[Any, Any]] = {}

    # --- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Frees the native index (when the last call in flight returns); later calls raise
        FailedPrecondition. Idempotent."""
        self._handle.close()

    # --- reading ----------------------------------------------------------------------------------

    def _status(self):  # noqa: ANN202 - cffi cdata
        with self._handle as index:
            return call_out("sc_kv_status", lib.sc_kv_index_status, index)

    @property
    def block_size(self) -> int | None:
        """Tokens per block; learned from the first store when not configured."""
        return self._status().block_size or None

    @property
    def lookahead(self) -> int | None:
        """Content mode: tokens after each block that its key covers, configured or learned from
        the first store that tells (None until then, and in engine mode: see `PrefixIndex`)."""
        value = self._status().lookahead
        return None if value == _LOOKAHEAD_UNKNOWN else value

    @property
    def num_blocks(self) -> int:
        """Blocks held, counting each (worker, engine hash) once whatever its media."""
        return self._status().blocks

    @property
    def stats(self) -> IndexStats:
        s = self._status()
        return IndexStats(
            events=s.events, blocks_stored=s.blocks_stored, blocks_removed=s.blocks_removed,
            orphan_blocks=s.orphan_blocks, unknown_removals=s.unknown_removals, skipped_events=s.skipped_events,
            evicted_blocks=s.evicted_blocks, worker_resets=s.worker_resets,
        )

    @property
    def allocated_bytes(self) -> int:
        """Bytes the native tables hold (RSS adds the allocator's slack)."""
        with self._handle as index:
            return call_out("uint64_t", lib.sc_kv_index_allocated_bytes, index)

    @property
    def num_keys(self) -> int:
        """Distinct keys held by any worker."""
        return self._status().keys

    @property
    def workers(self) -> list[str]:
        with self._handle as index:
            return json.loads(call_bytes(lib.sc_kv_index_workers, index))

    def worker_blocks(self, worker: str) -> int:
        """Blocks `worker` holds (0 when unknown)."""
        with self._handle as index:
            return call_out("uint64_t", lib.sc_kv_index_worker_blocks, index, str_arg(worker.encode()))

    def events_per_second(self, window_s: float = 10.0) -> float:
        """Events applied per second over the last `window_s` seconds (at most 4096 events)."""
        with self._handle as index:
            return call_out("double", lib.sc_kv_index_events_per_second, index, float(window_s))

    def _request_args(self, token_ids: Sequence[int], lora_name: str, cache_salt: str,
                      mm_items: Sequence[MmItem], lora_path: str) -> tuple[Any, ...]:
        mm = b""
        if mm_items:
            # Validated here so that a bad item raises what the Python index raises.
            if self.engine_spec is not None:
                replace(self.engine_spec, cache_salt=cache_salt, lora_name=lora_name, mm_items=tuple(mm_items)).validate()
            else:
                HashSpec("dynamo_xxh3", 1, mm_items=tuple(mm_items)).validate()
            mm = json.dumps([asdict(m) for m in mm_items]).encode()
        ids = uint32_ids(token_ids)
        # The buffers must outlive the call: keep them in the tuple.
        return (ids, ids_arg(ids), str_arg(lora_name.encode()), str_arg(lora_path.encode()),
                str_arg(cache_salt.encode()), str_arg(mm))

    def request_keys(
        self, token_ids: Sequence[int], lora_name: str = "", cache_salt: str = "", mm_items: Sequence[MmItem] = (),
        lora_path: str = "",
    ) -> list[int]:
        """The index keys of a request's full blocks."""
        _, *args = self._request_args(token_ids, lora_name, cache_salt, mm_items, lora_path)
        with self._handle as index:
            raw = call_bytes(lib.sc_kv_index_request_keys, index, *args)
        return memoryview(raw).cast("Q").tolist() if raw else []

    def score(
        self, token_ids: Sequence[int], lora_name: str = "", cache_salt: str = "", mm_items: Sequence[MmItem] = (),
        lora_path: str = "",
    ) -> Score:
        """Each worker's consecutive matching blocks from the start of the request."""
        _, *args = self._request_args(token_ids, lora_name, cache_salt, mm_items, lora_path)
        with self._handle as index:
            raw = call_bytes(lib.sc_kv_index_score, index, *args)
        return self._score(raw)

    def score_response(
        self, token_ids: Sequence[int], lora_name: str = "", cache_salt: str = "", mm_items: Sequence[MmItem] = (),
        lora_path: str = "", *, block_hash_spec: bytes = b"", fingerprint: str = "", warming: bool = False,
    ) -> bytes:
        """`score` as a serialized `kv_router.ScoreResponse`, written natively (no Python object per
        worker or block hash): `num_tokens` is `len(token_ids)`; the caller gives what only it knows,
        `fingerprint`, `warming` and, for an engine-mode index, `block_hash_spec` (a serialized
        `BlockHashSpec`; content mode leaves the field out)."""
        _, *args = self._request_args(token_ids, lora_name, cache_salt, mm_items, lora_path)
        spec = ffi.from_buffer(block_hash_spec) if block_hash_spec else ffi.NULL
        with self._handle as index:
            return call_bytes(lib.sc_kv_index_score_response, index, *args, spec, len(block_hash_spec),
                              str_arg(fingerprint.encode()), bool(warming))

    def score_keys(self, keys: list[int]) -> Score:
        """`score` for precomputed request keys."""
        arr = array("Q", keys)
        ptr = ffi.from_buffer("uint64_t[]", arr) if arr else ffi.NULL
        with self._handle as index:
            raw = call_bytes(lib.sc_kv_index_score_keys, index, ptr, len(arr))
        return self._score(raw)

    def _score(self, raw: bytes) -> Score:
        block_size, n_keys, n_workers, n_media = _HEADER.unpack_from(raw)
        view = memoryview(raw)
        at = _HEADER.size
        keys = view[at : at + 8 * n_keys].cast("Q").tolist()
        at += 8 * n_keys
        blocks = view[at : at + 4 * n_workers].cast("I").tolist()
        at += 4 * n_workers
        depths = view[at : at + 4 * n_workers * n_media].cast("I").tolist()
        at += 4 * n_workers * n_media
        ends = view[at : at + 4 * (n_media + n_workers)].cast("I").tolist()
        at += 4 * (n_media + n_workers)
        blob = raw[at:]
        text = str(blob, "utf-8")
        # Offsets count bytes: slicing the decoded text by them is right when every character
        # is one byte (worker names are ASCII in practice), and one decode beats one per name.
        source = text if len(text) == len(blob) else None
        names = []
        start = 0
        for end in ends:
            names.append(source[start:end] if source is not None else str(blob[start:end], "utf-8"))
            start = end
        media, worker_names = names[:n_media], names[n_media:]
        if n_media == 1:
            medium = media[0]
            workers = [WorkerScore(n, b, b * block_size, {medium: b}) for n, b in zip(worker_names, blocks)]
        else:
            workers = [
                WorkerScore(n, b, b * block_size, dict(zip(media, depths[i * n_media : (i + 1) * n_media])))
                for i, (n, b) in enumerate(zip(worker_names, blocks))
            ]
        return Score(block_size, keys, self.mode, workers)

    # --- writing ----------------------------------------------------------------------------------

    def apply_payload(self, worker: str, payload: bytes) -> None:
        """Decodes and applies a batch as an engine published it (vLLM or SGLang msgpack); a
        malformed payload raises `DecodeError` (what `router_adapter.events.decode_batch` refuses)
        and changes nothing."""
        try:
            self._apply(worker, payload, _ENGINE)
        except InvalidArgument as e:
            refused = _as_decode_error(e)
            if refused is not None:
                raise refused from None
            raise

    def apply_payloads(self, items: Sequence[tuple[str, Any]]) -> list[tuple[int, DecodeError]]:
        """`apply_payload` of each (worker, payload) in order, in one native call. A small
        payload's cost is mostly the call itself (Python and cffi, about 2 µs), which a consumer
        reading many messages at once pays here once; the index's lock is still taken per
        payload, so scoring waits no longer. Returns the payloads refused as malformed, as
        (position, DecodeError): each changed nothing, and the ones after it are applied. Any
        other error is raised once the payloads before it are applied, as a loop of
        `apply_payload` calls would raise it."""
        try:
            joined = _joined(items)
        except (UnicodeEncodeError, TypeError, AttributeError):
            # An argument one call would refuse: a call per payload, for the same outcome in order.
            return apply_each(self.apply_payload, items)
        refused: list[tuple[int, DecodeError]] = []
        # The buffers are joined once; a call after a refused payload starts inside them. Only
        # the ends of the items it covers are rebased (the native call counts them from its own
        # start), and after a refusal a call covers a window that doubles while calls succeed: a
        # run with many refusals costs a rebase of a few items each, not of all that follow.
        start, window = 0, len(items)
        while start < len(items):
            stop = min(len(items), start + window)
            applied, error = self._apply_many(joined, start, stop)
            if error is None:
                start, window = stop, 2 * window
                continue
            decode_error = _as_decode_error(error)
            if decode_error is None:
                raise error
            refused.append((start + applied, decode_error))
            start, window = start + applied + 1, _WINDOW_AFTER_REFUSAL
        return refused

    def _apply_many(self, joined: tuple[bytes, array, bytes, array], start: int, stop: int,
                    ) -> tuple[int, SidecarError | None]:
        """One `sc_kv_index_apply_many` call over items `start .. stop-1` of the joined buffers:
        (payloads applied, the error that stopped it)."""
        names, name_ends, payloads, payload_ends = joined
        count = stop - start
        name_from = name_ends[start - 1] if start else 0
        payload_from = payload_ends[start - 1] if start else 0
        if start or stop < len(name_ends):
            name_ends = array("Q", [end - name_from for end in name_ends[start:stop]])
            payload_ends = array("Q", [end - payload_from for end in payload_ends[start:stop]])
        name_to = name_ends[-1] if count else 0
        payload_to = payload_ends[-1] if count else 0
        # The views are held for the call: a pointer into one does not keep it alive.
        names_view, payloads_view = ffi.from_buffer("uint8_t[]", names), ffi.from_buffer("uint8_t[]", payloads)
        names_at, payloads_at = names_view + name_from, payloads_view + payload_from
        applied, err = ffi.new("uintptr_t *"), _err_box()
        with self._handle as index:
            status = _APPLY_MANY(
                index, names_at, name_to, ffi.from_buffer("uint64_t[]", name_ends) if count else ffi.NULL,
                payloads_at, payload_to, ffi.from_buffer("uint64_t[]", payload_ends) if count else ffi.NULL,
                count, _ENGINE, applied, err,
            )
        if status == _OK:
            return applied[0], None
        try:
            raise_for_status(status, err)
        except SidecarError as e:
            return applied[0], e
        return applied[0], None  # unreachable: a failed status always raises

    def apply_batch(self, worker: str, batch: Batch) -> None:
        """Applies a decoded batch published by `worker`."""
        columns = _columns(batch)
        if columns is not None:
            self._apply_columns(worker, *columns)
            return
        try:
            payload = _ENCODER.encode(batch)
        except (TypeError, OverflowError, ValueError):
            payload = _ENCODER.encode(_plain(batch))
        self._apply(worker, payload, _NORMALIZED)

    def apply(self, worker: str, event: Event) -> None:
        """Applies one decoded event."""
        self.apply_batch(worker, Batch(ts=time.time(), events=[event]))

    def _apply(self, worker: str, payload: bytes, encoding: int) -> None:
        name = self._name_arg(worker)
        err = _err_box()
        with self._handle as index:
            # bytes pass as they are (no buffer object to make); other buffers (a ZMQ frame's) by view.
            data = payload if type(payload) is bytes else ffi.from_buffer(payload)
            status = _APPLY(index, name[2], data, len(payload), encoding, err)
        if status != _OK:
            raise_for_status(status, err)

    def _apply_columns(self, worker: str, header: bytes, hashes: array, tokens: array) -> None:
        name = self._name_arg(worker)
        err = _err_box()
        with self._handle as index:
            status = _APPLY_COLUMNS(
                index, name[2], header, len(header),  # bytes pass as is: no buffer object to make
                ffi.from_buffer("uint64_t[]", hashes) if hashes else ffi.NULL, len(hashes),
                ffi.from_buffer("uint32_t[]", tokens) if tokens else ffi.NULL, len(tokens), err,
            )
        if status != _OK:
            raise_for_status(status, err)

    def _name_arg(self, worker: str) -> tuple[Any, Any, Any]:
        """A worker's name as (buffer, `sc_str *`, the `sc_str` itself), made once per worker;
        the caller holds the tuple for the call (the buffer must outlive it) and passes
        `name[2]`."""
        cached = self._names.get(worker)
        if cached is not None:
            return cached
        data = worker.encode()
        buf = ffi.from_buffer("uint8_t[]", data) if data else ffi.NULL
        arg = ffi.new("sc_str *")
        arg.ptr, arg.len = buf, len(data)
        name = (buf, arg, arg[0])
        if len(self._names) < 4096:  # workers of one model: a bound, not an expected size
            self._names[worker] = name
        return name

    def drop_worker(self, worker: str) -> None:
        """Forgets everything `worker` holds (engine restart, unrecoverable gap, silence)."""
        with self._handle as index:
            call_out("bool", lib.sc_kv_index_drop_worker, index, str_arg(worker.encode()))

    # --- snapshots --------------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The whole state as a compact binary snapshot (about 20 bytes per entry)."""
        with self._handle as index:
            return call_bytes(lib.sc_kv_index_snapshot, index)

    def restore(self, data: bytes) -> None:
        """Replaces the state with a snapshot's (same mode, spec, group and block size); raises
        InvalidArgument for a corrupt snapshot and FailedPrecondition for a mismatched one."""
        err = ffi.new("sc_error **")
        with self._handle as index:
            status = lib.sc_kv_index_restore(index, ffi.from_buffer(data), len(data), err)
        raise_for_status(status, err)


def split_score(message: bytes) -> tuple[bytes, memoryview, SidecarError | None] | None:
    """A raw KvRouter `ScoreRequest` whose input is `token_ids`, without its input (fields 2-4),
    and its ids as a read-only uint32 view in native memory (what `NativePrefixIndex.score` takes
    without a copy): the ids are decoded natively, GIL released, never as Python ints. None when
    the input is not `token_ids` (the oneof read as protobuf reads it). A message that does not
    decode raises InvalidArgument; an id above 2^32-1 (protobuf would truncate it) comes back as
    the third item, InvalidArgument naming it."""
    is_ids, rest, ids = ffi.new("bool *"), ffi.new("sc_bytes *"), ffi.new("sc_bytes *")
    err = ffi.new("sc_error **")
    status = lib.sc_kv_score_split(ffi.from_buffer(message), len(message), is_ids, rest, ids, err)
    without_input = take_bytes(rest)
    refused = split_refusal(status, err, answerable=bool(is_ids[0]))
    if refused is not None:
        return without_input, memoryview(b"").cast("I"), refused
    if not is_ids[0]:
        return None
    return without_input, owned_u32_view(ids), None


class _ColumnStored(msgspec.Struct, gc=False):
    """A `BlockStored` in a columns header: `block_hashes` and `token_ids` are how many values it
    takes from the side arrays (no `extra_keys`: see `_columns`)."""

    block_hashes: int
    parent_block_hash: int | None
    token_ids: int
    block_size: int
    medium: str
    lora_name: str | None
    cache_salt: str | None
    group_idx: int | None
    locality: str | None
    bigram: bool


class _ColumnRemoved(msgspec.Struct, gc=False):
    block_hashes: int
    medium: str
    group_idx: int | None
    locality: str | None


class _ColumnCleared(msgspec.Struct, gc=False):
    pass


_CLEARED = _ColumnCleared()
_U64 = (1 << 64) - 1


def _extend_hashes(values: array, hashes: list[int]) -> None:
    """Appends block hashes as 64-bit patterns (two's complement for negative ones, as the
    MessagePack path keeps them); raises OverflowError for an int outside int64 and uint64."""
    try:
        values.fromlist(hashes)
    except OverflowError:
        if min(hashes) < -(1 << 63) or max(hashes) >= 1 << 64:
            raise
        values.fromlist([h & _U64 for h in hashes])


def _columns(batch: Batch) -> tuple[bytes, array, array] | None:
    """`batch` as `sc_kv_index_apply_columns` takes it: a header of the events' other fields, and
    every event's hashes and token ids appended to two arrays (`array.fromlist`: no integer is
    encoded or copied one at a time in Python). None when an event needs the general path:
    `lookahead_token_ids`, `extra_keys` (read natively for the salt and the multimodal keys), a token id outside uint32 (skipped natively, where
    it falls), or anything the arrays cannot hold (the general path raises what it raises)."""
    events: list[Any] = []
    hashes, tokens = array("Q"), array("I")
    try:
        for event in batch.events:
            kind = type(event)
            if kind is BlockStored:
                if event.extra_keys is not None or event.lookahead_token_ids is not None:
                    return None
                tokens.fromlist(event.token_ids)
                _extend_hashes(hashes, event.block_hashes)
                events.append(_ColumnStored(
                    len(event.block_hashes), event.parent_block_hash, len(event.token_ids), event.block_size,
                    event.medium, event.lora_name, event.cache_salt, event.group_idx, event.locality, event.bigram,
                ))
            elif kind is BlockRemoved:
                _extend_hashes(hashes, event.block_hashes)
                events.append(_ColumnRemoved(len(event.block_hashes), event.medium, event.group_idx, event.locality))
            elif kind is AllBlocksCleared:
                events.append(_CLEARED)
            else:
                return None
        return _ENCODER.encode({"events": events, "unknown_events": batch.unknown_events}), hashes, tokens
    except (TypeError, OverflowError, ValueError):
        return None


def _as_decode_error(e: SidecarError) -> DecodeError | None:
    """The DecodeError a refusal of a payload's contents is (the native index names them
    `payload:`), or None for any other error."""
    return DecodeError(str(e)) if isinstance(e, InvalidArgument) and str(e).startswith("payload:") else None


def _joined(items: Sequence[tuple[str, Any]]) -> tuple[bytes, array, bytes, array]:
    """Workers' names and payloads as `sc_kv_index_apply_many` takes them: each kind joined into
    one buffer, with the end of every item."""
    names = [worker.encode() for worker, _ in items]
    payloads = [payload for _, payload in items]
    return (b"".join(names), array("Q", accumulate(map(len, names))),
            b"".join(payloads), array("Q", accumulate(map(len, payloads))))


def _plain(batch: Batch) -> Batch:
    """The batch with what msgspec cannot encode reduced to what the index reads: a store's
    `extra_keys` (arbitrary objects) become its cache salt and its blocks' multimodal keys (their
    offsets as the 64 bits the keys hash)."""
    events: list[Event] = []
    for event in batch.events:
        if isinstance(event, BlockStored) and event.extra_keys is not None:
            mm = [[[identifier, offset & _U64] for identifier, offset in keys] for keys in mm_keys_of(event)]
            event = msgspec.structs.replace(event, extra_keys=mm or None, cache_salt=cache_salt_of(event))
        events.append(event)
    return Batch(ts=batch.ts, events=events, dp_rank=batch.dp_rank, unknown_events=batch.unknown_events)

