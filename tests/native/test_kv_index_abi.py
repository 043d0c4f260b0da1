"""The C ABI of the KV prefix index (`sc_kv_index_*`), called through cffi as a C caller would:
NULL handles, NULL pointers with lengths, NULL out-pointers, bad options, malformed payloads and
snapshots, error kinds and messages, NULL-safe free, and no leak over create/use/free cycles."""

from __future__ import annotations

import gc
import subprocess
import sys

import msgspec
import pytest

from sidecar.native import ffi, lib
from tests.conftest import REPO

PAYLOAD = msgspec.msgpack.encode([1.0, [{"type": "BlockStored", "block_hashes": [1, 2], "parent_block_hash": None,
                                         "token_ids": list(range(8)), "block_size": 4}]])


def arg(data: bytes) -> tuple[dict, object]:
    buf = ffi.from_buffer("uint8_t[]", data) if data else ffi.NULL
    return {"ptr": buf, "len": len(data)}, buf


def take_error(err) -> tuple[int, str]:  # noqa: ANN001
    assert err[0] != ffi.NULL
    kind = err[0].kind
    message = ffi.unpack(ffi.cast("char *", err[0].message), err[0].message_len).decode()
    lib.sc_error_free(err[0])
    err[0] = ffi.NULL
    return kind, message


def new_index(options: bytes = b'{"block_size": 4}'):  # noqa: ANN201
    out = ffi.new("sc_kv_index **")
    err = ffi.new("sc_error **")
    s, keep = arg(options)
    assert lib.sc_kv_index_new(s, out, err) == lib.SC_STATUS_OK, take_error(err)
    return out[0]


def apply(index, worker: bytes, payload: bytes, encoding: int = 0) -> tuple[int, object]:  # noqa: ANN001
    err = ffi.new("sc_error **")
    w, keep_w = arg(worker)
    data = ffi.from_buffer("uint8_t[]", payload) if payload else ffi.NULL
    return lib.sc_kv_index_apply(index, w, data, len(payload), encoding, err), err


def test_happy_path_by_hand() -> None:
    index = new_index()
    try:
        status, err = apply(index, b"w0", PAYLOAD)
        assert status == lib.SC_STATUS_OK and err[0] == ffi.NULL
        ids = ffi.new("uint32_t[]", list(range(8)))
        empty, _ = arg(b"")
        out = ffi.new("sc_bytes *")
        err = ffi.new("sc_error **")
        assert lib.sc_kv_index_score(index, {"ptr": ids, "len": 8}, empty, empty, empty, empty, out, err) == lib.SC_STATUS_OK
        raw = ffi.unpack(ffi.cast("char *", out.ptr), out.len)
        lib.sc_bytes_free(out)
        block_size, keys, workers, media = (int.from_bytes(raw[i : i + 4], "little") for i in range(0, 16, 4))
        assert (block_size, keys, workers, media) == (4, 2, 1, 1)
        blocks = int.from_bytes(raw[16 + 16 : 16 + 20], "little")
        assert blocks == 2 and raw.endswith(b"GPUw0")
        status_out = ffi.new("sc_kv_status *")
        assert lib.sc_kv_index_status(index, status_out, err) == lib.SC_STATUS_OK
        assert (status_out.events, status_out.blocks, status_out.workers, status_out.block_size) == (1, 2, 1, 4)
    finally:
        lib.sc_kv_index_free(index)


