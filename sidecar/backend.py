"""The backend interface: what the servicers need from a tokenizer (and, later, a renderer and a
parser), implemented twice: `sidecar.native` (the Rust core, the default) and `sidecar.reference`
(pure Python on the PyPI `tokenizers` package). The differential tests hold the two to identical
outputs and identical errors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, Sequence


@dataclass(frozen=True, slots=True)
class EncodeOptions:
    """How to encode a batch (see TokenizeRequest in the proto)."""

    add_special_tokens: bool = True
    return_offsets: bool = False
    return_tokens: bool = False
    max_length: int = 0
    truncate_left: bool = False
    timeout_s: float | None = None


@dataclass(slots=True)
class Encoding:
    """One text's tokens."""

    ids: list[int]
    offsets: list[int] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    truncated: bool = False


@dataclass(frozen=True, slots=True)
class AddedToken:
    """An added vocabulary entry."""

    id: int
    content: str
    special: bool


class Tokenizer(Protocol):
    """A loaded tokenizer; thread-safe, immutable."""

    #: "fastokens", "tokenizers" (native) or "tokenizers-python" (reference).
    encoder: str
    #: "tokenizer.json" or "tiktoken".
    format: str
    vocab_size: int
    added_tokens: list[AddedToken]

    def encode_batch(self, texts: Sequence[str], opts: EncodeOptions) -> list[Encoding]:
        """Encodes texts; raises InvalidArgument / DeadlineExceeded naming the text."""
        ...

    def decode_batch(
        self, seqs: Sequence[Sequence[int]], skip_special_tokens: bool, timeout_s: float | None = None
    ) -> list[str]:
        """Decodes id sequences; an unknown id is InvalidArgument naming sequence and position."""
        ...


class Backend(Protocol):
    """Loads models' components."""

    name: str

    def load_tokenizer(self, model_dir: Path) -> Tokenizer:
        """Loads the tokenizer of a model directory."""
        ...


def get_backend(name: str) -> Backend:
    """The backend called `name` ("native" or "reference")."""
    if name == "native":
        from sidecar.native import NativeBackend

        return NativeBackend()
    if name == "reference":
        from sidecar.reference import ReferenceBackend

        return ReferenceBackend()
    raise ValueError(f"unknown backend {name!r}; expected 'native' or 'reference'")
