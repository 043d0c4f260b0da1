"""The native backend against Hugging Face `tokenizers` (PyPI), on every tokenizer in ../shared/models.

For each model and each input: ids with and without special tokens, character offsets, token
strings and decoded text (skipping special tokens and not) must be identical. Inputs: every
llama.cpp vector file, the hand-written corpus (tests/data/tokenize/corpus.json), every model's
added tokens embedded in text, seeded random mixes, and a ~200 KB text. Where a llama.cpp vector
file belongs to a model's vocabulary, the ids must also equal the file's expected ids.
"""

from __future__ import annotations

import json
import random
import zlib
from pathlib import Path

import pytest
import tokenizers

from sidecar.backend import EncodeOptions
from tests.conftest import REPO, TOKENIZER_MODELS, count_parity, load_tokenizer, require_shared_models

pytestmark = pytest.mark.parity

#: llama.cpp vocabulary file -> model folders it was verified against (../shared/models/SOURCES.md).
VECTOR_OWNERS = {
    "qwen2": ["qwen3", "qwen2.5"],
    "deepseek-r1-qwen": ["qwen3", "qwen2.5"],
    "llama-bpe": ["llama3"],
    "gpt-2": ["gpt2"],
    "phi-3": ["phi3"],
    "gpt-4o": ["gpt-oss"],
    "pixtral": ["mistral-nemo"],
    "gemma-4": ["gemma3"],
}

SEPARATOR = "\n__ggml_vocab_test__\n"


def vector_files() -> list[tuple[str, str, Path]]:
    root = require_shared_models() / "vectors" / "llama.cpp"
    files = []
    for inp in sorted(root.glob("*/*.inp")):
        vocab = inp.name.removeprefix("ggml-vocab-").removesuffix(".gguf.inp")
        files.append((inp.parent.name, vocab, inp))
    return files


def read_vector(inp: Path) -> tuple[list[str], list[list[int]]]:
    texts = inp.read_text(encoding="utf-8").split(SEPARATOR)
    if texts and texts[-1].endswith("\n__ggml_vocab_test__"):
        texts[-1] = texts[-1].removesuffix("\n__ggml_vocab_test__")
    out = inp.with_suffix(".out").read_text(encoding="utf-8").splitlines()
    expected = [[int(x) for x in line.split()] for line in out]
    return texts, expected


def corpus_texts() -> list[str]:
    data = json.loads((REPO / "tests" / "data" / "tokenize" / "corpus.json").read_text())
    return [t for group in data["cases"].values() for t in group]


def random_mixes(seed: int, n: int) -> list[str]:
    """Random concatenations of corpus fragments, cut at random code points."""
    rng = random.Random(seed)
    pool = corpus_texts()
    out = []
    for _ in range(n):
        parts = [rng.choice(pool) for _ in range(rng.randint(1, 6))]
        text = rng.choice(["", " ", "\n"]).join(parts)
        a, b = sorted(rng.randrange(len(text) + 1) for _ in range(2)) if text else (0, 0)
        out.append(text[a:] if rng.random() < 0.5 else text[:b])
    return out


def long_text() -> str:
    rng = random.Random(7)
    pool = corpus_texts()
    parts, size = [], 0
    while size < 200_000:
        p = rng.choice(pool)
        parts.append(p)
        size += len(p.encode())
    return " ".join(parts)