def test_null_handle_is_invalid_argument_naming_it() -> None:
    err = ffi.new("sc_error **")
    empty, _ = arg(b"")
    out = ffi.new("sc_bytes *")
    calls = [
        lambda: lib.sc_kv_index_apply(ffi.NULL, empty, ffi.NULL, 0, 0, err),
        lambda: lib.sc_kv_index_drop_worker(ffi.NULL, empty, ffi.new("bool *"), err),
        lambda: lib.sc_kv_index_score(ffi.NULL, {"ptr": ffi.NULL, "len": 0}, empty, empty, empty, empty, out, err),
        lambda: lib.sc_kv_index_score_keys(ffi.NULL, ffi.NULL, 0, out, err),
        lambda: lib.sc_kv_index_request_keys(ffi.NULL, {"ptr": ffi.NULL, "len": 0}, empty, empty, empty, empty, out, err),
        lambda: lib.sc_kv_index_status(ffi.NULL, ffi.new("sc_kv_status *"), err),
        lambda: lib.sc_kv_index_workers(ffi.NULL, out, err),
        lambda: lib.sc_kv_index_worker_blocks(ffi.NULL, empty, ffi.new("uint64_t *"), err),
        lambda: lib.sc_kv_index_events_per_second(ffi.NULL, 10.0, ffi.new("double *"), err),
        lambda: lib.sc_kv_index_allocated_bytes(ffi.NULL, ffi.new("uint64_t *"), err),
        lambda: lib.sc_kv_index_snapshot(ffi.NULL, out, err),
        lambda: lib.sc_kv_index_restore(ffi.NULL, ffi.NULL, 0, err),
    ]
    for call in calls:
        assert call() == lib.SC_STATUS_ERROR
        assert take_error(err) == (lib.SC_ERR_KIND_INVALID_ARGUMENT, "index: null handle")


def test_null_pointers_and_out_pointers() -> None:
    index = new_index()
    try:
        err = ffi.new("sc_error **")
        empty, _ = arg(b"")
        assert lib.sc_kv_index_apply(index, empty, ffi.NULL, 5, 0, err) == lib.SC_STATUS_ERROR
        assert take_error(err) == (lib.SC_ERR_KIND_INVALID_ARGUMENT, "payload: null pointer with length 5")
        assert lib.sc_kv_index_score_keys(index, ffi.NULL, 3, ffi.new("sc_bytes *"), err) == lib.SC_STATUS_ERROR
        assert take_error(err)[1] == "keys: null pointer with length 3"
        assert lib.sc_kv_index_restore(index, ffi.NULL, 2, err) == lib.SC_STATUS_ERROR
        assert take_error(err)[1] == "data: null pointer with length 2"
        for call in (
            lambda: lib.sc_kv_index_snapshot(index, ffi.NULL, err),
            lambda: lib.sc_kv_index_score_keys(index, ffi.NULL, 0, ffi.NULL, err),
            lambda: lib.sc_kv_index_status(index, ffi.NULL, err),
            lambda: lib.sc_kv_index_drop_worker(index, empty, ffi.NULL, err),
            lambda: lib.sc_kv_index_new(empty, ffi.NULL, err),
        ):
            assert call() == lib.SC_STATUS_ERROR
            kind, message = take_error(err)
            assert kind == lib.SC_ERR_KIND_INVALID_ARGUMENT and "null out-pointer" in message
        # A NULL err pointer still reports the status.
        assert lib.sc_kv_index_apply(index, empty, ffi.NULL, 5, 0, ffi.NULL) == lib.SC_STATUS_ERROR
    finally:
        lib.sc_kv_index_free(index)
    lib.sc_kv_index_free(ffi.NULL)


@pytest.mark.parametrize(
    ("options", "field"),
    [(b"{", "options"), (b'{"colour": 1}', "options"), (b'{"block_size": 0}', "block_size"),
     (b'{"max_blocks": -1}', "options"), (b'{"engine_spec": {"algorithm": "md5", "block_size": 4}}', "engine_spec"),
     (b'{"engine_spec": {"algorithm": "vllm_xxhash", "block_size": 4}}', "block_hashing.seed"),
     (b'{"block_size": 8, "engine_spec": {"algorithm": "vllm_sha256", "block_size": 4}}', "block_size"),
     (b"\xff", "options_json: not valid UTF-8")],
)
def test_bad_options_name_the_field(options: bytes, field: str) -> None:
    out = ffi.new("sc_kv_index **")
    err = ffi.new("sc_error **")
    s, keep = arg(options)
    assert lib.sc_kv_index_new(s, out, err) == lib.SC_STATUS_ERROR
    kind, message = take_error(err)
    assert kind == lib.SC_ERR_KIND_INVALID_ARGUMENT and field in message, message
    assert out[0] == ffi.NULL


