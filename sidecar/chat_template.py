"""What a model directory gives a chat template, read once for both backends: its named templates
and the special-token variables transformers passes to them.

transformers (5.x) renders with `{**tokenizer.special_tokens_map, **kwargs}` as variables. That map
holds the seven standard names (`bos_token`, `eos_token`, `unk_token`, `sep_token`, `pad_token`,
`cls_token`, `mask_token`) that are set, plus the model-specific ones: every other
`tokenizer_config.json` key ending in `_token` whose value is a token (Gemma 3's `boi_token`,
`image_token`, ...) and the entries of `extra_special_tokens` when it is a mapping. A standard name
the config does not mention at all takes the default of the tokenizer class transformers loads
(Gemma's `mask_token` is `<mask>` that way); one set to null stays unset.
"""

from __future__ import annotations

from typing import Any

from sidecar.model_config import SPECIAL_TOKEN_KEYS, ModelConfig, token_text


_LLAMA = {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}
_GEMMA = {"unk_token": "<unk>", "bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "mask_token": "<mask>"}
_QWEN2 = {"unk_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}
_GPT2 = {"unk_token": "<|endoftext|>", "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}
#: Special-token defaults of transformers (5.x) tokenizer classes, from their constructors.
_CLASS_DEFAULTS: dict[str, dict[str, str]] = {
    "LlamaTokenizer": _LLAMA, "LlamaTokenizerFast": _LLAMA,
    "GemmaTokenizer": _GEMMA, "GemmaTokenizerFast": _GEMMA,
    "Qwen2Tokenizer": _QWEN2, "Qwen2TokenizerFast": _QWEN2,
    "GPT2Tokenizer": _GPT2, "GPT2TokenizerFast": _GPT2,
}


def template_variables(tokenizer_config: dict[str, Any]) -> list[tuple[str, str]]:
    """The special-token variables, in transformers' order (standard names first)."""
    variables: dict[str, str] = {}
    defaults = _CLASS_DEFAULTS.get(str(tokenizer_config.get("tokenizer_class")), {})
    for key in SPECIAL_TOKEN_KEYS:
        text = token_text(tokenizer_config[key]) if key in tokenizer_config else defaults.get(key)
        if text is not None:
            variables[key] = text
    for key, value in tokenizer_config.items():
        if key in SPECIAL_TOKEN_KEYS or not key.endswith("_token"):
            continue
        text = token_text(value)
        if text is not None:
            variables[key] = text
    extra = tokenizer_config.get("extra_special_tokens")
    if isinstance(extra, dict):
        for key, value in extra.items():
            text = token_text(value)
            if isinstance(key, str) and text is not None:
                variables[key] = text
    return list(variables.items())


def model_templates(config: ModelConfig) -> list[tuple[str, str]]:
    """The model's (name, source) chat templates; `chat_template.jinja` is `default` when present."""
    return list(config.chat_templates.items())


def renderer_inputs(config: ModelConfig) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(templates, variables) for `Backend.load_renderer`."""
    return model_templates(config), template_variables(config.tokenizer_config)
