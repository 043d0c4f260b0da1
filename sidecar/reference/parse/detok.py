"""Reference incremental decoder: Hugging Face `decode` re-run over a window of ids.

Text is emitted once `decode(context + pending)` extends `decode(context)` and is final: it does
not end in U+FFFD (an incomplete character), and, for SentencePiece byte fallback, the last id is
not a `<0xNN>` piece (the `ByteFallback` decoder turns a whole run of pieces into U+FFFDs when any
part of it is invalid, so a run is only final when it ends).

Attribution: a pending token's first byte lands after the part of the text before it that
survives into the final text (U+FFFDs standing for an unfinished character do not survive); a
token that changes nothing and lands on no unfinished character produced no bytes.
"""

from __future__ import annotations

import tokenizers

#: Prompt ids used as the decoding context (same number as the native core).
PRIME_IDS = 32
#: Ids of context kept after each emission.
CONTEXT_IDS = 4
_FFFD = "\ufffd"


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class RefDetokenizer:
    """One request's decoder. `anchors` collects `(seq, offset, zero_width)` per output token."""

    def __init__(
        self, tok: tokenizers.Tokenizer, skip_special: bool, byte_pieces: frozenset[int], specials: frozenset[int]
    ) -> None:
        self._tok = tok
        self._skip = skip_special
        self._byte_pieces = byte_pieces
        self._skipped = specials if skip_special else frozenset()
        self._ctx: list[int] = []
        self._prefix = ""
        self._pending: list[tuple[int, int]] = []  # (seq, id)

    def _decode(self, ids: list[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=self._skip)

    def prime(self, ids: list[int]) -> None:
        self._ctx = list(ids[-PRIME_IDS:])
        self._prefix = self._decode(self._ctx)

    def held_bytes(self) -> int:
        return 4 * len(self._pending)

    def push(self, token_id: int, seq: int, base: int, anchors: list) -> str:
        """Feeds one id; returns the text that became final (starting at stream offset `base`)."""
        self._pending.append((seq, token_id))
        ids = self._ctx + [i for _, i in self._pending]
        text = self._decode(ids)
        if (
            len(text) > len(self._prefix)
            and text.startswith(self._prefix)
            and not text.endswith(_FFFD)
            and not self._in_byte_run()
        ):
            return self._emit(text, base, anchors)
        return ""

    def _in_byte_run(self) -> bool:
        # Skipped tokens are removed before the decoder runs, so they do not end a run.
        for _, token_id in reversed(self._pending):
            if token_id not in self._skipped:
                return token_id in self._byte_pieces
        return False

    def flush(self, base: int, anchors: list, marker: int | None = None, marker_visible: bool = False) -> str:
        """Emits everything pending (end of text or a marker token next)."""
        out = ""
        clean = True
        if self._pending:
            ids = self._ctx + [i for _, i in self._pending]
            text = self._decode(ids)
            clean = not text.endswith(_FFFD)
            out = self._emit(text, base, anchors, keep_context=clean)
        if marker is not None and marker_visible:
            self._ctx = self._ctx + [marker]
            self._prefix = self._decode(self._ctx)
        return out

    def _emit(self, text: str, base: int, anchors: list, keep_context: bool = True) -> str:
        start = _common_prefix(self._prefix, text)
        delta = text[start:]
        prefix_bytes = len(self._prefix[:start].encode())
        ids = list(self._ctx)
        previous = self._decode(ids)
        for seq, token_id in self._pending:
            ids.append(token_id)
            current = self._decode(ids)
            stable = _common_prefix(previous, text)
            offset = base + len(text[:stable].encode()) - prefix_bytes
            visible = current != previous or stable < len(previous)
            anchors.append((seq, max(offset, base), not visible))
            previous = current
        new_ctx = self._ctx + [i for _, i in self._pending]
        self._pending = []
        if keep_context:
            self._ctx = new_ctx[-CONTEXT_IDS:]
            self._prefix = self._decode(self._ctx)
        return delta
