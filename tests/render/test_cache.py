"""The multi-turn cache on conversations that grow one turn per request: ids with the cache equal
ids without it and the reference tokenizer's ids, with both native encoders, on real models, and
the cache really is used (hits) and stays within its budget."""

from __future__ import annotations

import json
import random

import pytest

import tests.render.support as rs
from tests.conftest import load_tokenizer, require_shared_models
from sidecar.backend import EncodeOptions, RenderOptions, RendererSettings
from sidecar.factory import get_backend
from sidecar.chat_template import renderer_inputs
from sidecar.model_config import ModelConfig

pytestmark = pytest.mark.models

MODELS = ["qwen3", "llama3", "deepseek-v3", "gpt-oss", "mistral-nemo", "gemma3", "phi3", "qwen2.5"]
PIECES = [
    "hello", "Hello world", " leading", "trailing ", "  ", "\n", "\n\n", "\t", "日本語", "🎉👍🏽", "e\u0301", "<|im_start|>",
    "<|im_end|>", "</s>", "<s>", "[INST]", "<|eot_id|>", "<start_of_turn>", "<｜User｜>", "12345", "3.14", "don't",
    "json {\"a\": 1}", "```python\nprint(1)\n```", "Ünïcödé", "x" * 40,
]


def random_text(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) + rng.choice(["", " ", "\n"]) for _ in range(rng.randint(1, 12)))


def grow(rng: random.Random, turns: int) -> list[dict]:
    messages: list[dict] = [{"role": "system", "content": random_text(rng)}]
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append({"role": role, "content": random_text(rng)})
    return messages


def native_renderer(model: str, fast: bool, cache_bytes: int, scratch):  # noqa: ANN001, ANN201
    tokenizer = rs.tokenizer("native", model, scratch, fast)
    templates, variables = renderer_inputs(ModelConfig.from_dir(require_shared_models() / model))
    renderer = get_backend("native").load_renderer(templates, variables, tokenizer, RendererSettings(cache_bytes=cache_bytes))
    return renderer, tokenizer


@pytest.mark.parametrize("fast", [True, False], ids=["fastokens", "tokenizers"])
@pytest.mark.parametrize("model", MODELS)
def test_grown_conversations(model: str, fast: bool, tmp_path) -> None:  # noqa: ANN001
    renderer, tokenizer = native_renderer(model, fast, 8 << 20, tmp_path)
    if fast and tokenizer.encoder != "fastokens":
        pytest.skip(f"{model} does not use the fast encoder ({tokenizer.fast_rejection})")
    reference = load_tokenizer("reference", model)
    rng = random.Random(f"{model}-{fast}")
    hits = 0
    for conversation in range(2):
        messages = grow(rng, 12)
        for n in range(2, len(messages) + 1):
            prefix = json.dumps(messages[:n], ensure_ascii=False)
            opts = RenderOptions(messages_json=prefix, return_text=True)
            try:
                cached = renderer.render(opts)
            except Exception as e:  # noqa: BLE001 - templates may refuse a shape (e.g. system role); skip those
                pytest.skip(f"{model} refuses the random conversation: {e}")
            plain = renderer.render(RenderOptions(messages_json=prefix, use_cache=False))
            want = reference.encode_batch([cached.text], EncodeOptions(add_special_tokens=False))[0].ids
            assert list(cached.ids) == list(plain.ids) == want, (model, conversation, n)
            hits += cached.cache.hit_segments
    assert hits > 0, "the cache was never used"


def test_cache_stays_within_budget_and_stays_exact(tmp_path) -> None:  # noqa: ANN001
    renderer, _ = native_renderer("qwen3", True, 64 << 10, tmp_path)
    reference = load_tokenizer("reference", "qwen3")
    rng = random.Random(5)
    for _ in range(60):
        messages = grow(rng, 10)
        out = renderer.render(RenderOptions(messages_json=json.dumps(messages), return_text=True))
        assert list(out.ids) == reference.encode_batch([out.text], EncodeOptions(add_special_tokens=False))[0].ids
    assert renderer.info()["cache_bytes"] <= 64 << 10


def test_cache_hits_on_the_unchanged_prefix(tmp_path) -> None:  # noqa: ANN001
    renderer, _ = native_renderer("qwen3", True, 8 << 20, tmp_path)
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}]
    first = renderer.render(RenderOptions(messages_json=json.dumps(messages)))
    assert first.cache.miss_segments > 0
    messages += [{"role": "assistant", "content": "Hello."}, {"role": "user", "content": "Bye"}]
    second = renderer.render(RenderOptions(messages_json=json.dumps(messages)))
    # The system and first user turns are reused on top of what repeats inside one prompt.
    assert second.cache.hit_segments >= first.cache.hit_segments + 2
    assert second.cache.hit_bytes > first.cache.hit_bytes
