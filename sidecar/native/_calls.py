"""How the wrappers call the library: borrowed arguments in, owned results out, and every failed
call raised as its `SidecarError` (the conventions of the C ABI, see native/src/ffi/mod.rs)."""

from __future__ import annotations

from array import array
from typing import Any, Callable, Sequence

from sidecar.cancel import current
from sidecar.errors import InvalidArgument, SidecarError
from sidecar.native._errors import raise_for_status
from sidecar.native._ffi import ffi, lib


def str_arg(data: bytes) -> dict:
    """An `sc_str` borrowing `data`; the caller keeps `data` alive for the call."""
    return {"ptr": ffi.from_buffer("uint8_t[]", data) if data else ffi.NULL, "len": len(data)}


def ids_arg(ids: array) -> dict:
    """An `sc_ids` borrowing a `uint32_t` array; the caller keeps it alive for the call."""
    return {"ptr": ffi.from_buffer("uint32_t[]", ids) if ids else ffi.NULL, "len": len(ids)}


#: Ids converted per slice: converting makes a Python int per id with the GIL held, so millions
#: of ids in one C call would stall the event loop; between slices the GIL can switch.
_IDS_SLICE = 1 << 14


def ids_array(ids: Sequence[int], field: str) -> array:
    """Token ids as a C `uint32_t` array; an id outside 0..2^32-1 is InvalidArgument naming `field`."""
    try:
        if len(ids) <= _IDS_SLICE:
            return array("I", ids)
        out = array("I")
        for start in range(0, len(ids), _IDS_SLICE):
            out.extend(ids[start : start + _IDS_SLICE])
        return out
    except (OverflowError, TypeError) as e:
        raise InvalidArgument(f"{field}: token ids must be integers in [0, 2^32): {e}") from None


def uint32_ids(ids: Sequence[int], field: str = "token_ids") -> array | memoryview:
    """Token ids as a uint32 buffer without a copy where they already are one (an `array("I")`,
    a rendered prompt's read-only view in native memory); a list goes through `array.fromlist`,
    about twice as fast as `array("I", list)` on a 32k-token prompt."""
    if isinstance(ids, array) and ids.typecode == "I":
        return ids
    if isinstance(ids, memoryview) and ids.format == "I" and ids.c_contiguous:
        return ids
    if isinstance(ids, list):
        arr = array("I")
        try:
            arr.fromlist(ids)
            return arr
        except (OverflowError, TypeError):
            pass
    return ids_array(ids, field)  # raises InvalidArgument naming the field


def owned_u32_view(ids: Any) -> memoryview:
    """The `uint32_t` values of a filled `sc_bytes *` as a read-only view in native memory (no
    copy); the buffer is freed with the last view of it."""
    if not ids.len:
        lib.sc_bytes_free(ids)
        return memoryview(b"").cast("I")
    ptr, n = ids.ptr, ids.len
    keep = ffi.gc(ptr, lambda p, n=n: lib.sc_bytes_free(ffi.new("sc_bytes *", {"ptr": p, "len": n})))
    return memoryview(ffi.buffer(keep, n)).toreadonly().cast("I")


def take_bytes(out: Any) -> bytes:
    """A copy of a filled `sc_bytes *`, which is freed."""
    try:
        return unpack_bytes(out.ptr, out.len)
    finally:
        lib.sc_bytes_free(out)


def split_refusal(status: int, err: Any, answerable: bool) -> SidecarError | None:
    """The outcome of a native split (`sc_parse_open_split`, `sc_kv_score_split`): None when it
    succeeded; its error when `answerable` (the rest of the message was read, so the caller
    answers the refusal as its request's); raised otherwise."""
    if not status:
        return None
    try:
        raise_for_status(status, err)
    except SidecarError as refused:
        if not answerable:
            raise
        return refused


def cancel_arg() -> Any:
    """The `const uint32_t *` cancel flag of the offloaded call running on this thread (see
    `sidecar.cancel`), or NULL; the token stays bound, so alive, for the call."""
    token = current()
    return ffi.NULL if token is None else ffi.from_buffer("uint32_t[]", token.flag)


def timeout_us(timeout_s: float | None) -> int:
    # 0 means "no deadline" to the native side, so a deadline already passed becomes 1 us.
    if timeout_s is None:
        return 0
    return max(1, int(timeout_s * 1e6))


def unpack_bytes(ptr: Any, n: int) -> bytes:
    """`n` bytes at a `uint8_t *` of a result (which is NULL when empty)."""
    return ffi.unpack(ffi.cast("char *", ptr), n) if n else b""


def call_out(ctype: str, fn: Callable[..., int], *args: Any) -> Any:
    """Calls `fn(*args, out, err)` with a fresh `ctype *` out-slot and returns what it wrote there
    (a handle or a result the caller frees), raising the error of a failed call."""
    out = ffi.new(ctype + " *")
    err = ffi.new("sc_error **")
    raise_for_status(fn(*args, out, err), err)
    return out[0]


def call_bytes(fn: Callable[..., int], *args: Any) -> bytes:
    """Calls `fn(*args, out, err)` that fills an `sc_bytes`; returns a copy and frees the buffer."""
    out = ffi.new("sc_bytes *")
    err = ffi.new("sc_error **")
    raise_for_status(fn(*args, out, err), err)
    return take_bytes(out)
