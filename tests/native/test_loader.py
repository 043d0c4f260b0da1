"""The cffi loader: header-to-cdef conversion and error translation."""

from __future__ import annotations

import grpc
import pytest

from sidecar import errors
from sidecar.native._ffi import _cdef_from_header
from sidecar.native._errors import raise_for_status
from sidecar.native import ffi, lib


def test_cdef_keeps_declarations_and_integer_defines_only() -> None:
    header = "\n".join([
        "#ifndef X_H", "#define X_H", "#include <stdint.h>", "#define SC_A 3", "#define SC_NEG -1",
        '#ifdef __cplusplus', 'extern "C" {', "#endif", "int32_t f(void);", "#ifdef __cplusplus",
        '}  // extern "C"', "#endif", "#endif",
    ])
    assert _cdef_from_header(header).split("\n") == ["#define SC_A 3", "#define SC_NEG -1", "int32_t f(void);"]


def test_every_error_kind_maps_to_one_status() -> None:
    expected = {
        lib.SC_ERR_KIND_INVALID_ARGUMENT: grpc.StatusCode.INVALID_ARGUMENT,
        lib.SC_ERR_KIND_NOT_FOUND: grpc.StatusCode.NOT_FOUND,
        lib.SC_ERR_KIND_RESOURCE_EXHAUSTED: grpc.StatusCode.RESOURCE_EXHAUSTED,
        lib.SC_ERR_KIND_FAILED_PRECONDITION: grpc.StatusCode.FAILED_PRECONDITION,
        lib.SC_ERR_KIND_DEADLINE_EXCEEDED: grpc.StatusCode.DEADLINE_EXCEEDED,
        lib.SC_ERR_KIND_INTERNAL: grpc.StatusCode.INTERNAL,
        lib.SC_ERR_KIND_PANIC: grpc.StatusCode.INTERNAL,
    }
    from sidecar.native._errors import _error_class

    for kind, code in expected.items():
        assert _error_class(kind).code == code
    assert _error_class(999).code == grpc.StatusCode.INTERNAL


def test_raise_for_status_frees_and_raises() -> None:
    err = ffi.new("sc_error **")
    status = lib.sc_test_panic(err)
    with pytest.raises(errors.Internal, match="deliberate panic"):
        raise_for_status(status, err)
    raise_for_status(lib.SC_STATUS_OK, ffi.new("sc_error **"))


def test_status_of_unexpected_exception_is_internal() -> None:
    assert errors.status_of(KeyError("x")) == (grpc.StatusCode.INTERNAL, "internal error: KeyError")
    assert errors.status_of(errors.NotFound("m")) == (grpc.StatusCode.NOT_FOUND, "m")