def added_token_texts(hf: tokenizers.Tokenizer, limit: int = 300) -> list[str]:
    added = sorted(hf.get_added_tokens_decoder().items())
    if len(added) > limit:
        added = added[: limit // 2] + added[-limit // 2 :]
    texts = []
    for _, token in added:
        t = token.content
        texts.append(f"x{t}y {t} {t}{t}\n{t}\n z")
    return texts


@pytest.fixture(scope="module", params=TOKENIZER_MODELS)
def pair(request: pytest.FixtureRequest):  # noqa: ANN201
    model = request.param
    path = require_shared_models() / model / "tokenizer.json"
    return model, load_tokenizer("native", model), tokenizers.Tokenizer.from_file(str(path))


def assert_same_encodings(model: str, native, hf: tokenizers.Tokenizer, texts: list[str], area: str) -> None:
    full = EncodeOptions(add_special_tokens=True, return_offsets=True, return_tokens=True)
    plain = EncodeOptions(add_special_tokens=False)
    with_special = EncodeOptions(add_special_tokens=True)
    got_full = native.encode_batch(texts, full)
    got_plain = native.encode_batch(texts, plain)
    got_special = native.encode_batch(texts, with_special)
    mismatches = 0
    for i, text in enumerate(texts):
        ref = hf.encode(text, add_special_tokens=True)
        ref_plain = hf.encode(text, add_special_tokens=False)
        expected_offsets = [x for pair in ref.offsets for x in pair]
        ok = (
            got_full[i].ids == ref.ids
            and got_full[i].offsets == expected_offsets
            and got_full[i].tokens == ref.tokens
            and got_plain[i].ids == ref_plain.ids
            and got_special[i].ids == ref.ids
        )
        if not ok:
            mismatches += 1
            assert got_plain[i].ids == ref_plain.ids, f"{model}: ids differ for {text!r}"
            assert got_special[i].ids == ref.ids, f"{model}: ids (special) differ for {text!r}"
            assert got_full[i].ids == ref.ids, f"{model}: reference-path ids differ for {text!r}"
            assert got_full[i].offsets == expected_offsets, f"{model}: offsets differ for {text!r}"
            assert got_full[i].tokens == ref.tokens, f"{model}: tokens differ for {text!r}"
    decoded = native.decode_batch([e.ids for e in got_special], skip_special_tokens=True)
    decoded_keep = native.decode_batch([e.ids for e in got_special], skip_special_tokens=False)
    for i, e in enumerate(got_special):
        assert decoded[i] == hf.decode(e.ids, skip_special_tokens=True), f"{model}: decode differs for {texts[i]!r}"
        assert decoded_keep[i] == hf.decode(e.ids, skip_special_tokens=False), f"{model}: decode differs"
    count_parity(area, cases=len(texts), mismatches=mismatches)
    count_parity("tokenize:all", cases=len(texts), mismatches=mismatches)


def test_llama_cpp_vectors(pair) -> None:  # noqa: ANN001
    model, native, hf = pair
    for _, _, inp in vector_files():
        texts, _ = read_vector(inp)
        assert_same_encodings(model, native, hf, texts, "tokenize:llama.cpp-vectors")


def test_vectors_expected_ids_for_own_vocabulary(pair) -> None:  # noqa: ANN001
    model, native, _ = pair
    checked = 0
    for _, vocab, inp in vector_files():
        if model not in VECTOR_OWNERS.get(vocab, []):
            continue
        texts, expected = read_vector(inp)
        got = native.encode_batch(texts, EncodeOptions(add_special_tokens=False))
        for text, e, g in zip(texts, expected, got):
            assert g.ids == e, f"{model} vs {inp.name}: {text!r}"
        checked += len(texts)
        count_parity("tokenize:vector-expected-ids", cases=len(texts))
    if model in {m for owners in VECTOR_OWNERS.values() for m in owners}:
        assert checked > 0


def test_corpus(pair) -> None:  # noqa: ANN001
    model, native, hf = pair
    assert_same_encodings(model, native, hf, corpus_texts(), "tokenize:corpus")


def test_added_tokens_in_text(pair) -> None:  # noqa: ANN001
    model, native, hf = pair
    assert_same_encodings(model, native, hf, added_token_texts(hf), "tokenize:added-tokens")


def test_random_mixes(pair) -> None:  # noqa: ANN001
    model, native, hf = pair
    assert_same_encodings(model, native, hf, random_mixes(zlib.crc32(model.encode()), 150), "tokenize:random")


def test_long_input(pair) -> None:  # noqa: ANN001
    model, native, hf = pair
    text = long_text()
    got = native.encode_batch([text], EncodeOptions(add_special_tokens=False))[0].ids
    assert got == hf.encode(text, add_special_tokens=False).ids
    # The array form Score uses (no Python int per id), with and without special tokens.
    assert native.encode_ids(text, EncodeOptions(add_special_tokens=False)).tolist() == got
    assert native.encode_ids(text, EncodeOptions()).tolist() == hf.encode(text).ids
    assert native.encode_ids("", EncodeOptions(add_special_tokens=False)).tolist() == []
    assert native.decode_batch([got], True)[0] == hf.decode(got, skip_special_tokens=True)
    count_parity("tokenize:long", cases=1)


#: Fragments that put unusual characters beside the spaces where long texts are cut: SentencePiece's
#: own space mark, runs of spaces, characters that fall back to bytes, marks that combine, and
#: Gemma 3's one piece that spans a space (`>▁</`), after which its texts are not cut.
CUT_NEIGHBOURS = ["x \u2581y ", "\u2581 \u2581", "a  b", "c   d ", " e", "f \t g", "h\u00a0i j", "\U0001f389 k",
                  "l \U0001f389", "m\u0301 n", "\u4f60 \u597d", "o\n p", "q \u2581\u2581r", "12 345", "s' t", "\u2581",
                  "<p> </p>", "div> </div"]


def test_long_texts_cut_beside_unusual_characters(pair) -> None:  # noqa: ANN001
    """Texts past the native encoder's piece size are cut before spaces where the pipeline allows it
    (SentencePiece Metaspace included): with the fragments above at random, beside every model's
    added tokens, the ids and offsets equal `tokenizers`' of the whole text."""
    model, native, hf = pair
    added = [t.content for _, t in sorted(hf.get_added_tokens_decoder().items())][:6]
    texts = []
    for seed in range(2):
        rng = random.Random(seed)
        pool = CUT_NEIGHBOURS + [f"{t} " for t in added] + [f" {t}" for t in added]
        parts, size = [], 0
        while size < 160_000:
            part = rng.choice(pool) if rng.random() < 0.5 else " ".join(rng.choice(corpus_texts()).split()[:8])
            parts.append(part)
            size += len(part.encode())
        texts.append(rng.choice(["", " "]).join(parts))
    assert_same_encodings(model, native, hf, texts, "tokenize:long")


def test_random_id_sequences_decode(pair) -> None:  # noqa: ANN001
    model, native, hf = pair
    rng = random.Random(11)
    vocab = hf.get_vocab_size(with_added_tokens=True)
    specials = sorted(hf.get_added_tokens_decoder())
    seqs = []
    for _ in range(200):
        seq = [rng.randrange(vocab) for _ in range(rng.randint(0, 40))]
        if specials and rng.random() < 0.5:
            seq.insert(rng.randrange(len(seq) + 1), rng.choice(specials))
        seqs.append([i for i in seq if hf.id_to_token(i) is not None])
    for skip in (True, False):
        got = native.decode_batch(seqs, skip_special_tokens=skip)
        assert got == [hf.decode(s, skip_special_tokens=skip) for s in seqs], model
    count_parity("detokenize:random-ids", cases=2 * len(seqs))


def test_byte_pieces_spaces_and_specials_decode(pair) -> None:  # noqa: ANN001
    """Sequences built where SentencePiece decoders have rules (uniform random ids seldom reach
    them): runs of `<0xNN>` pieces that spell valid UTF-8, invalid or cut-short runs (one U+FFFD
    per piece), runs a special token interrupts (skipped or kept), leading space pieces (`Strip`).
    On byte-level vocabularies the same shapes exercise added tokens and whitespace."""
    model, native, hf = pair
    rng = random.Random(12)
    vocab = hf.get_vocab_size(with_added_tokens=True)
    tokens = {i: hf.id_to_token(i) for i in range(vocab)}
    byte_ids = {int(t[3:5], 16): i for i, t in tokens.items()
                if t is not None and len(t) == 6 and t.startswith("<0x") and t.endswith(">")}
    spaces = [i for i, t in tokens.items() if t and t.strip("\u2581\u0120 \t\n") == ""][:50]
    specials = sorted(hf.get_added_tokens_decoder())
    words = [i for i in range(vocab) if tokens[i] is not None][:: max(1, vocab // 500)]

    def utf8_run(valid: bool) -> list[int]:
        data = "".join(chr(rng.choice([0xE9, 0x20AC, 0x1F600, 0x4E2D, rng.randrange(0x80, 0x3000)]))
                       for _ in range(rng.randint(1, 3))).encode()
        if not valid:
            data = data[: rng.randrange(len(data))] + bytes([rng.randrange(0x80, 0x100)])
        return [byte_ids[b] for b in data if b in byte_ids]

    seqs = []
    for _ in range(300):
        seq: list[int] = []
        if spaces and rng.random() < 0.4:
            seq += rng.choices(spaces, k=rng.randint(1, 3))
        for _ in range(rng.randint(0, 8)):
            roll = rng.random()
            if byte_ids and roll < 0.4:
                run = utf8_run(rng.random() < 0.6)
                if specials and run and rng.random() < 0.3:
                    run.insert(rng.randrange(len(run) + 1), rng.choice(specials))
                seq += run
            elif spaces and roll < 0.55:
                seq.append(rng.choice(spaces))
            elif specials and roll < 0.7:
                seq.append(rng.choice(specials))
            else:
                seq.append(rng.choice(words))
        seqs.append(seq)
    for skip in (True, False):
        got = native.decode_batch(seqs, skip_special_tokens=skip)
        for seq, text in zip(seqs, got):
            assert text == hf.decode(seq, skip_special_tokens=skip), f"{model} skip={skip}: {seq}"
    count_parity("detokenize:byte-pieces", cases=2 * len(seqs))


def test_truncation_matches_hf(pair) -> None:  # noqa: ANN001
    model, native, hf = pair
    texts = corpus_texts()[:40] + [long_text()[:5000]]
    tok = tokenizers.Tokenizer.from_str(hf.to_str())
    for side in ("right", "left"):
        for max_length in (5, 17):
            tok.enable_truncation(max_length, direction=side)
            for add in (True, False):
                opts = EncodeOptions(add_special_tokens=add, max_length=max_length, truncate_left=side == "left",
                                     return_offsets=True)
                got = native.encode_batch(texts, opts)
                for text, g in zip(texts, got):
                    ref = tok.encode(text, add_special_tokens=add)
                    assert g.ids == ref.ids, f"{model} {side} {max_length} {add}: {text[:40]!r}"
                    assert g.offsets == [x for p in ref.offsets for x in p]
                    assert g.truncated == bool(ref.overflowing)
                fast = native.encode_batch(texts, EncodeOptions(add_special_tokens=add, max_length=max_length,
                                                                truncate_left=side == "left"))
                assert [f.ids for f in fast] == [g.ids for g in got]
                count_parity("tokenize:truncation", cases=len(texts))


def test_reference_backend_agrees(pair) -> None:  # noqa: ANN001
    model, native, _ = pair
    reference = load_tokenizer("reference", model)
    texts = corpus_texts() + random_mixes(3, 40)
    opts = EncodeOptions(add_special_tokens=True, return_offsets=True, return_tokens=True, max_length=64)
    assert native.encode_batch(texts, opts) == reference.encode_batch(texts, opts)
    ids = [e.ids for e in native.encode_batch(texts, EncodeOptions())]
    assert native.decode_batch(ids, True) == reference.decode_batch(ids, True)
    assert native.vocab_size == reference.vocab_size
    assert native.added_tokens == reference.added_tokens
    count_parity("tokenize:native-vs-reference", cases=len(texts))
