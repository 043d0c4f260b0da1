"""What a Hugging Face model directory says about tokenization and chat formatting.

Reads `tokenizer_config.json` (special tokens, `add_bos_token`, `model_max_length`, chat templates),
`chat_template.jinja` / `chat_template.json` / `additional_chat_templates/*.jinja` (which win over the
config's template, as in transformers), `generation_config.json` (extra EOS ids) and `config.json`
(the model's output size, `vocab_size`). Both backends use this one reader, so they agree on the
inputs to rendering and on the ids they decode.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sidecar.errors import FailedPrecondition, NotFound

#: Values above this are "no limit" placeholders (transformers writes 1e30 when it has none).
_MAX_SANE_MODEL_LENGTH = 1 << 40

#: The largest output size a model can declare: ids are uint32 on the wire.
MAX_OUTPUT_SIZE = 1 << 32

#: Token-role keys of tokenizer_config.json that templates see as variables.
SPECIAL_TOKEN_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise FailedPrecondition(f"{path}: {e}") from None
    if not isinstance(data, dict):
        raise FailedPrecondition(f"{path}: expected a JSON object")
    return data


def token_text(value: Any) -> str | None:
    """A special token's text: tokenizer_config.json stores plain strings or serialized AddedTokens."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


@dataclass(frozen=True)
class ModelConfig:
    """The tokenization- and template-relevant configuration of a model directory."""

    directory: Path
    tokenizer_config: dict[str, Any]
    special_tokens: dict[str, str]
    chat_templates: dict[str, str]
    generation_eos_ids: tuple[int, ...]
    model_max_length: int
    #: Rows of the model's output layer (`config.json` `text_config.vocab_size` for a model that
    #: nests its language model's config, else `vocab_size`); 0 when the directory does not say.
    output_size: int = 0
    #: Files whose content changes outputs, for the fingerprint.
    files: tuple[Path, ...] = field(default=())

    @property
    def bos_token(self) -> str | None:
        return self.special_tokens.get("bos_token")

    @property
    def eos_token(self) -> str | None:
        return self.special_tokens.get("eos_token")

    @property
    def response_template(self) -> dict[str, Any] | None:
        """tokenizer_config.json's `response_template` (what vLLM's `hf` and `beam` parsers
        interpret), None when absent or not an object (vLLM ignores it then too)."""
        value = self.tokenizer_config.get("response_template")
        return value if isinstance(value, dict) else None

    @classmethod
    def from_dir(cls, directory: Path) -> ModelConfig:
        if not directory.is_dir():
            # An existing file (a path to config.json, say) was reported as a directory that does
            # not exist: say what the path is.
            what = "is not a directory (give the directory holding the tokenizer files)" if directory.exists() \
                else "does not exist"
            raise NotFound(f"model directory {directory} {what}")
        files: list[Path] = []
        config_path = directory / "tokenizer_config.json"
        config: dict[str, Any] = {}
        if config_path.is_file():
            config = _read_json(config_path)
            files.append(config_path)
        special = {k: t for k in SPECIAL_TOKEN_KEYS if (t := token_text(config.get(k))) is not None}
        templates = _chat_templates(directory, config, files)
        eos_ids: tuple[int, ...] = ()
        gen_path = directory / "generation_config.json"
        if gen_path.is_file():
            files.append(gen_path)
            eos = _read_json(gen_path).get("eos_token_id")
            eos_ids = tuple(eos) if isinstance(eos, list) else (eos,) if isinstance(eos, int) else ()
        max_len = config.get("model_max_length")
        max_len = int(max_len) if isinstance(max_len, (int, float)) and 0 < max_len < _MAX_SANE_MODEL_LENGTH else 0
        for name in ("tokenizer.json", "tiktoken.model"):
            if (directory / name).is_file():
                files.append(directory / name)
        files.extend(sorted(directory.glob("*.tiktoken")))
        model_path = directory / "config.json"
        output_size = _output_size(_read_json(model_path)) if model_path.is_file() else 0
        return cls(directory, config, special, templates, eos_ids, max_len, output_size, tuple(files))


def _output_size(model_config: dict[str, Any]) -> int:
    """`vocab_size` of a model's config.json: the engines size the output layer by it, and it can be
    larger than the tokenizer's ids (padded for the hardware), so the engine can sample an id the
    tokenizer does not define. A config with a `text_config` (multimodal models) describes its
    language model there, and vLLM reads the size from it; 0 when neither says."""
    for scope in (model_config.get("text_config"), model_config):
        value = scope.get("vocab_size") if isinstance(scope, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_OUTPUT_SIZE:
            return value
    return 0


def _chat_templates(directory: Path, config: dict[str, Any], files: list[Path]) -> dict[str, str]:
    templates: dict[str, str] = {}
    raw = config.get("chat_template")
    if isinstance(raw, str):
        templates["default"] = raw
    elif isinstance(raw, list):
        for entry in raw:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str) and isinstance(entry.get("template"), str):
                templates[entry["name"]] = entry["template"]
    json_path = directory / "chat_template.json"
    if json_path.is_file():
        files.append(json_path)
        value = _read_json(json_path).get("chat_template")
        if isinstance(value, str):
            templates["default"] = value
    jinja_path = directory / "chat_template.jinja"
    if jinja_path.is_file():
        files.append(jinja_path)
        templates["default"] = jinja_path.read_text(encoding="utf-8")
    extra_dir = directory / "additional_chat_templates"
    if extra_dir.is_dir():
        for path in sorted(extra_dir.glob("*.jinja")):
            files.append(path)
            templates[path.stem] = path.read_text(encoding="utf-8")
    return templates
