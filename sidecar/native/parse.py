"""`NativeParseModel` and `NativeParseMux`: the `sc_parse_model` and `sc_parse_mux` handles.

A mux takes raw `ParseStreamRequest` bytes and answers with raw `ParseStreamResponse` bytes, so a
decode step costs one native call and no per-request Python work.
"""

from __future__ import annotations

import json
from array import array
from typing import Any, Sequence

from sidecar.backend import ParseLimits
from sidecar.errors import InvalidArgument
from sidecar.native._calls import call_bytes, call_out, ids_arg, str_arg
from sidecar.native._errors import raise_for_status
from sidecar.native._ffi import ffi, lib
from sidecar.native.tokenizer import NativeTokenizer


class NativeParseModel:
    """A model's parse data (decode table, added tokens); immutable, shared by its requests."""

    def __init__(self, tokenizer: NativeTokenizer, force_generic: bool = False) -> None:
        options = json.dumps({"force_generic": force_generic}).encode()
        handle = call_out("sc_parse_model *", lib.sc_parse_model_new, tokenizer.handle, str_arg(options))
        self._handle = ffi.gc(handle, lib.sc_parse_model_free)
        info = json.loads(call_bytes(lib.sc_parse_model_info, self._handle))
        self.decoder: str = info["decoder"]
        self.vocab_size: int = info["vocab_size"]
        self.tool_parsers: list[str] = info["tool_parsers"]
        self.reasoning_parsers: list[str] = info["reasoning_parsers"]

    @property
    def handle(self):  # noqa: ANN201 - cffi cdata
        return self._handle

    def bench(self, config: dict[str, Any], prompt_ids: Sequence[int], ids: Sequence[int], per_step: int,
              iterations: int) -> float:
        """Mean native nanoseconds per token of a whole request (no FFI, no protobuf)."""
        cfg = json.dumps(config).encode()
        prompt = array("I", prompt_ids)
        toks = array("I", ids)
        return call_out(
            "double", lib.sc_parse_bench, self._handle, str_arg(cfg), ids_arg(prompt), ids_arg(toks), per_step,
            iterations,
        )


class NativeParseMux:
    """The open requests of one ParseStream; used from one thread (the event loop)."""

    def __init__(self, limits: ParseLimits) -> None:
        text = json.dumps({"max_requests": limits.max_requests, "remember_finished": limits.remember_finished}).encode()
        self._handle = ffi.gc(call_out("sc_parse_mux *", lib.sc_parse_mux_new, str_arg(text)), lib.sc_parse_mux_free)
        self._out = ffi.new("sc_bytes *")
        self._kind = ffi.new("int32_t *")
        self._err = ffi.new("sc_error **")

    def __len__(self) -> int:
        return lib.sc_parse_mux_len(self._handle) if self._handle is not None else 0

    def open(self, model: NativeParseModel, request_id: str, fingerprint: str, config: dict[str, Any],
             prompt_ids: Sequence[int]) -> None:
        """Opens a request; raises InvalidArgument / ResourceExhausted naming the field."""
        try:
            prompt = array("I", prompt_ids)
        except (OverflowError, TypeError) as e:
            raise InvalidArgument(f"open.prompt_token_ids: ids must be integers in [0, 2^32): {e}") from None
        err = ffi.new("sc_error **")
        status = lib.sc_parse_mux_open(
            self._handle, model.handle, str_arg(request_id.encode()), str_arg(fingerprint.encode()),
            str_arg(json.dumps(config).encode()), ids_arg(prompt), err,
        )
        raise_for_status(status, err)

    def handle(self, message: bytes) -> bytes | None:
        """Answers a raw step or cancel message; None for an open (the caller opens it)."""
        out, kind, err = self._out, self._kind, self._err
        status = lib.sc_parse_mux_handle(self._handle, ffi.from_buffer(message), len(message), out, kind, err)
        raise_for_status(status, err)
        try:
            if kind[0] == lib.SC_PARSE_OPEN:
                return None
            return ffi.buffer(out.ptr, out.len)[:] if out.len else b""
        finally:
            lib.sc_bytes_free(out)

    def trace(self, request_id: str) -> dict | None:
        """The attribution trace of a request opened with `trace`."""
        raw = call_bytes(lib.sc_parse_mux_trace, self._handle, str_arg(request_id.encode()))
        return json.loads(raw) if raw else None

    def close(self) -> None:
        """Frees every open request now."""
        handle, self._handle = self._handle, None
        if handle is not None:
            ffi.gc(handle, None)  # detach the finalizer; freed right here
            lib.sc_parse_mux_free(handle)
