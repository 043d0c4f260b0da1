"""Turns a native `sc_error` into the matching `SidecarError`, and checks call statuses.

Which error a native kind becomes is not decided here: the library exports its table of kinds and
their gRPC status codes (`sc_error_kinds`, built from `ErrorKind::grpc_code` in native/src/error.rs,
the same table the parse multiplexer writes into `RequestDelta.error`), and each kind is raised as
the `SidecarError` class of its status code.
"""

from __future__ import annotations

import json

from sidecar import errors
from sidecar.native._ffi import ffi, lib


def native_status_table() -> list[dict]:
    """The library's table: `[{"kind": SC_ERR_KIND_*, "name": ..., "grpc_code": n}, ...]`."""
    out = ffi.new("sc_bytes *")
    err = ffi.new("sc_error **")
    if lib.sc_error_kinds(out, err) != lib.SC_STATUS_OK:
        lib.sc_error_free(err[0])
        raise errors.Internal("sc_error_kinds failed")
    try:
        return json.loads(ffi.buffer(out.ptr, out.len)[:])
    finally:
        lib.sc_bytes_free(out)


def _kind_to_error() -> dict[int, type[errors.SidecarError]]:
    return {row["kind"]: errors.error_class_for_code(row["grpc_code"]) for row in native_status_table()}


#: Native error kind -> the error raised for it (every kind of the library's table).
KIND_TO_ERROR: dict[int, type[errors.SidecarError]] = _kind_to_error()


def _error_class(kind: int) -> type[errors.SidecarError]:
    return KIND_TO_ERROR.get(kind, errors.Internal)


def raise_for_status(status: int, err_box) -> None:  # noqa: ANN001 - cffi cdata
    """Raises the error a failed call left in `err_box` (an `sc_error **`), freeing it."""
    if status == lib.SC_STATUS_OK:
        return
    err = err_box[0]
    if err == ffi.NULL:
        raise errors.Internal(f"native call failed with status {status} and no error record")
    try:
        kind = err.kind
        message = ffi.unpack(ffi.cast("char *", err.message), err.message_len).decode("utf-8", "replace")
    finally:
        lib.sc_error_free(err)
    raise _error_class(kind)(message)
