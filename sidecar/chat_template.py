"""What a model directory gives a chat template, read once for both backends: its named templates
and the special-token variables transformers passes to them.

transformers (5.x) renders with `{**tokenizer.special_tokens_map, **kwargs}` as variables. That map
holds the seven standard names (`bos_token`, `eos_token`, `unk_token`, `sep_token`, `pad_token`,
`cls_token`, `mask_token`) that are set, plus the model-specific ones: every other
`tokenizer_config.json` key ending in `_token` whose value is a token (Gemma 3's `boi_token`,
`image_token`, ...) and the entries of `extra_special_tokens` when it is a mapping.
"""

from __future__ import annotations

from typing import Any

from sidecar.model_config import SPECIAL_TOKEN_KEYS, ModelConfig


def _token_text(value: Any) -> str | None:
    # Tokens are stored as plain strings or as serialized AddedToken objects.
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def template_variables(tokenizer_config: dict[str, Any]) -> list[tuple[str, str]]:
    """The special-token variables, in transformers' order (standard names first)."""
    variables: dict[str, str] = {}
    for key in SPECIAL_TOKEN_KEYS:
        text = _token_text(tokenizer_config.get(key))
        if text is not None:
            variables[key] = text
    for key, value in tokenizer_config.items():
        if key in SPECIAL_TOKEN_KEYS or not key.endswith("_token"):
            continue
        text = _token_text(value)
        if text is not None:
            variables[key] = text
    extra = tokenizer_config.get("extra_special_tokens")
    if isinstance(extra, dict):
        for key, value in extra.items():
            text = _token_text(value)
            if isinstance(key, str) and text is not None:
                variables[key] = text
    return list(variables.items())


def model_templates(config: ModelConfig) -> list[tuple[str, str]]:
    """The model's (name, source) chat templates; `chat_template.jinja` is `default` when present."""
    return list(config.chat_templates.items())


def renderer_inputs(config: ModelConfig) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(templates, variables) for `Backend.load_renderer`."""
    return model_templates(config), template_variables(config.tokenizer_config)
