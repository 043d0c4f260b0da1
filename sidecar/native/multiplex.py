"""`NativeMultiplexer`: the `sc_multiplexer` handle, the table of models and settings every
Multiplex stream runs requests with.

One call per client message: the raw `MultiplexRequest` goes in, the small requests run in that
call (GIL released), and raw `MultiplexResponse` messages come out with the large requests listed
for the worker pool (`run_one` each). No per-request Python work on the way.
"""

from __future__ import annotations

import json
import threading
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, NamedTuple, Sequence

from sidecar.errors import SidecarError
from sidecar.native._calls import cancel_arg, str_arg
from sidecar.native._errors import raise_for_status
from sidecar.native._ffi import ffi, lib
from sidecar.native._handle import Handle
from sidecar.native.renderer import NativeRenderer
from sidecar.native.tokenizer import NativeTokenizer

#: `sc_multiplex_tally.kind` -> the request kind's name (0: the call carried no request).
KINDS = ("none", "tokenize", "detokenize", "render")

_NO_PENDING = ffi.NULL


@dataclass(frozen=True)
class MultiplexModel:
    """A hosted model as the table holds it."""

    name: str
    fingerprint: str
    tokenizer: NativeTokenizer
    renderer: NativeRenderer


class Deferred(NamedTuple):
    """A large request of a message: run it with `run_one(message[start:start + length])`."""

    id: int
    #: Index into KINDS.
    kind: int
    timeout_us: int
    cost: int
    start: int
    length: int


class Batch(NamedTuple):
    """What one call produced."""

    #: `MultiplexResponse` messages, each within the server's message limit.
    messages: Sequence[bytes]
    deferred: Sequence[Deferred]
    cancel: Sequence[int]
    #: (kind index into KINDS, gRPC code, count) of the results in `messages`.
    tally: Sequence[tuple[int, int, int]]
    #: Render multi-turn cache: (hit segments, miss segments, hit bytes, miss bytes).
    cache: tuple[int, int, int, int]


#: `kind` of `NativeMultiplexer.unary`.
UNARY_TOKENIZE, UNARY_DETOKENIZE, UNARY_RENDER = 1, 2, 3


class Unary(NamedTuple):
    """What one unary call produced."""

    #: The response message's wire bytes (empty when it failed or was deferred).
    response: bytes
    #: Non-zero: not run, its cost is above the inline bound (run it again on a worker).
    deferred_cost: int
    #: The request's model ("" when the body did not decode).
    model: str
    #: The body did not decode as the RPC's request message (`error` says so).
    malformed: bool
    #: The call's status when it failed, else None.
    error: SidecarError | None
    #: Render multi-turn cache: (hit segments, miss segments, hit bytes, miss bytes).
    cache: tuple[int, int, int, int]


