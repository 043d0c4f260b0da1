"""`NativeTokenizer`: the `sc_tokenizer` handle."""

from __future__ import annotations

import json
from array import array
from pathlib import Path
from typing import Sequence

from sidecar.backend import AddedToken, EncodeOptions, Encoding
from sidecar.native._calls import call_bytes, call_out, cancel_arg, ids_array, str_arg, timeout_us, unpack_bytes
from sidecar.native._ffi import ffi, lib
from sidecar.native._handle import Handle


class NativeTokenizer:
    """A tokenizer loaded in the native core; immutable and safe to share between threads."""

    def __init__(self, handle) -> None:  # noqa: ANN001 - cffi cdata
        self._handle = Handle(handle, lib.sc_tokenizer_free, "tokenizer")
        info = self._info()
        self.encoder: str = info["encoder"]
        self.fast_rejection: str | None = info["fast_rejection"]
        self.format: str = info["format"]
        self.vocab_size: int = info["vocab_size"]
        self.output_size: int = info["output_size"]
        self.num_special_tokens_to_add: int = info["num_special_tokens_to_add"]
        self.added_tokens = [AddedToken(t["id"], t["content"], t["special"]) for t in info["added_tokens"]]

    @classmethod
    def from_dir(cls, model_dir: Path | str, output_size: int = 0) -> NativeTokenizer:
        """Loads `tokenizer.json` (or a tiktoken file) from a model directory, for a model with
        `output_size` output rows (0 = unknown)."""
        path = str(model_dir).encode()
        options = json.dumps({"output_size": output_size}).encode() if output_size else b""
        return cls(call_out("sc_tokenizer *", lib.sc_tokenizer_new, str_arg(path), str_arg(options)))

    @property
    def handle(self) -> Handle:
        """The leased `sc_tokenizer *` (for other native calls that take a tokenizer)."""
        return self._handle

    def close(self) -> None:
        """Frees the native tokenizer now, or when the last call in flight returns."""
        self._handle.close()

    def _info(self) -> dict:
        with self._handle as tok:
            return json.loads(call_bytes(lib.sc_tokenizer_info, tok))

    def encode_batch(self, texts: Sequence[str], opts: EncodeOptions) -> list[Encoding]:
        enc = self._encode(texts, opts)
        try:
            return _unpack_encodings(enc)
        finally:
            lib.sc_encodings_free(enc)

    def encode_ids(self, text: str, opts: EncodeOptions) -> array:
        """The ids of one text as an `array('I')`: one copy of the native buffer. (A list of
        millions of ids is built in one call holding the GIL, which the event loop then waits for:
        a whole-prompt Score of a 40 MB text held it for 0.4 s.)"""
        enc = self._encode([text], opts)
        try:
            ids = array("I")
            if enc.ids_len:
                ids.frombytes(ffi.buffer(enc.ids, enc.ids_len * ids.itemsize))
            return ids
        finally:
            lib.sc_encodings_free(enc)

    def _encode(self, texts: Sequence[str], opts: EncodeOptions):  # noqa: ANN202 - cffi `sc_encodings *`, to free
        count = len(texts)
        raw = [t.encode("utf-8", "surrogatepass") for t in texts]
        keep = [ffi.from_buffer("uint8_t[]", b) for b in raw]
        items = ffi.new("sc_str[]", count)
        for i, (b, buf) in enumerate(zip(raw, keep)):
            items[i].ptr = buf
            items[i].len = len(b)
        options = ffi.new(
            "sc_encode_options *",
            {
                "add_special_tokens": opts.add_special_tokens,
                "return_offsets": opts.return_offsets,
                "return_tokens": opts.return_tokens,
                "truncate_left": opts.truncate_left,
                "max_length": opts.max_length,
                "timeout_us": timeout_us(opts.timeout_s),
                "cancel": cancel_arg(),
                "max_word_chars": opts.max_word_chars,
            },
        )
        with self._handle as tok:
            return call_out("sc_encodings *", lib.sc_tokenizer_encode_batch, tok, items, count, options)

    def decode_batch(
        self, seqs: Sequence[Sequence[int]], skip_special_tokens: bool, timeout_s: float | None = None
    ) -> list[str]:
        count = len(seqs)
        arrays = [ids_array(s, f"sequences[{i}]") for i, s in enumerate(seqs)]
        keep = [ffi.from_buffer("uint32_t[]", a) if len(a) else ffi.NULL for a in arrays]
        items = ffi.new("sc_ids[]", count)
        for i, (arr, buf) in enumerate(zip(arrays, keep)):
            items[i].ptr = buf
            items[i].len = len(arr)
        with self._handle as tok:
            texts = call_out(
                "sc_texts *", lib.sc_tokenizer_decode_batch, tok, items, count, skip_special_tokens,
                timeout_us(timeout_s), cancel_arg(),
            )
        try:
            data = unpack_bytes(texts.data, texts.data_len)
            lens = ffi.unpack(texts.lens, texts.count) if texts.count else []
            result, pos = [], 0
            for n in lens:
                result.append(data[pos : pos + n].decode("utf-8"))
                pos += n
            return result
        finally:
            lib.sc_texts_free(texts)


def _unpack_encodings(enc) -> list[Encoding]:  # noqa: ANN001 - cffi cdata
    count = enc.count
    if count == 0:
        return []
    ids = ffi.unpack(enc.ids, enc.ids_len) if enc.ids_len else []
    lens = ffi.unpack(enc.lens, count)
    truncated = ffi.unpack(enc.truncated, count)
    offsets = ffi.unpack(enc.offsets, enc.offsets_len) if enc.offsets_len else None
    token_lens = ffi.unpack(enc.token_lens, enc.token_lens_len) if enc.token_lens_len else None
    token_bytes = unpack_bytes(enc.tokens, enc.tokens_len)
    result: list[Encoding] = []
    pos = 0
    byte_pos = 0
    for i in range(count):
        n = lens[i]
        e = Encoding(ids=ids[pos : pos + n] if count > 1 else ids, truncated=bool(truncated[i]))
        if offsets is not None:
            e.offsets = offsets[2 * pos : 2 * (pos + n)]
        if token_lens is not None:
            tokens = []
            for k in token_lens[pos : pos + n]:
                tokens.append(token_bytes[byte_pos : byte_pos + k].decode("utf-8"))
                byte_pos += k
            e.tokens = tokens
        result.append(e)
        pos += n
    return result
