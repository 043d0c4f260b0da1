"""`ReferenceTokenizer`: the PyPI `tokenizers` package, used the way transformers uses it."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Sequence

import tokenizers

from sidecar.backend import AddedToken, EncodeOptions, Encoding
from sidecar.errors import DeadlineExceeded, FailedPrecondition, InvalidArgument, NotFound
from sidecar.reference import tiktoken
from sidecar.reference.words import check_word_lengths


def _load_json_text(model_dir: Path) -> tuple[str, str]:
    if not model_dir.is_dir():
        raise NotFound(f"model directory {model_dir} does not exist")
    path = model_dir / "tokenizer.json"
    if path.is_file():
        return path.read_text(encoding="utf-8"), "tokenizer.json"
    candidates = [model_dir / "tiktoken.model"] if (model_dir / "tiktoken.model").is_file() else sorted(
        model_dir.glob("*.tiktoken")
    )
    if not candidates:
        raise NotFound(f"{model_dir} has neither tokenizer.json nor a tiktoken file (*.tiktoken, tiktoken.model)")
    if len(candidates) > 1:
        raise FailedPrecondition(f"{model_dir} has several *.tiktoken files; keep one")
    config_path = model_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    ranks = candidates[0].read_text(encoding="utf-8")
    return tiktoken.tokenizer_json(ranks, candidates[0].name, config), "tiktoken"


class ReferenceTokenizer:
    """Hugging Face `tokenizers` from PyPI; thread-safe for encode/decode."""

    encoder = "tokenizers-python"

    def __init__(self, json_text: str, fmt: str, output_size: int = 0) -> None:
        try:
            self._tok = tokenizers.Tokenizer.from_str(json_text)
        except Exception as e:  # noqa: BLE001 - the package raises bare Exception
            raise FailedPrecondition(f"tokenizer.json could not be loaded: {e}") from None
        # transformers never applies truncation or padding saved in tokenizer.json.
        self._tok.no_truncation()
        self._tok.no_padding()
        self.format = fmt
        vocab = self._tok.get_vocab(with_added_tokens=True)
        self.vocab_size = max(vocab.values()) + 1 if vocab else 0
        self._known = set(vocab.values())
        self.output_size = output_size
        self.added_tokens = sorted(
            (AddedToken(i, t.content, t.special) for i, t in self._tok.get_added_tokens_decoder().items()),
            key=lambda t: t.id,
        )
        self.num_special_tokens_to_add = self._tok.num_special_tokens_to_add(is_pair=False)
        self._truncation_lock = threading.Lock()
        self._truncating: tokenizers.Tokenizer | None = None

    @classmethod
    def from_dir(cls, model_dir: Path | str, output_size: int = 0) -> ReferenceTokenizer:
        text, fmt = _load_json_text(Path(model_dir))
        return cls(text, fmt, output_size)

    def encode_batch(self, texts: Sequence[str], opts: EncodeOptions) -> list[Encoding]:
        deadline = None if opts.timeout_s is None else time.monotonic() + opts.timeout_s
        n_added = self.num_special_tokens_to_add if opts.add_special_tokens else 0
        if opts.max_length and opts.max_length < n_added:
            raise InvalidArgument(
                f"max_length: {opts.max_length} is smaller than the {n_added} special tokens the "
                "tokenizer adds; raise it or set add_special_tokens = false"
            )
        out = []
        for i, text in enumerate(texts):
            if deadline is not None and time.monotonic() >= deadline:
                raise DeadlineExceeded("the request's deadline passed")
            _check_utf8(text, f"texts[{i}]")
            check_word_lengths(text, opts.max_word_chars, f"texts[{i}]")
            out.append(self._encode_one(text, opts))
        return out

    def _encode_one(self, text: str, opts: EncodeOptions) -> Encoding:
        enc = self._encode_with_truncation(text, opts)
        result = Encoding(ids=list(enc.ids), truncated=bool(enc.overflowing))
        if opts.return_offsets:
            result.offsets = [x for pair in enc.offsets for x in pair]
        if opts.return_tokens:
            result.tokens = list(enc.tokens)
        return result

    def _encode_with_truncation(self, text: str, opts: EncodeOptions) -> tokenizers.Encoding:
        if not opts.max_length:
            return self._tok.encode(text, add_special_tokens=opts.add_special_tokens)
        # The package's own truncation, configured per call as transformers does. Truncation is
        # state on the tokenizer object, so it lives on a private copy used under a lock.
        with self._truncation_lock:
            if self._truncating is None:
                self._truncating = tokenizers.Tokenizer.from_str(self._tok.to_str())
            self._truncating.enable_truncation(opts.max_length, direction="left" if opts.truncate_left else "right")
            return self._truncating.encode(text, add_special_tokens=opts.add_special_tokens)

    def decode_batch(
        self, seqs: Sequence[Sequence[int]], skip_special_tokens: bool, timeout_s: float | None = None
    ) -> list[str]:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        out = []
        for i, seq in enumerate(seqs):
            if deadline is not None and time.monotonic() >= deadline:
                raise DeadlineExceeded("the request's deadline passed")
            for pos, token_id in enumerate(seq):
                if not isinstance(token_id, int) or token_id < 0 or token_id >= 2**32:
                    raise InvalidArgument(f"sequences[{i}]: token ids must be integers in [0, 2^32): {token_id!r}")
                # Below the model's output size, an id the vocabulary does not define is output an
                # engine can sample (a padded row); `decode` drops it.
                if token_id not in self._known and token_id >= self.output_size:
                    beyond = f" nor below the model's output size ({self.output_size})" if self.output_size else ""
                    raise InvalidArgument(
                        f"sequences[{i}]: token_ids[{pos}]: id {token_id} is not in the vocabulary "
                        f"(size {self.vocab_size}){beyond}"
                    )
            out.append(self._tok.decode(list(seq), skip_special_tokens=skip_special_tokens))
        return out


def _check_utf8(text: str, field: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgument(f"{field}: not valid UTF-8 (at byte {len(text[: e.start].encode('utf-8', 'surrogatepass'))})") from None