class NativeMultiplexer:
    """The models and settings of the server's Multiplex streams; immutable and thread-safe."""

    def __init__(self, models: Sequence[MultiplexModel], settings: dict[str, Any]) -> None:
        entries = ffi.new("sc_multiplex_model[]", len(models))
        keep = []
        with ExitStack() as leases:
            for entry, model in zip(entries, models):
                for field, text in (("name", model.name), ("fingerprint", model.fingerprint)):
                    raw = text.encode()
                    keep.append(raw)
                    setattr(entry, field, str_arg(raw))
                entry.tokenizer = leases.enter_context(model.tokenizer.handle)
                entry.renderer = leases.enter_context(model.renderer.handle)
            handle = ffi.new("sc_multiplexer **")
            err = ffi.new("sc_error **")
            raise_for_status(
                lib.sc_multiplexer_new(entries, len(models), str_arg(json.dumps(settings).encode()), handle, err), err
            )
        self._handle = Handle(handle[0], lib.sc_multiplexer_free, "multiplexer")
        self._holding = threading.Lock()
        self._holders = 0
        self._closing = False

    def run(self, message: bytes, elapsed_us: int, pending: Sequence[int] = (), refuse_code: int = 0,
            refuse_message: str = "") -> Batch:
        """Runs the small requests of a raw `MultiplexRequest` (see the module docs); malformed
        framing raises InvalidArgument."""
        out = ffi.new("sc_multiplex_batch **")
        err = ffi.new("sc_error **")
        ids = ffi.new("uint64_t[]", list(pending)) if pending else _NO_PENDING
        refusal = str_arg(refuse_message.encode()) if refuse_code else str_arg(b"")
        with self._handle as mux:
            # On a worker (a large message), the call's cancel flag: set when the client has gone.
            status = lib.sc_multiplexer_run(mux, ffi.from_buffer(message), len(message), elapsed_us, ids,
                                            len(pending), refuse_code, refusal, cancel_arg(), out, err)
        raise_for_status(status, err)
        return _unpack(out[0])

    def run_one(self, call: bytes, elapsed_us: int) -> Batch:
        """Runs one deferred `MultiplexCall`; the batch holds its one result. On a worker thread of
        the Offloader it stops (CANCELLED) once the thread's cancel token is set: the stream sets it
        when the client cancels this request."""
        out = ffi.new("sc_multiplex_batch **")
        err = ffi.new("sc_error **")
        with self._handle as mux:
            status = lib.sc_multiplexer_run_one(mux, ffi.from_buffer(call), len(call), elapsed_us, cancel_arg(),
                                                out, err)
        raise_for_status(status, err)
        return _unpack(out[0])

    def unary(self, kind: int, body: bytes, timeout_us: int, inline_bytes: int = 0) -> Unary:
        """Runs one unary request of `kind` (UNARY_*) from its raw body, GIL released, as the
        unary RPC runs it; with `inline_bytes` a request costing more is deferred, not run. The
        call's cancel flag is the offloaded call's (see `sidecar.cancel`)."""
        out = ffi.new("sc_unary_outcome *")
        err = ffi.new("sc_error **")
        with self._handle as mux:
            status = lib.sc_multiplexer_unary(mux, kind, ffi.from_buffer(body), len(body), timeout_us, cancel_arg(),
                                              inline_bytes, out, err)
        error = None
        try:
            raise_for_status(status, err)
        except SidecarError as e:
            error = e
        try:
            response = ffi.buffer(out.response.ptr, out.response.len)[:] if out.response.len else b""
            model = ffi.buffer(out.model.ptr, out.model.len)[:].decode() if out.model.len else ""
            cache = (out.cache_hit_segments, out.cache_miss_segments, out.cache_hit_bytes, out.cache_miss_bytes)
            return Unary(response, out.deferred_cost, model, out.malformed, error, cache)
        finally:
            lib.sc_bytes_free(ffi.addressof(out, "response"))
            lib.sc_bytes_free(ffi.addressof(out, "model"))

    def hold(self) -> None:
        """Defers a `close` until the matching `release`: a call holds the table from the moment
        it fetches it on the event loop, since a reload closes the table it replaces while calls
        that fetched it may still wait for a worker (and a call starting on a closed table fails)."""
        with self._holding:
            self._holders += 1

    def release(self) -> None:
        with self._holding:
            self._holders -= 1
            close = self._closing and not self._holders
        if close:
            self._handle.close()

    def close(self) -> None:
        """Frees the table once nothing holds it and the last call in flight has returned."""
        with self._holding:
            self._closing = True
            close = not self._holders
        if close:
            self._handle.close()


def _unpack(batch) -> Batch:  # noqa: ANN001 - cffi cdata
    try:
        data = ffi.buffer(batch.out, batch.out_len)[:] if batch.out_len else b""
        if batch.chunks <= 1:
            messages: Sequence[bytes] = (data,) if data else ()
        else:
            ends = ffi.unpack(batch.chunk_ends, batch.chunks)
            messages = [data[start:end] for start, end in zip([0, *ends], ends)]
        deferred = [Deferred(d.id, d.kind, d.timeout_us, d.cost, d.start, d.len)
                    for d in batch.deferred[0:batch.deferred_len]] if batch.deferred_len else ()
        cancel = ffi.unpack(batch.cancel, batch.cancel_len) if batch.cancel_len else ()
        tally = [(t.kind, t.code, t.count) for t in batch.tally[0:batch.tally_len]]
        cache = (batch.cache_hit_segments, batch.cache_miss_segments, batch.cache_hit_bytes, batch.cache_miss_bytes)
        return Batch(messages, deferred, cancel, tally, cache)
    finally:
        lib.sc_multiplex_batch_free(batch)
