"""tiktoken rank files as an equivalent `tokenizer.json` (written independently of the Rust
converter, so the differential tests compare two implementations, and both are checked against
the gpt-oss `tokenizer.json`).

The construction: byte-level BPE whose vocabulary is the ranks (bytes mapped to GPT-2's printable
characters) and whose merges are every split of every token into two tokens, ordered by the rank of
the merged token; with `ignore_merges` a whole piece in the vocabulary is taken as is, as tiktoken
does.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from sidecar.errors import FailedPrecondition

O200K_PATTERN = "|".join(
    [
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n/]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    ]
)
CL100K_PATTERN = "|".join(
    [
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)",
        r"[^\r\n\p{L}\p{N}]?\p{L}+",
        r"\p{N}{1,3}",
        r" ?[^\s\p{L}\p{N}]+[\r\n]*",
        r"\s*[\r\n]+",
        r"\s+(?!\S)",
        r"\s+",
    ]
)


def byte_to_char() -> dict[int, str]:
    """GPT-2's reversible byte-to-character table."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def pattern_for(file_name: str) -> str:
    if "o200k" in file_name:
        return O200K_PATTERN
    if "cl100k" in file_name:
        return CL100K_PATTERN
    raise FailedPrecondition(
        f"tiktoken file {file_name}: unknown encoding; supported are o200k_* and cl100k_* "
        "(the file name decides the split regex). Ship a tokenizer.json instead"
    )


def tokenizer_json(ranks_text: str, file_name: str, config: dict[str, Any]) -> str:
    """Converts a tiktoken rank file (plus `tokenizer_config.json`'s special tokens)."""
    pattern = pattern_for(file_name)
    ranks: dict[bytes, int] = {}
    for lineno, line in enumerate(ranks_text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            token, rank = line.split()
            ranks[base64.b64decode(token, validate=True)] = int(rank)
        except ValueError:
            raise FailedPrecondition(f"tiktoken line {lineno}: expected `base64 rank`") from None
    table = byte_to_char()

    def text(b: bytes) -> str:
        return "".join(table[x] for x in b)

    merges = []
    for token, rank in ranks.items():
        for i in range(1, len(token)):
            left, right = token[:i], token[i:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], left, right))
    merges.sort(key=lambda m: m[:3])

    added = []
    for id_text, entry in (config.get("added_tokens_decoder") or {}).items():
        added.append(
            {
                "id": int(id_text),
                "content": entry["content"],
                "single_word": entry.get("single_word", False),
                "lstrip": entry.get("lstrip", False),
                "rstrip": entry.get("rstrip", False),
                "normalized": entry.get("normalized", False),
                "special": entry.get("special", True),
            }
        )
    added.sort(key=lambda t: t["id"])
    return json.dumps(
        {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added,
            "normalizer": None,
            "pre_tokenizer": {
                "type": "Sequence",
                "pretokenizers": [
                    {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
                    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
                ],
            },
            "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {
                "type": "BPE",
                "dropout": None,
                "unk_token": None,
                "continuing_subword_prefix": None,
                "end_of_word_suffix": None,
                "fuse_unk": False,
                "byte_fallback": False,
                "ignore_merges": True,
                "vocab": {text(t): r for t, r in ranks.items()},
                "merges": [[text(m[3]), text(m[4])] for m in merges],
            },
        },
        ensure_ascii=False,
    )
