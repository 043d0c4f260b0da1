"""Default parsers: configured per model, else recognised from templates and special tokens."""

from __future__ import annotations

import pytest

from tests.conftest import require_shared_models
from sidecar.factory import get_backend
from sidecar.parse_defaults import ParseDefaults, detect_parsers
from sidecar.registry import ModelRegistry, ModelSpec

EXPECTED = {
    "qwen3": ("hermes", "qwen3"),
    "qwen2.5": ("hermes", ""),
    "deepseek-v3": ("deepseek_v3", "deepseek_r1"),
    "gpt-oss": ("openai", "openai"),
    "llama3": ("llama3_json", ""),
    "mistral-nemo": ("mistral", ""),
    "gpt2": ("", ""),
}

TEMPLATES = {
    "qwen3/chat_template.qwen3-coder.jinja": ("qwen3_coder", ""),
    "deepseek-v3/chat_template.deepseek-v3.1.jinja": ("deepseek_v31", "deepseek_v3"),
    "deepseek-v3/chat_template.deepseek-v3.2.jinja": ("deepseek_v32", "deepseek_v3"),
    "glm-4.5/chat_template.GLM-4.6.jinja": ("glm45", "glm45"),
    "glm-4.5/chat_template.GLM-4.7-Flash.jinja": ("glm47", "glm45"),
    "kimi-k2/chat_template.Kimi-K2-Thinking.jinja": ("kimi_k2", "kimi_k2"),
    "kimi-k2/chat_template.moonshotai-Kimi-K2.jinja": ("kimi_k2", ""),
    "templates/llama.cpp/MiniMax-M2.jinja": ("minimax_m2", "minimax_m2"),
    "mistral-nemo/chat_template.mistralai-Ministral-3-14B-Reasoning-2512.jinja": ("mistral", "mistral"),
}


@pytest.mark.models
@pytest.mark.parametrize("model", sorted(EXPECTED))
def test_recognised_from_model_files(model: str) -> None:
    models = require_shared_models()
    registry = ModelRegistry(get_backend("reference"))
    loaded = registry.load(ModelSpec(model, models / model))
    assert loaded.parse_defaults == ParseDefaults(*EXPECTED[model])


@pytest.mark.models
@pytest.mark.parametrize("path", sorted(TEMPLATES))
def test_recognised_from_templates(path: str) -> None:
    models = require_shared_models()
    template = (models / path).read_text(encoding="utf-8")
    assert detect_parsers([template], set()) == TEMPLATES[path]


@pytest.mark.models
def test_configuration_wins() -> None:
    models = require_shared_models()
    registry = ModelRegistry(get_backend("reference"))
    spec = ModelSpec.parse(f"q={models / 'qwen3'},tool_parser=qwen3_coder,reasoning_parser=none")
    assert registry.load(spec).parse_defaults == ParseDefaults("qwen3_coder", "none")
