"""The cffi loader: header-to-cdef conversion and error translation."""

from __future__ import annotations

import grpc
import pytest

from sidecar import errors
from sidecar.native._ffi import TESTING_EXPORTS, _cdef_from_header
from sidecar.native._errors import KIND_TO_ERROR, native_status_table, raise_for_status
from sidecar.native import ffi, lib
from tests.conftest import REPO, require_native_testing_exports


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


def test_the_native_status_table_covers_every_kind_and_python_follows_it() -> None:
    table = native_status_table()
    declared = {getattr(lib, name) for name in dir(lib) if name.startswith("SC_ERR_KIND_")}
    assert {row["kind"] for row in table} == declared and len(table) == len(declared)
    codes = {code.value[0] for code in grpc.StatusCode}
    for row in table:
        assert row["grpc_code"] in codes and row["grpc_code"] != 0, row
        assert KIND_TO_ERROR[row["kind"]].code.value[0] == row["grpc_code"], row


def test_the_users_header_declares_test_exports_only_under_sidecar_testing() -> None:
    depth, guarded = 0, False
    seen = set()
    for line in (REPO / "native" / "include" / "sidecar_native.h").read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#if"):
            depth += 1
            guarded = stripped == "#if defined(SIDECAR_TESTING)"
        elif stripped.startswith("#endif"):
            depth -= 1
            guarded = False
        for name in TESTING_EXPORTS:
            if f" {name}(" in line:
                assert guarded, f"{name} declared outside #if defined(SIDECAR_TESTING)"
                seen.add(name)
    assert seen == set(TESTING_EXPORTS)


def test_raise_for_status_frees_and_raises() -> None:
    require_native_testing_exports()  # sc_test_panic
    err = ffi.new("sc_error **")
    status = lib.sc_test_panic(err)
    with pytest.raises(errors.Internal, match="deliberate panic"):
        raise_for_status(status, err)
    raise_for_status(lib.SC_STATUS_OK, ffi.new("sc_error **"))


def test_status_of_unexpected_exception_is_internal() -> None:
    assert errors.status_of(KeyError("x")) == (grpc.StatusCode.INTERNAL, "internal error: KeyError")
    assert errors.status_of(errors.NotFound("m")) == (grpc.StatusCode.NOT_FOUND, "m")
