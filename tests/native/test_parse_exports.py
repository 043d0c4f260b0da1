"""The parse exports' C-ABI contract: NULL handles and bad arguments are errors, not crashes;
frees accept NULL; creating and freeing streams in a loop does not grow memory."""

from __future__ import annotations

import json
import resource

import pytest

from tests.conftest import require_shared_models
from tests.parse.harness import encode, parse_model, step_message
from sidecar.backend import ParseLimits
from sidecar.errors import InvalidArgument
from sidecar.native import NativeParseMux, ffi, lib
from sidecar.native._errors import raise_for_status


def _str(b: bytes):  # noqa: ANN202
    return {"ptr": ffi.from_buffer("uint8_t[]", b) if b else ffi.NULL, "len": len(b)}


def test_null_handles_and_bad_arguments() -> None:
    err = ffi.new("sc_error **")
    out = ffi.new("sc_bytes *")
    kind = ffi.new("int32_t *")
    with pytest.raises(InvalidArgument, match="mux"):
        raise_for_status(lib.sc_parse_mux_handle(ffi.NULL, ffi.NULL, 0, 0, ffi.NULL, out, kind, ffi.NULL, err), err)
    with pytest.raises(InvalidArgument, match="tokenizer"):
        raise_for_status(lib.sc_parse_model_new(ffi.NULL, _str(b""), ffi.new("sc_parse_model **"), err), err)
    with pytest.raises(InvalidArgument, match="limits_json"):
        raise_for_status(lib.sc_parse_mux_new(_str(b"{nope"), ffi.new("sc_parse_mux **"), err), err)
    lib.sc_parse_mux_free(ffi.NULL)
    lib.sc_parse_model_free(ffi.NULL)
    assert lib.sc_parse_mux_len(ffi.NULL) == 0


@pytest.mark.models
def test_bad_open_arguments_name_the_field() -> None:
    require_shared_models()
    mux = NativeParseMux(ParseLimits())
    model = parse_model("qwen3")
    err = ffi.new("sc_error **")
    bad_json = _str(b"{not json")
    with mux._handle as mux_ptr, model.handle as model_ptr:
        status = lib.sc_parse_mux_open(mux_ptr, model_ptr, _str(b"a"), _str(b""), bad_json, {"ptr": ffi.NULL, "len": 0}, err)
        with pytest.raises(InvalidArgument, match="config_json"):
            raise_for_status(status, err)
        with pytest.raises(InvalidArgument, match="request_id"):
            raise_for_status(
                lib.sc_parse_mux_open(mux_ptr, model_ptr, {"ptr": ffi.NULL, "len": 3}, _str(b""), _str(b"{}"),
                                      {"ptr": ffi.NULL, "len": 0}, err), err)
    mux.close()
    mux.close()  # idempotent


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


@pytest.mark.models
def test_streams_do_not_leak() -> None:
    require_shared_models()
    model = parse_model("qwen3")
    ids = encode("qwen3", '<think>x</think>Hi <tool_call>{"name": "f", "arguments": {"a": "b"}}</tool_call>')
    config = {"tool_parser": "hermes", "reasoning_parser": "qwen3", "stop": ["zz"], "trace": False}

    def cycle(rounds: int) -> None:
        for _ in range(rounds):
            mux = NativeParseMux(ParseLimits())
            for r in range(4):
                mux.open(model, f"r{r}", "fp", config, ids[:3])
            mux.handle(step_message("r0", ids, True))
            mux.handle(step_message("r1", ids[:5], False))
            mux.close()  # r1..r3 still open: freed with the mux

    cycle(300)
    before = _rss_mb()
    cycle(3000)
    assert _rss_mb() - before < 16, json.dumps({"before": before, "after": _rss_mb()})
