"""Default parsers: configured per model, else recognised from templates and special tokens by the
registry rows' signatures (tests/data/parse/defaults.json: every template and tokenizer of
../shared/models, reviewed), else `hf` from the model's own response_template (SGLang's rule)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import derived_model, model_dir, require_shared_models
from tests.parse.harness import DATA
from sidecar import parsers
from sidecar.factory import get_backend
from sidecar.parse_defaults import ParseDefaults, detect_parsers, with_response_template
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


#: (decided tool, decided reasoning, the usable response_template's fields) -> defaults. None is a
#: kind neither configured nor recognised; "" is configured as none.
RESPONSE_TEMPLATE_DEFAULTS = [
    ((None, None, ["thinking", "content", "tool_calls"]), ("hf", "hf")),
    ((None, None, ["content", "tool_calls"]), ("hf", "")),
    ((None, None, ["thinking", "content"]), ("", "hf")),
    ((None, None, []), ("", "")),  # no template, or one this build refused
    (("hermes", None, ["thinking", "tool_calls"]), ("hermes", "")),  # hf pairs only with hf or none
    ((None, "qwen3", ["thinking", "tool_calls"]), ("", "qwen3")),
    (("", None, ["thinking", "tool_calls"]), ("", "hf")),  # configured none stays none
    (("hermes", "qwen3", ["thinking", "tool_calls"]), ("hermes", "qwen3")),
]


@pytest.mark.parametrize(("decided", "expected"), RESPONSE_TEMPLATE_DEFAULTS)
def test_response_template_fills_what_nothing_decided(decided: tuple, expected: tuple) -> None:
    assert with_response_template(*decided) == expected


@pytest.mark.models
def test_a_model_with_only_a_response_template_defaults_to_hf() -> None:
    """gpt2's template writes no format's markers; its response_template's fields decide (native
    backend: the native parse model says whether the template is usable)."""
    registry = ModelRegistry(get_backend("native"))
    usable = {"version": 1, "start_anchor": "<|im_start|>assistant\n",
              "fields": {"thinking": {"open": "<think>", "close": "</think>"},
                         "tool_calls": {"open": "<tool_call>", "close": "</tool_call>", "content": "json"}}}
    refused = {"version": 1, "fields": {"tool_calls": {"open": {"pattern": "(?<=x)y"}, "close": "z"}}}
    for template, expected in [(usable, ("hf", "hf")), (refused, ("", "")), (None, ("", ""))]:
        directory = model_dir(derived_model("gpt2", [], template)) if template else require_shared_models() / "gpt2"
        loaded = registry.load(ModelSpec(f"m{len(registry)}", directory))
        assert loaded.parse_defaults == ParseDefaults(*expected), template


#: tools_json -> whether it declares tools (a malformed value counts: the core refuses it by name).
TOOLS_JSON = [("", False), ("  \n", False), ("[]", False), (" [ \n\t] ", False),
              ('[{"type": "function", "function": {"name": "f"}}]', True), ("[{}]", True), ("{}", True),
              ("not json", True), ("[", True)]


@pytest.mark.parametrize(("tools_json", "declared"), TOOLS_JSON)
def test_the_default_tool_parser_applies_only_to_requests_with_tools(tools_json: str, declared: bool) -> None:
    """vLLM runs its tool parser only for a request with tools (SGLang too); a parser the request
    names runs either way, and the reasoning default is untouched."""
    from sidecar.backend import ParseLimits
    from sidecar.servicers.parse_stream import defaults_for, open_config
    from sidecar.v1 import preprocessor_pb2 as pb

    def resolved(request: pb.OpenRequest) -> tuple[str, str]:
        config = open_config(request, defaults_for(request, ParseDefaults("hermes", "qwen3")), ParseLimits())
        return config.tool_parser, config.reasoning_parser

    assert resolved(pb.OpenRequest(tools_json=tools_json)) == ("hermes" if declared else "", "qwen3")
    assert resolved(pb.OpenRequest(tools_json=tools_json, tool_parser="llama3_json")) == ("llama3_json", "qwen3")
    assert resolved(pb.OpenRequest(tools_json=tools_json, reasoning_parser="none")) == (
        "hermes" if declared else "", "none")