def test_bad_payloads_workers_encodings_and_request_arguments() -> None:
    index = new_index()
    try:
        for payload in (b"\xc1", b"\x92", PAYLOAD[:-1], PAYLOAD + b"\x00"):
            status, err = apply(index, b"w", payload)
            assert status == lib.SC_STATUS_ERROR
            kind, message = take_error(err)
            assert kind == lib.SC_ERR_KIND_INVALID_ARGUMENT and message.startswith("payload: "), message
        status, err = apply(index, b"\xff", PAYLOAD)
        assert take_error(err) == (lib.SC_ERR_KIND_INVALID_ARGUMENT, "worker: not valid UTF-8 (at byte 0)")
        status, err = apply(index, b"w", PAYLOAD, encoding=7)
        assert take_error(err) == (lib.SC_ERR_KIND_INVALID_ARGUMENT, "encoding: unknown 7")
        status_out = ffi.new("sc_kv_status *")
        assert lib.sc_kv_index_status(index, status_out, err) == lib.SC_STATUS_OK
        assert (status_out.events, status_out.workers) == (0, 0)  # nothing was applied
        empty, _ = arg(b"")
        mm, keep = arg(b"[{}]")
        out = ffi.new("sc_bytes *")
        ids = {"ptr": ffi.NULL, "len": 0}
        assert lib.sc_kv_index_score(index, ids, empty, empty, empty, mm, out, err) == lib.SC_STATUS_ERROR
        kind, message = take_error(err)
        assert kind == lib.SC_ERR_KIND_INVALID_ARGUMENT and message.startswith("mm_items: ")
        bad, keep2 = arg(b"\xc3")
        assert lib.sc_kv_index_score(index, ids, bad, empty, empty, empty, out, err) == lib.SC_STATUS_ERROR
        assert take_error(err)[1] == "lora_name: not valid UTF-8 (at byte 0)"
        assert lib.sc_kv_index_score(index, ids, empty, bad, empty, empty, out, err) == lib.SC_STATUS_ERROR
        assert take_error(err)[1] == "lora_path: not valid UTF-8 (at byte 0)"
    finally:
        lib.sc_kv_index_free(index)


def apply_columns(index, header: bytes, hashes: list[int], tokens: list[int]) -> tuple[int, object]:  # noqa: ANN001
    err = ffi.new("sc_error **")
    name, _keep = arg(b"w")
    hash_values, token_values = ffi.new("uint64_t[]", hashes), ffi.new("uint32_t[]", tokens)
    status = lib.sc_kv_index_apply_columns(index, name, header, len(header), hash_values, len(hashes),
                                           token_values, len(tokens), err)
    return status, err


def test_columns_apply_and_refuse_counts_that_do_not_add_up() -> None:
    """sc_kv_index_apply_columns: each event names how many hashes and token ids it takes from
    the side arrays, in order; a count past the arrays, values no event names, a count that is
    not an int, or an unaligned array refuses the whole batch, naming what."""
    def header(*events: dict) -> bytes:
        return msgspec.msgpack.encode({"events": [dict(e, parent_block_hash=None, block_size=4, medium="GPU")
                                                  for e in events]})

    good = header({"block_hashes": 2, "token_ids": 8}, {"block_hashes": 1, "token_ids": 4})
    index = new_index()
    try:
        for bad, hashes, tokens, says in (
            (header({"block_hashes": 3, "token_ids": 8}), [1, 2], [0] * 8, "hashes"),
            (header({"block_hashes": 2, "token_ids": 9}), [1, 2], [0] * 8, "token_ids"),
            (header({"block_hashes": 1, "token_ids": 8}), [1, 2], [0] * 8, "hashes: 2 values given, the events name 1"),
            (header({"block_hashes": 2, "token_ids": 4}), [1, 2], [0] * 8, "tokens: 8 values given, the events name 4"),
            (header({"block_hashes": [1, 2], "token_ids": 8}), [1, 2], [0] * 8, "expected `int`"),
            (header({"block_hashes": -1, "token_ids": 8}), [1, 2], [0] * 8, "-1 values"),
        ):
            status, err = apply_columns(index, bad, hashes, tokens)
            kind, message = take_error(err)
            assert kind == lib.SC_ERR_KIND_INVALID_ARGUMENT and message.startswith("payload: "), message
            assert says in message, message
        err = ffi.new("sc_error **")
        name, _keep = arg(b"w")
        raw = ffi.new("uint8_t[]", 8 * 4)
        unaligned = ffi.cast("uint64_t *", int(ffi.cast("uintptr_t", raw)) + 1)
        status = lib.sc_kv_index_apply_columns(index, name, good, len(good), unaligned, 3, ffi.NULL, 0, err)
        assert status == lib.SC_STATUS_ERROR
        assert take_error(err) == (lib.SC_ERR_KIND_INVALID_ARGUMENT, "hashes: pointer not aligned to 8 bytes")
        status_out = ffi.new("sc_kv_status *")
        assert lib.sc_kv_index_status(index, status_out, ffi.NULL) == lib.SC_STATUS_OK
        assert (status_out.events, status_out.workers) == (0, 0)  # nothing was applied
        assert apply_columns(index, good, [1, 2, 3], list(range(12)))[0] == lib.SC_STATUS_OK
        assert lib.sc_kv_index_status(index, status_out, ffi.NULL) == lib.SC_STATUS_OK
        assert (status_out.events, status_out.blocks) == (2, 3)
    finally:
        lib.sc_kv_index_free(index)


