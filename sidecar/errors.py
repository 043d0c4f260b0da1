"""Every error the server can return, and the one table that maps them to gRPC status codes.

Code anywhere in the server raises a `SidecarError` subclass with a message that names the field;
the RPC wrapper (`sidecar.rpc`) turns it into the status below. Native errors arrive here through
`sidecar.native._errors`, reference-backend errors are raised as these classes directly, so both
backends fail the same way.
"""

from __future__ import annotations

import grpc


class SidecarError(Exception):
    """Base class: an error with a gRPC status code and a message for the caller."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidArgument(SidecarError):
    """Malformed request; the message names the field."""

    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(SidecarError):
    """Unknown model, template name or file."""

    code = grpc.StatusCode.NOT_FOUND


class ResourceExhausted(SidecarError):
    """A limit was hit: message size, queue depth, open streams, held-back bytes, template fuel."""

    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class FailedPrecondition(SidecarError):
    """The model cannot do this (no chat template, request templates not allowed, ...)."""

    code = grpc.StatusCode.FAILED_PRECONDITION


class DeadlineExceeded(SidecarError):
    """The caller's deadline passed before the work finished."""

    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Unimplemented(SidecarError):
    """The RPC or option exists in the contract but is not built yet."""

    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(SidecarError):
    """A bug (including a panic caught in the native core)."""

    code = grpc.StatusCode.INTERNAL


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status and message for any exception; unexpected ones are INTERNAL."""
    if isinstance(exc, SidecarError):
        return exc.code, exc.message
    return grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}"
