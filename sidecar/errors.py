"""Every error the server can return, and the one table that maps them to gRPC status codes.

Code anywhere in the server raises a `SidecarError` subclass with a message that names the field;
its status is the class's `code` below. Native errors arrive here through `sidecar.native._errors`,
reference-backend errors are raised as these classes directly, so both backends fail the same way;
the router adapter library raises its own exception types (no gRPC there), mapped in
`_LIBRARY_STATUS`. Every path reads the table through `status_of`: the unary and stream wrappers
(`sidecar.rpc`) and the per-request errors of ParseStream (`status_proto_fields`). No other module
maps errors to codes.
"""

from __future__ import annotations

import grpc

from router_adapter.errors import InvalidSpec, InvalidTokens


#: The longest message a status carries, in UTF-8 bytes. gRPC sends it percent-encoded in the
#: trailers (at most 3 bytes each: 12 KiB), and trailers past 16 KiB end the call RESOURCE_EXHAUSTED
#: "Stream removed" instead of the error. Values from the client are cut where a message quotes
#: them (`router_adapter.errors.quoted`); this bounds what nobody cut (what a chat template raises,
#: a request template's own error). The native core cuts its messages alike (`error::bounded`).
MAX_MESSAGE_BYTES = 4096
#: What is kept of a message cut to `MAX_MESSAGE_BYTES`, leaving room for the note saying so.
_CUT_MESSAGE_BYTES = 4000


def bounded(message: str) -> str:
    """`message` within `MAX_MESSAGE_BYTES`: cut at a character boundary, saying how long it was."""
    if len(message) <= MAX_MESSAGE_BYTES // 4:  # no character takes more than 4 bytes
        return message
    data = message.encode("utf-8", "surrogatepass")
    if len(data) <= MAX_MESSAGE_BYTES:
        return message
    cut = _CUT_MESSAGE_BYTES
    while data[cut] & 0xC0 == 0x80:  # a continuation byte: not a character boundary
        cut -= 1
    return data[:cut].decode("utf-8", "surrogatepass") + f"... (message cut: {len(data)} bytes)"


class SidecarError(Exception):
    """Base class: an error with a gRPC status code and a message for the caller (cut to
    `MAX_MESSAGE_BYTES`)."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(self, message: str) -> None:
        message = bounded(message)
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


class Cancelled(SidecarError):
    """The call was withdrawn (its client went away) and its work stopped early; nobody reads it."""

    code = grpc.StatusCode.CANCELLED


class Unimplemented(SidecarError):
    """The RPC or option exists in the contract but is not built yet."""

    code = grpc.StatusCode.UNIMPLEMENTED


class Unavailable(SidecarError):
    """The server cannot take the call now (it is draining for shutdown); retrying elsewhere is right."""

    code = grpc.StatusCode.UNAVAILABLE


class Internal(SidecarError):
    """A bug (including a panic caught in the native core)."""

    code = grpc.StatusCode.INTERNAL


def error_class_for_code(code: int) -> type[SidecarError]:
    """The error class whose status has the numeric gRPC `code` (for a table exported by the native
    core as code numbers); an unknown number is Internal."""
    for cls in (InvalidArgument, NotFound, ResourceExhausted, FailedPrecondition, DeadlineExceeded, Cancelled,
                Unimplemented, Unavailable):
        if cls.code.value[0] == code:
            return cls
    return Internal


def error_for_code(code: int, message: str) -> SidecarError:
    """`error_class_for_code(code)(message)`."""
    return error_class_for_code(code)(message)


#: The router adapter's exceptions: they mean the caller asked for something no engine does.
_LIBRARY_STATUS: tuple[tuple[type[Exception], grpc.StatusCode], ...] = (
    (InvalidSpec, grpc.StatusCode.INVALID_ARGUMENT),
    (InvalidTokens, grpc.StatusCode.INVALID_ARGUMENT),
)


def is_expected(exc: BaseException) -> bool:
    """Whether `exc` is an error the server raises on purpose (a status for the caller), as opposed
    to a bug (logged with its traceback and answered INTERNAL)."""
    return isinstance(exc, SidecarError) or any(isinstance(exc, cls) for cls, _ in _LIBRARY_STATUS)


def status_of(exc: BaseException) -> tuple[grpc.StatusCode, str]:
    """The gRPC status and message for any exception; unexpected ones are INTERNAL."""
    if isinstance(exc, SidecarError):
        return exc.code, exc.message
    for cls, code in _LIBRARY_STATUS:
        if isinstance(exc, cls):
            return code, bounded(str(exc))
    return grpc.StatusCode.INTERNAL, f"internal error: {type(exc).__name__}"


#: How a call the client abandoned is recorded (metrics and log line; nobody receives it).
CANCELLED: tuple[grpc.StatusCode, str] = (grpc.StatusCode.CANCELLED, "cancelled by the client")
#: How a call still running when the server stops is recorded: gRPC cancels it, and its client gets
#: UNAVAILABLE ("Cancelling all calls"). The message says why the server stopped: the drain ran
#: out, a second SIGTERM/SIGINT cut it short, or it stopped otherwise (an error while serving).
CUT_BY_STOP: tuple[grpc.StatusCode, str] = (
    grpc.StatusCode.UNAVAILABLE, "cut off: the server stopped with the call still running")
CUT_AT_DRAIN_END: tuple[grpc.StatusCode, str] = (
    grpc.StatusCode.UNAVAILABLE, "cut off: the server stopped at the end of --drain-seconds with the call still running")
CUT_BY_SECOND_SIGNAL: tuple[grpc.StatusCode, str] = (
    grpc.StatusCode.UNAVAILABLE,
    "cut off: a second stop signal (SIGTERM/SIGINT) ended the drain early with the call still running")
#: How a stream whose call went away under it is recorded (its client saw CANCELLED, or gRPC's own
#: status for a refused message; see `sidecar.rpc.CALL_GONE_WAIT_S`).
STREAM_GONE: tuple[grpc.StatusCode, str] = (
    grpc.StatusCode.CANCELLED,
    "the call ended under the stream: the client cancelled it, its connection dropped, or gRPC refused a "
    "message (larger than --max-message-mb)")


def client_hint(rpc: str, code: grpc.StatusCode) -> str | None:
    """What the terminal client adds to a server's status for `rpc`, when the status alone leaves
    the user guessing: a server without `--enable-admin` answers ReloadModels only with gRPC's
    "Method not found!"."""
    if rpc == "ReloadModels" and code == grpc.StatusCode.UNIMPLEMENTED:
        return "the server has no Admin service: start it with --enable-admin (or send it SIGHUP to reload)"
    return None


def code_number(code: grpc.StatusCode) -> int:
    """The numeric value of a gRPC status code (for a trace span's `rpc.grpc.status_code`)."""
    return code.value[0]


def code_name(number: int) -> str:
    """The name of numeric gRPC status code `number` (as metrics label it); the number itself when
    gRPC has no such code."""
    for code in grpc.StatusCode:
        if code.value[0] == number:
            return code.name
    return str(number)


def status_proto_fields(exc: BaseException) -> tuple[int, str]:
    """`status_of` as the numeric code and message of a `sidecar.v1.Status` (a per-request error
    inside a ParseStream response)."""
    code, message = status_of(exc)
    return code.value[0], message
