"""Default parsers: configured per model, else recognised from templates and special tokens by the
registry rows' signatures (tests/data/parse/defaults.json: every template and tokenizer of
../shared/models, reviewed)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import require_shared_models
from tests.parse.harness import DATA
from sidecar import parsers
from sidecar.factory import get_backend
from sidecar.parse_defaults import ParseDefaults, detect_parsers
from sidecar.registry import ModelRegistry, ModelSpec

EXPECTED = json.loads((DATA / "defaults.json").read_text(encoding="utf-8"))


@pytest.mark.models
@pytest.mark.parametrize("model", sorted(EXPECTED["models"]))
def test_recognised_from_model_files(model: str) -> None:
    models = require_shared_models()
    registry = ModelRegistry(get_backend("reference"))
    loaded = registry.load(ModelSpec(model, models / model))
    assert loaded.parse_defaults == ParseDefaults(*EXPECTED["models"][model])


@pytest.mark.models
@pytest.mark.parametrize("path", sorted(EXPECTED["templates"]))
def test_recognised_from_templates(path: str) -> None:
    models = require_shared_models()
    template = (models / path).read_text(encoding="utf-8")
    assert list(detect_parsers([template], set())) == EXPECTED["templates"][path]


def test_every_default_is_a_registered_canonical_name() -> None:
    rows = {(p.kind, p.name) for p in parsers.parsers()}
    for tool, reasoning in [*EXPECTED["models"].values(), *EXPECTED["templates"].values()]:
        assert not tool or ("tool", tool) in rows
        assert not reasoning or ("reasoning", reasoning) in rows


def test_signatures_rank_specific_markers_first() -> None:
    """A template holding a format's specific marker and the generic `<tool_call>` is that format."""
    assert detect_parsers(["<tool_call>{{ x }}<arg_key>k</arg_key>"], set())[0] == parsers.find("tool", "glm45").name
    assert detect_parsers(["<tool_call><function=f><parameter=k>"], set())[0] == "qwen3_coder"
    assert detect_parsers(["plain"], {"<|channel|>", "<|message|>"}) == ("openai", "openai_gptoss")
    assert detect_parsers(["plain"], set()) == ("", "")


@pytest.mark.models
def test_configuration_wins() -> None:
    models = require_shared_models()
    registry = ModelRegistry(get_backend("reference"))
    spec = ModelSpec.parse(f"q={models / 'qwen3'},tool_parser=qwen3_coder,reasoning_parser=none")
    assert registry.load(spec).parse_defaults == ParseDefaults("qwen3_coder", "none")
