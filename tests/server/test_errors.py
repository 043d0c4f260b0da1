"""The one status table (`sidecar/errors.py`): every error class and every library error maps to
its status there, and no other module of the server maps codes by hand."""

from __future__ import annotations

import ast

import grpc
import pytest

from router_adapter.errors import InvalidSpec, RouterAdapterError
from router_adapter.spec import HashSpec
from sidecar import errors
from tests.conftest import REPO

EXPECTED = {
    errors.InvalidArgument: grpc.StatusCode.INVALID_ARGUMENT,
    errors.NotFound: grpc.StatusCode.NOT_FOUND,
    errors.ResourceExhausted: grpc.StatusCode.RESOURCE_EXHAUSTED,
    errors.FailedPrecondition: grpc.StatusCode.FAILED_PRECONDITION,
    errors.DeadlineExceeded: grpc.StatusCode.DEADLINE_EXCEEDED,
    errors.Cancelled: grpc.StatusCode.CANCELLED,
    errors.Unimplemented: grpc.StatusCode.UNIMPLEMENTED,
    errors.Unavailable: grpc.StatusCode.UNAVAILABLE,
    errors.Internal: grpc.StatusCode.INTERNAL,
}


def test_every_error_class_has_its_status() -> None:
    classes = {c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.SidecarError)}
    assert classes - {errors.SidecarError} == set(EXPECTED)
    for cls, code in EXPECTED.items():
        error = cls("field: what is wrong")
        assert errors.status_of(error) == (code, "field: what is wrong")
        assert errors.status_proto_fields(error) == (code.value[0], "field: what is wrong")
        assert errors.is_expected(error)


def test_error_for_code_inverts_the_table() -> None:
    for cls, code in EXPECTED.items():
        error = errors.error_for_code(code.value[0], "m")
        assert type(error) is cls and error.message == "m"
    assert type(errors.error_for_code(999, "m")) is errors.Internal


def test_library_errors_map_without_the_library_knowing_grpc() -> None:
    with pytest.raises(InvalidSpec) as info:
        HashSpec("vllm_md5", 16).validate()
    assert isinstance(info.value, (RouterAdapterError, ValueError))
    code, message = errors.status_of(info.value)
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("block_hashing.algorithm")
    assert errors.is_expected(info.value)


def test_anything_else_is_internal_without_details() -> None:
    bug = KeyError("secret internals")
    assert errors.status_of(bug) == (grpc.StatusCode.INTERNAL, "internal error: KeyError")
    assert not errors.is_expected(bug)


def _hand_mappings(path) -> list[str]:  # noqa: ANN001
    """`StatusCode.X` members and `.value[0]` code numbers used in a module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == "StatusCode":
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: StatusCode.{node.attr}")
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "value":
            found.append(f"{path.relative_to(REPO)}:{node.lineno}: .value[...]")
    return found


def test_no_other_module_maps_codes() -> None:
    sources = [p for top in ("sidecar", "router_adapter") for p in (REPO / top).rglob("*.py")
               if "v1" not in p.relative_to(REPO).parts and p != REPO / "sidecar" / "errors.py"]
    assert len(sources) > 20
    found = [hit for p in sources for hit in _hand_mappings(p)]
    assert not found, "status codes mapped outside sidecar/errors.py:\n" + "\n".join(found)


@pytest.mark.parametrize(("message", "expected"), [
    ("short", "short"),
    ("x" * 4096, "x" * 4096),
    ("x" * 4097, "x" * 4000 + "... (message cut: 4097 bytes)"),
    # Cut at a character boundary: 3999 bytes of "x", then a 2-byte character across byte 4000.
    ("x" * 3999 + "é" * 100, "x" * 3999 + "... (message cut: 4199 bytes)"),
])
def test_messages_are_cut_to_the_bound_that_keeps_them_deliverable(message: str, expected: str) -> None:
    """A status message travels in gRPC's trailers; past 16 KiB (percent-encoded) the client got
    RESOURCE_EXHAUSTED "Stream removed" instead. Every error's message is cut to 4 KiB (the native
    core's `error::tests` cut the same strings)."""
    assert errors.bounded(message) == expected
    assert errors.bounded(expected) == expected
    error = errors.InvalidArgument(message)
    assert error.message == expected and str(error) == expected
    assert errors.status_of(error) == (grpc.StatusCode.INVALID_ARGUMENT, expected)


def test_a_library_errors_message_is_cut_too() -> None:
    code, message = errors.status_of(InvalidSpec("block_hashing.x: " + "y" * 10_000))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert message.startswith("block_hashing.x: yyy") and message.endswith("... (message cut: 10017 bytes)")
