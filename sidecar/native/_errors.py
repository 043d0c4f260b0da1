"""Turns a native `sc_error` into the matching `SidecarError`, and checks call statuses."""

from __future__ import annotations

from sidecar import errors
from sidecar.native._ffi import ffi, lib

_KIND_TO_ERROR: dict[int, type[errors.SidecarError]] = {
    lib.SC_ERR_KIND_INVALID_ARGUMENT: errors.InvalidArgument,
    lib.SC_ERR_KIND_NOT_FOUND: errors.NotFound,
    lib.SC_ERR_KIND_RESOURCE_EXHAUSTED: errors.ResourceExhausted,
    lib.SC_ERR_KIND_FAILED_PRECONDITION: errors.FailedPrecondition,
    lib.SC_ERR_KIND_DEADLINE_EXCEEDED: errors.DeadlineExceeded,
    lib.SC_ERR_KIND_INTERNAL: errors.Internal,
    lib.SC_ERR_KIND_PANIC: errors.Internal,
}


def _error_class(kind: int) -> type[errors.SidecarError]:
    return _KIND_TO_ERROR.get(kind, errors.Internal)


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
