"""The word-length bound of the reference backend: the same rule and message as the native core's
(`native/src/tokenizer/words.rs`), so `--max-word-chars` refuses the same texts on both backends.

Character classes come from Python's `unicodedata` where the native core uses Rust's `char`
properties (Alphabetic, Numeric, White_Space); they agree on every ASCII character and on the
scripts pre-tokenizers split, and can differ only on characters whose Unicode properties the two
versions of the tables assign differently, in runs past the limit.
"""

from __future__ import annotations

import unicodedata

from sidecar.errors import ResourceExhausted

_ASCII_SPACE = frozenset(" \t\n\r\x0b\x0c")
#: Combining-mark blocks the native core counts as letters (they extend the letter before them).
_MARK_BLOCKS = ((0x0300, 0x036F), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF), (0x20D0, 0x20FF), (0xFE20, 0xFE2F))
_NAMES = {"L": "letters", "D": "digits", "S": "whitespace characters", "O": "symbols"}


def _class_of(c: str) -> str:
    if c.isascii():
        if c.isalpha():
            return "L"
        if c.isdigit():
            return "D"
        return "S" if c in _ASCII_SPACE else "O"
    if c.isspace():
        return "S"
    category = unicodedata.category(c)
    if category[0] == "N":
        return "D"
    code = ord(c)
    # Rust's Alphabetic: the letters, plus the marks that write vowels (Mn/Mc) in most scripts.
    if category[0] == "L" or category in ("Mn", "Mc") or any(lo <= code <= hi for lo, hi in _MARK_BLOCKS):
        return "L"
    return "O"


class _Classes(dict):
    """Code point -> its class letter, filled on first sight: `str.translate` then maps a whole
    text in C, calling back into Python once per distinct character."""

    def __missing__(self, code: int) -> str:
        self[code] = value = _class_of(chr(code))
        return value


_CLASSES = _Classes()


def check_word_lengths(text: str, limit: int, field: str = "") -> None:
    """Raises RESOURCE_EXHAUSTED when `text` (the request's `field`, when given) has a run of more
    than `limit` characters of one class, naming where it starts (in characters) and the flag."""
    if limit <= 0 or len(text) <= limit:
        return
    classes = text.translate(_CLASSES)
    # The first overlong run is the one whose window of limit + 1 starts first, at the run's start.
    found = [(at, cls) for cls in _NAMES if (at := classes.find(cls * (limit + 1))) >= 0]
    if found:
        start, cls = min(found)
        raise ResourceExhausted(
            f"{field + ': ' if field else ''}a run of more than {limit} {_NAMES[cls]} starting at character {start} is longer than the "
            f"longest word the server encodes ({limit} characters, --max-word-chars)")
