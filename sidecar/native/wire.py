"""Protobuf encoders of the native core for the transport layer (`sc_render_response_encode`).

The Render servicer builds its `RenderResponse` from a rendered prompt's id buffer with these, so
no Python int is made per token id: the native core writes the packed fields and protobuf's C core
parses them.
"""

from __future__ import annotations

from array import array
from typing import Sequence

from sidecar.native._calls import call_bytes, ids_arg, ids_array, str_arg
from sidecar.native._ffi import lib


def _u32(values: Sequence[int], field: str) -> array | memoryview:
    """`values` as a uint32 buffer: a renderer's id view or an `array("I")` as is, else converted."""
    if isinstance(values, memoryview) and values.format == "I" and values.c_contiguous:
        return values
    if isinstance(values, array) and values.typecode == "I":
        return values
    return ids_array(values, field)


def render_response_bytes(text: str | None, ids: Sequence[int], offsets: Sequence[int]) -> bytes:
    """`RenderResponse` fields 1-3 (text, token_ids, offsets) in protobuf wire format."""
    raw = (text or "").encode("utf-8", "surrogatepass")
    return call_bytes(
        lib.sc_render_response_encode, str_arg(raw), text is not None, ids_arg(_u32(ids, "token_ids")),
        ids_arg(_u32(offsets, "offsets")),
    )
