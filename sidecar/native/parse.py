"""`NativeParseModel` and `NativeParseMux`: the `sc_parse_model` and `sc_parse_mux` handles.

A mux takes raw `ParseStreamRequest` bytes and answers with raw `ParseStreamResponse` bytes, so a
decode step costs one native call and no per-request Python work.
"""

from __future__ import annotations

import json
from array import array
from typing import Any, Sequence

from sidecar.backend import Deferred, ParseLimits
from sidecar.errors import SidecarError, Unimplemented
from sidecar.native._calls import (
    call_bytes, call_out, cancel_arg, ids_arg, owned_u32_view, split_refusal, str_arg, take_bytes, uint32_ids,
)
from sidecar.native._errors import raise_for_status
from sidecar.native._ffi import ffi, has_testing_exports, lib
from sidecar.native._handle import Handle
from sidecar.native.tokenizer import NativeTokenizer


class NativeParseModel:
    """A model's parse data (decode table, added tokens); immutable, shared by its requests."""

    def __init__(self, tokenizer: NativeTokenizer, force_generic: bool = False,
                 response_template: dict | None = None) -> None:
        options = json.dumps({"force_generic": force_generic, "response_template": response_template}).encode()
        with tokenizer.handle as tok:
            handle = call_out("sc_parse_model *", lib.sc_parse_model_new, tok, str_arg(options))
        self._handle = Handle(handle, lib.sc_parse_model_free, "parse model")
        with self._handle as model:
            info = json.loads(call_bytes(lib.sc_parse_model_info, model))
        self.decoder: str = info["decoder"]
        self.vocab_size: int = info["vocab_size"]
        self.tool_parsers: list[str] = info["tool_parsers"]
        self.reasoning_parsers: list[str] = info["reasoning_parsers"]
        template = info["response_template"]
        #: The fields of the model's usable `response_template` (none when absent or refused).
        self.response_template_fields: frozenset[str] = frozenset(template["fields"] if template["state"] == "ready" else ())

    @property
    def handle(self) -> Handle:
        """The leased `sc_parse_model *` (requests opened with it keep their own reference)."""
        return self._handle

    def close(self) -> None:
        """Frees the parse data now, or when the last call in flight returns."""
        self._handle.close()

    def bench(self, config: dict[str, Any], prompt_ids: Sequence[int], ids: Sequence[int], per_step: int,
              iterations: int) -> float:
        """Mean native nanoseconds per token of a whole request (no FFI, no protobuf); needs the test
        build of the library (`make native-testing`)."""
        if not has_testing_exports():
            raise Unimplemented("sc_parse_bench: the loaded library is the user build; build `make native-testing`")
        cfg = json.dumps(config).encode()
        prompt = array("I", prompt_ids)
        toks = array("I", ids)
        with self._handle as model:
            return call_out(
                "double", lib.sc_parse_bench, model, str_arg(cfg), ids_arg(prompt), ids_arg(toks), per_step,
                iterations,
            )


#: `sc_parse_mux_handle`'s budget for a step that may cost anything.
_ANY_COST = (1 << 64) - 1

class NativeParseMux:
    """The open requests of one ParseStream.

    The stream hands it one message at a time, inline or on a worker thread, and may close it while
    a worker is still inside a large step (the client cancelled): the lease on the handle defers the
    free until that step returns, and the native mux refuses a second concurrent call.
    """

    def __init__(self, limits: ParseLimits) -> None:
        text = json.dumps({"max_requests": limits.max_requests, "remember_finished": limits.remember_finished,
                           "max_step_ids": limits.max_step_ids, "max_delta_bytes": limits.max_delta_bytes,
                           "max_stream_held_bytes": limits.max_stream_held_bytes}).encode()
        self._handle = Handle(call_out("sc_parse_mux *", lib.sc_parse_mux_new, str_arg(text)), lib.sc_parse_mux_free,
                              "parse stream")

    def __len__(self) -> int:
        if self._handle.closed:
            return 0
        with self._handle as mux:
            return lib.sc_parse_mux_len(mux)

    def open(self, model: NativeParseModel, request_id: str, fingerprint: str, config: dict[str, Any],
             prompt_ids: Sequence[int]) -> None:
        """Opens a request; raises InvalidArgument / ResourceExhausted naming the field."""
        prompt = uint32_ids(prompt_ids, "open.prompt_token_ids")
        err = ffi.new("sc_error **")
        with self._handle as mux, model.handle as parse_model:
            status = lib.sc_parse_mux_open(
                mux, parse_model, str_arg(request_id.encode()), str_arg(fingerprint.encode()),
                str_arg(json.dumps(config).encode()), ids_arg(prompt), err,
            )
        raise_for_status(status, err)

    def handle(self, message: bytes, within: int | None = None) -> bytes | Deferred | None:
        """Answers a raw step or cancel message; None for an open (the caller opens it); a step that
        would read more than `within` bytes is not handled but `Deferred` with its cost."""
        # Fresh out-slots per call: a worker still finishing a cancelled step must not share them.
        out, kind, cost = ffi.new("sc_bytes *"), ffi.new("int32_t *"), ffi.new("uint64_t *")
        err = ffi.new("sc_error **")
        budget = _ANY_COST if within is None else within
        with self._handle as mux:
            status = lib.sc_parse_mux_handle(mux, ffi.from_buffer(message), len(message), budget, cancel_arg(), out,
                                             kind, cost, err)
        raise_for_status(status, err)
        try:
            if kind[0] == lib.SC_PARSE_OPEN:
                return None
            if kind[0] == lib.SC_PARSE_DEFERRED:
                return Deferred(cost[0])
            return ffi.buffer(out.ptr, out.len)[:] if out.len else b""
        finally:
            lib.sc_bytes_free(out)

    def trace(self, request_id: str) -> dict | None:
        """The attribution trace of a request opened with `trace`."""
        with self._handle as mux:
            raw = call_bytes(lib.sc_parse_mux_trace, mux, str_arg(request_id.encode()))
        return json.loads(raw) if raw else None

    def close(self) -> None:
        """Frees every open request now, or when the step in flight returns; idempotent."""
        self._handle.close()


def split_open(message: bytes) -> tuple[bytes, memoryview, SidecarError | None]:
    """A raw `ParseStreamRequest` holding an `open`, without its prompt ids, and those ids as a
    read-only uint32 view in native memory: millions of prompt ids are decoded natively (GIL
    released), never as Python ints. A message that does not decode raises InvalidArgument; an id
    above 2^32-1 comes back as the third item (InvalidArgument naming it), the message without its
    ids still given so that the refusal can name its request."""
    rest, ids, err = ffi.new("sc_bytes *"), ffi.new("sc_bytes *"), ffi.new("sc_error **")
    status = lib.sc_parse_open_split(ffi.from_buffer(message), len(message), rest, ids, err)
    without_ids = take_bytes(rest)
    refused = split_refusal(status, err, answerable=bool(without_ids))
    if refused is not None:
        return without_ids, memoryview(b"").cast("I"), refused
    return without_ids, owned_u32_view(ids), None