def test_snapshot_refusals_have_their_kinds() -> None:
    index, other = new_index(), new_index(b'{"block_size": 8}')
    try:
        assert apply(index, b"w", PAYLOAD)[0] == lib.SC_STATUS_OK
        out = ffi.new("sc_bytes *")
        err = ffi.new("sc_error **")
        assert lib.sc_kv_index_snapshot(index, out, err) == lib.SC_STATUS_OK
        data = ffi.unpack(ffi.cast("char *", out.ptr), out.len)
        lib.sc_bytes_free(out)
        for garbage in (b"nonsense", data[:-1], data[:20] + bytes([data[20] ^ 1]) + data[21:]):
            buf = ffi.from_buffer("uint8_t[]", garbage)
            assert lib.sc_kv_index_restore(index, buf, len(garbage), err) == lib.SC_STATUS_ERROR
            kind, message = take_error(err)
            assert kind == lib.SC_ERR_KIND_INVALID_ARGUMENT and message.startswith("snapshot: ")
        buf = ffi.from_buffer("uint8_t[]", data)
        assert lib.sc_kv_index_restore(other, buf, len(data), err) == lib.SC_STATUS_ERROR
        kind, message = take_error(err)
        assert kind == lib.SC_ERR_KIND_FAILED_PRECONDITION and "block_size" in message
    finally:
        lib.sc_kv_index_free(index)
        lib.sc_kv_index_free(other)


def _cycles(n: int) -> None:
    """Creates, fills, scores, snapshots and frees an index `n` times."""
    empty, _ = arg(b"")
    ids = ffi.new("uint32_t[]", list(range(8)))
    for i in range(n):
        index = new_index()
        apply(index, b"w%d" % (i % 3), PAYLOAD)
        status, err = apply(index, b"w", b"\xc1")
        take_error(err)
        out = ffi.new("sc_bytes *")
        err = ffi.new("sc_error **")
        assert lib.sc_kv_index_score(index, {"ptr": ids, "len": 8}, empty, empty, empty, empty, out, err) == lib.SC_STATUS_OK
        lib.sc_bytes_free(out)
        assert lib.sc_kv_index_snapshot(index, out, err) == lib.SC_STATUS_OK
        lib.sc_bytes_free(out)
        lib.sc_kv_index_free(index)


def test_no_leak_over_many_create_use_free_cycles() -> None:
    code = (
        "import gc, sys; sys.path.insert(0, %r)\n"
        "from tests.native import test_kv_index_abi as t, test_c_abi as c\n"
        "t._cycles(500); gc.collect(); before = c._rss_kib()\n"
        "t._cycles(5000); gc.collect(); print(c._rss_kib() - before)\n"
    ) % str(REPO)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=REPO)
    grown = int(out.stdout.strip().splitlines()[-1])
    # An index with its 64 key shards is tens of KiB: leaking one per cycle would be 100+ MiB.
    assert grown < 4096, f"RSS grew by {grown} KiB over 5000 cycles"
    gc.collect()
