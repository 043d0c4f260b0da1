"""The Render parity suite's inputs: the conversation files, the templates under test (every template
in ../shared/models) and the model directory each one renders with.

Shared by the tests and by `tests/render/generate_expected.py`, which records transformers'
output for every (template, conversation) pair.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sidecar.cli import raw_json_fields

DATA = Path(__file__).resolve().parent.parent / "data" / "render"
CONVERSATIONS = DATA / "conversations"
EXPECTED = DATA / "expected.json.xz"

#: `strftime_now` reports this instant in every parity render (2025-01-15 12:00 UTC), so dates in
#: prompts do not change from day to day.
FIXED_TIME = 1736942400

#: Family folders whose tokenizer_config.json (or chat_template.jinja) carries a chat template.
TEMPLATE_MODELS = ["qwen3", "qwen2.5", "llama3", "deepseek-v3", "gpt-oss", "mistral-nemo", "gemma3", "phi3"]
#: Family folders with templates but no tokenizer.
TEMPLATE_ONLY_FAMILIES = ["glm-4.5", "kimi-k2"]
#: The stand-in model for templates without a tokenizer: the GPT-2 tokenizer, whose special tokens
#: are all `<|endoftext|>`, so `bos_token` and friends render as something.
NEUTRAL = "neutral"


@dataclass(frozen=True)
class Conversation:
    """One conversation file: raw JSON text for each request field, so numbers keep their spelling."""

    name: str
    messages_json: str
    tools_json: str
    documents_json: str
    kwargs_json: str
    add_generation_prompt: bool
    continue_final_message: bool

    def python_inputs(self) -> tuple[Any, Any, Any, dict]:
        """(messages, tools, documents, kwargs) as `json.loads` gives them."""
        load = lambda text: json.loads(text) if text else None  # noqa: E731
        return load(self.messages_json), load(self.tools_json), load(self.documents_json), load(self.kwargs_json) or {}


def load_conversations(folder: Path = CONVERSATIONS) -> list[Conversation]:
    out = []
    for path in sorted(folder.glob("*.json")):
        raw = raw_json_fields(path.read_text(encoding="utf-8"))
        out.append(
            Conversation(
                name=path.stem,
                messages_json=raw["messages"],
                tools_json=raw.get("tools", ""),
                documents_json=raw.get("documents", ""),
                kwargs_json=raw.get("chat_template_kwargs", ""),
                add_generation_prompt=json.loads(raw.get("add_generation_prompt", "true")),
                continue_final_message=json.loads(raw.get("continue_final_message", "false")),
            )
        )
    return out


@dataclass(frozen=True)
class Target:
    """A template under test and the model directory it renders with."""

    id: str
    #: Family folder name, or NEUTRAL.
    model: str
    #: Jinja source passed per request; None renders with the model's own template.
    source: str | None
    #: Whether token ids are compared too (the model has a real tokenizer).
    compare_ids: bool


def targets(shared: Path) -> list[Target]:
    out = [Target(f"{m}/default", m, None, True) for m in TEMPLATE_MODELS]
    for family in TEMPLATE_MODELS + TEMPLATE_ONLY_FAMILIES:
        has_tokenizer = family in TEMPLATE_MODELS
        for path in sorted((shared / family).glob("chat_template.*.jinja")):
            name = path.name[len("chat_template.") : -len(".jinja")]
            out.append(Target(f"{family}/{name}", family if has_tokenizer else NEUTRAL, path.read_text(encoding="utf-8"), has_tokenizer))
    for folder in ("llama.cpp", "smg"):
        for path in sorted((shared / "templates" / folder).glob("*.jinja")):
            out.append(Target(f"{folder}/{path.stem}", NEUTRAL, path.read_text(encoding="utf-8"), True))
    return out


def model_dir(shared: Path, model: str, scratch: Path) -> Path:
    """The directory a target's model loads from; the neutral model is built in `scratch` once."""
    if model != NEUTRAL:
        return shared / model
    target = scratch / "neutral-gpt2"
    if not (target / "tokenizer.json").is_file():
        target.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shared / "gpt2" / "tokenizer.json", target / "tokenizer.json")
        shutil.copyfile(shared / "gpt2" / "tokenizer_config.json", target / "tokenizer_config.json")
    return target


_TOKENIZERS: dict[tuple[str, str, bool], object] = {}


def tokenizer(backend: str, model: str, scratch: Path, fast: bool = True):  # noqa: ANN201
    """A tokenizer of a parity model, loaded once per test session. `fast=False` loads the native
    tokenizer with the fast encoder disabled (the `tokenizers` crate encodes everything)."""
    import os

    from tests.conftest import load_tokenizer

    if fast and model != NEUTRAL:
        return load_tokenizer(backend, model)
    key = (backend, model, fast)
    if key not in _TOKENIZERS:
        from sidecar.factory import get_backend

        directory = model_dir(_shared(), model, scratch)
        saved = os.environ.get("SIDECAR_DISABLE_FASTOKENS")
        if not fast:
            os.environ["SIDECAR_DISABLE_FASTOKENS"] = "1"
        try:
            _TOKENIZERS[key] = get_backend(backend).load_tokenizer(directory)
        finally:
            if saved is None:
                os.environ.pop("SIDECAR_DISABLE_FASTOKENS", None)
            else:
                os.environ["SIDECAR_DISABLE_FASTOKENS"] = saved
    return _TOKENIZERS[key]


def bare_renderer(backend: str):  # noqa: ANN201
    """A renderer on the embedded model with no model templates and no cache, for tests whose
    requests bring their own template."""
    from sidecar.backend import RendererSettings
    from sidecar.factory import get_backend
    from sidecar.registry import materialize_embedded

    loader = get_backend(backend)
    return loader.load_renderer([], [], loader.load_tokenizer(materialize_embedded()), RendererSettings(cache_bytes=0))


def _shared() -> Path:
    from tests.conftest import require_shared_models

    return require_shared_models()


def ids_digest(ids: list[int]) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:24]


def load_expected() -> dict[str, dict[str, dict]]:
    import lzma

    return json.loads(lzma.decompress(EXPECTED.read_bytes()))


def raised_message(error: str | None) -> str | None:
    """The template's own message when transformers failed in `raise_exception` (recorded as
    `TemplateError: <message>`), else None."""
    prefix = "TemplateError: "
    if error and error.startswith(prefix):
        return error[len(prefix) :]
    return None
