"""tiktoken files load into the same tokenizer Hugging Face ships: the gpt-oss folder has both
`o200k_base.tiktoken` (byte-identical to OpenAI's published file) and the upstream `tokenizer.json`,
so a directory holding only the tiktoken file plus `tokenizer_config.json` must encode and decode
exactly like `tokenizer.json`, on both backends.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import tokenizers

from sidecar.backend import EncodeOptions
from sidecar.factory import get_backend
from sidecar.reference import tiktoken as reference_tiktoken
from tests.conftest import count_parity, require_shared_models
from tests.tokenize.test_parity import corpus_texts, random_mixes, read_vector, vector_files

pytestmark = pytest.mark.parity


@pytest.fixture(scope="module")
def tiktoken_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = require_shared_models() / "gpt-oss"
    target = tmp_path_factory.mktemp("gpt-oss-tiktoken")
    shutil.copyfile(src / "o200k_base.tiktoken", target / "o200k_base.tiktoken")
    shutil.copyfile(src / "tokenizer_config.json", target / "tokenizer_config.json")
    return target


@pytest.fixture(scope="module")
def upstream() -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(str(require_shared_models() / "gpt-oss" / "tokenizer.json"))


def test_conversion_reproduces_the_upstream_vocab_and_merges(tiktoken_dir: Path) -> None:
    upstream = json.loads((require_shared_models() / "gpt-oss" / "tokenizer.json").read_text())
    config = json.loads((tiktoken_dir / "tokenizer_config.json").read_text())
    converted = json.loads(
        reference_tiktoken.tokenizer_json((tiktoken_dir / "o200k_base.tiktoken").read_text(), "o200k_base.tiktoken", config)
    )
    assert converted["model"]["vocab"] == upstream["model"]["vocab"]
    assert [tuple(m) for m in converted["model"]["merges"]] == [tuple(m) for m in upstream["model"]["merges"]]
    assert converted["pre_tokenizer"] == upstream["pre_tokenizer"]
    assert [(t["id"], t["content"]) for t in converted["added_tokens"]] == [
        (t["id"], t["content"]) for t in upstream["added_tokens"]
    ]


@pytest.mark.parametrize("backend", ["native", "reference"])
def test_tiktoken_directory_encodes_like_tokenizer_json(backend: str, tiktoken_dir: Path, upstream) -> None:  # noqa: ANN001
    tok = get_backend(backend).load_tokenizer(tiktoken_dir)
    assert tok.format == "tiktoken"
    assert tok.vocab_size == upstream.get_vocab_size(with_added_tokens=True)
    texts = corpus_texts() + random_mixes(5, 100)
    for _, _, inp in vector_files():
        texts += read_vector(inp)[0]
    texts += [f"a{t.content}b {t.content}" for t in tok.added_tokens]
    got = tok.encode_batch(texts, EncodeOptions(add_special_tokens=True, return_offsets=True, return_tokens=True))
    for text, g in zip(texts, got):
        ref = upstream.encode(text)
        assert (g.ids, g.tokens) == (ref.ids, ref.tokens), text
        assert g.offsets == [x for p in ref.offsets for x in p], text
    decoded = tok.decode_batch([g.ids for g in got], skip_special_tokens=False)
    assert decoded == [upstream.decode(g.ids, skip_special_tokens=False) for g in got]
    count_parity(f"tiktoken:{backend}-vs-gpt-oss-tokenizer.json", cases=len(texts))


def test_unknown_tiktoken_encoding_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mystery.tiktoken").write_text("YQ== 0\n")
    from sidecar.errors import FailedPrecondition

    for backend in ("native", "reference"):
        with pytest.raises(FailedPrecondition, match="unknown encoding"):
            get_backend(backend).load_tokenizer(tmp_path)
