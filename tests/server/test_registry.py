"""Model specs, model configuration, fingerprints and the embedded default."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sidecar.errors import FailedPrecondition, InvalidArgument, NotFound
from sidecar.model_config import ModelConfig
from sidecar.registry import ModelRegistry, ModelSpec, compute_fingerprint, embedded_spec, materialize_embedded
from tests.conftest import REPO


def test_model_spec_parses_name_dir_and_options() -> None:
    spec = ModelSpec.parse("m=/models/x,tool_parser=hermes,reasoning_parser=qwen3")
    assert (spec.name, spec.directory, spec.options) == ("m", Path("/models/x"), {"tool_parser": "hermes", "reasoning_parser": "qwen3"})


@pytest.mark.parametrize("text", ["noequals", "=dir", "name=", "m=/x,colour=blue", "m=/x,tool_parser",
                                  # a parser name ParseStream would refuse on every open relying on it
                                  "m=/x,tool_parser=bogus", "m=/x,reasoning_parser=hermes"])
def test_model_spec_rejects_malformed(text: str) -> None:
    with pytest.raises(InvalidArgument, match="--model"):
        ModelSpec.parse(text)


def write(directory: Path, name: str, value) -> None:  # noqa: ANN001
    (directory / name).write_text(value if isinstance(value, str) else json.dumps(value))


def test_config_reads_special_tokens_in_both_spellings(tmp_path: Path) -> None:
    write(tmp_path, "tokenizer_config.json", {
        "bos_token": {"content": "<s>", "lstrip": False}, "eos_token": "</s>", "model_max_length": 1e30,
        "chat_template": "config template",
    })
    config = ModelConfig.from_dir(tmp_path)
    assert (config.bos_token, config.eos_token) == ("<s>", "</s>")
    assert config.model_max_length == 0  # transformers' "no limit" placeholder
    assert config.chat_templates == {"default": "config template"}


def test_template_precedence_follows_transformers(tmp_path: Path) -> None:
    write(tmp_path, "tokenizer_config.json", {"chat_template": [{"name": "default", "template": "A"}, {"name": "tool_use", "template": "T"}]})
    assert ModelConfig.from_dir(tmp_path).chat_templates == {"default": "A", "tool_use": "T"}
    write(tmp_path, "chat_template.jinja", "J")
    (tmp_path / "additional_chat_templates").mkdir()
    write(tmp_path / "additional_chat_templates", "rag.jinja", "R")
    assert ModelConfig.from_dir(tmp_path).chat_templates == {"default": "J", "tool_use": "T", "rag": "R"}


def test_generation_config_eos_ids(tmp_path: Path) -> None:
    write(tmp_path, "generation_config.json", {"eos_token_id": [1, 2]})
    assert ModelConfig.from_dir(tmp_path).generation_eos_ids == (1, 2)
    write(tmp_path, "generation_config.json", {"eos_token_id": 7})
    assert ModelConfig.from_dir(tmp_path).generation_eos_ids == (7,)


def test_broken_config_is_failed_precondition(tmp_path: Path) -> None:
    write(tmp_path, "tokenizer_config.json", "{not json")
    with pytest.raises(FailedPrecondition, match="tokenizer_config.json"):
        ModelConfig.from_dir(tmp_path)
    with pytest.raises(NotFound):
        ModelConfig.from_dir(tmp_path / "missing")


def test_fingerprint_tracks_files_and_defaults(tmp_path: Path) -> None:
    write(tmp_path, "tokenizer_config.json", {"eos_token": "</s>"})
    write(tmp_path, "chat_template.jinja", "{{ messages }}")
    config = ModelConfig.from_dir(tmp_path)
    base = compute_fingerprint(config, {"options": {}})
    assert base == compute_fingerprint(ModelConfig.from_dir(tmp_path), {"options": {}})
    assert base != compute_fingerprint(config, {"options": {"tool_parser": "hermes"}})
    write(tmp_path, "chat_template.jinja", "{{ messages }} ")
    assert base != compute_fingerprint(ModelConfig.from_dir(tmp_path), {"options": {}})


def test_embedded_model_unpacks_once_with_license(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = materialize_embedded()
    assert (first / "tokenizer.json").stat().st_size > 10_000_000
    assert {"LICENSE", "NOTICE", "tokenizer_config.json", "chat_template.jinja"} <= {p.name for p in first.iterdir()}
    assert "Apache License" in (first / "LICENSE").read_text()
    mtime = (first / "tokenizer.json").stat().st_mtime_ns
    assert materialize_embedded() == first and (first / "tokenizer.json").stat().st_mtime_ns == mtime
    assert embedded_spec().source == "embedded:qwen3"


def test_registry_lookup_and_duplicates() -> None:
    from sidecar.factory import get_backend

    registry = ModelRegistry(get_backend("native"))
    with pytest.raises(NotFound, match="unknown model 'x'; this server hosts: none"):
        registry.get("x")
    spec = ModelSpec("toy", REPO / "tests" / "data" / "native")
    with pytest.raises(NotFound, match="neither tokenizer.json"):
        registry.load(spec)


def test_a_model_path_that_is_a_file_is_said_to_be_one(tmp_path: Path) -> None:
    """`--model m=.../config.json` was reported as a model directory that "does not exist"."""
    file = tmp_path / "config.json"
    file.write_text("{}")
    with pytest.raises(NotFound, match=f"^model directory {file} is not a directory"):
        ModelConfig.from_dir(file)
    with pytest.raises(NotFound, match=f"^model directory {tmp_path / 'gone'} does not exist$"):
        ModelConfig.from_dir(tmp_path / "gone")
