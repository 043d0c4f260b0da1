"""Incremental detokenization against Hugging Face `decode`, on every tokenizer in ../shared/models.

The invariant: fed output ids O after the prompt ids P (the decoder is primed with the last 32),
the concatenated deltas equal `decode(C + O)` minus the text of `decode(C)` at its start, where
C = P[-32:], with the same `skip_special_tokens`. Checked with parsers off (so content is the
decoder's whole output) on real texts (CJK, emoji, combining marks, code) and random id streams,
one token per step and all at once, with the table decoders and the generic (window) decoder.
"""

from __future__ import annotations

import functools
import random

import pytest

from tests.conftest import TOKENIZER_MODELS, require_shared_models
from tests.parse.harness import hf_tokenizer, run

pytestmark = pytest.mark.parity

TEXTS = [
    "Hello, world! How are you today?",
    "漢字とひらがな、カタカナ。中文测试：你好世界！한국어 텍스트",
    "Emoji: 👩‍👩‍👧‍👦 🏳️‍🌈 👍🏽 🤔🤔 and flags 🇫🇷🇯🇵",
    "Combining: q\u0323\u0307 a\u0308\u0301 ñ Ω \u0915\u094d\u0937 नमस्ते",
    "def f(x):\n    return {'a': [1, 2, 3]}  # comment\n\n\tTabs\r\nCRLF",
    "   leading spaces and trailing   ",
    "\u00a0non-breaking\u2009thin\u3000ideographic space",
]
PROMPTS = ["", "User: translate this\nAssistant:", "漢"]
PRIME = 32


def expected(model: str, prompt: list[int], output: list[int], skip: bool) -> str | None:
    tok = hf_tokenizer(model)
    context = prompt[-PRIME:]
    before = tok.decode(context, skip_special_tokens=skip)
    after = tok.decode(context + output, skip_special_tokens=skip)
    if not after.startswith(before) or before.endswith("\ufffd"):
        return None  # the context itself ends mid-character: no clean split exists
    return after[len(before):]


@functools.cache
def vocab_ids(model: str) -> list[int]:
    # get_vocab builds a dict of the whole vocabulary (seconds for Gemma 3's 262k entries): once per model.
    return sorted(hf_tokenizer(model).get_vocab(with_added_tokens=True).values())


def random_ids(model: str, seed: int, n: int) -> list[int]:
    ids = vocab_ids(model)
    rng = random.Random(seed)
    return [rng.choice(ids) for _ in range(n)]


def streams(model: str) -> list[tuple[str, list[int], list[int]]]:
    tok = hf_tokenizer(model)
    out = []
    for i, text in enumerate(TEXTS):
        prompt = tok.encode(PROMPTS[i % len(PROMPTS)], add_special_tokens=False).ids
        out.append((f"text{i}", prompt, tok.encode(text, add_special_tokens=False).ids))
    for seed in range(6):
        prompt = tok.encode(PROMPTS[seed % len(PROMPTS)], add_special_tokens=False).ids
        out.append((f"random{seed}", prompt, random_ids(model, seed, 48)))
    return out


def decode_run(model: str, prompt: list[int], ids: list[int], skip: bool, per_step: int,
               force_generic: bool = False) -> str:
    case = {"model": model, "prompt_ids": prompt, "skip_special_tokens": skip}
    chunks = [ids[i : i + per_step] for i in range(0, len(ids), per_step)] or [[]]
    result, _ = run(case, chunks, force_generic=force_generic)
    assert result.error is None, result.error
    assert result.completion_tokens == len(ids)
    return result.content


@pytest.mark.models
@pytest.mark.parametrize("model", TOKENIZER_MODELS)
@pytest.mark.parametrize("skip", [True, False], ids=["skip", "keep"])
def test_native_matches_hf_decode(model: str, skip: bool) -> None:
    require_shared_models()
    checked = 0
    for name, prompt, ids in streams(model):
        want = expected(model, prompt, ids, skip)
        if want is None:
            continue
        for per_step in (1, 5, len(ids) or 1):
            got = decode_run(model, prompt, ids, skip, per_step)
            assert got == want, f"{model} {name} per_step={per_step}: {got!r} != {want!r}"
        checked += 1
    assert checked >= len(TEXTS)


@pytest.mark.models
@pytest.mark.parametrize("model", ["qwen3", "gpt-oss", "llama3", "mistral-v3-spm", "phi3"])
def test_generic_window_decoder_matches_on_real_text(model: str) -> None:
    """The window decoder (used for decoder chains without a table) on real vocabularies. Random
    byte-fallback streams are left out: there `decode` itself rewrites finished text (a later
    invalid byte turns a whole run into U+FFFD), which only the table decoder anticipates."""
    require_shared_models()
    for name, prompt, ids in streams(model)[: len(TEXTS)]:
        want = expected(model, prompt, ids, True)
        got = decode_run(model, prompt, ids, True, 1, force_generic=True)
        assert got == want, f"{model} {name}: {got!r} != {want!r}"
