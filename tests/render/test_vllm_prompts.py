"""Render against vLLM 0.33.0 itself, on both backends: the prompts in tests/data/render/vllm/cases.json
were produced by running vLLM's request validation and message parsing from its wheel and then
transformers on the real templates (tests/render/generate_vllm_prompts.py). Tool calls reach the
template in the key order vLLM's validation gives them; where vLLM refuses, Render refuses with the
case's INVALID_ARGUMENT. content_formats.json holds vLLM's content format for every template in
../shared/models.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tests.render.support as rs
from tests.conftest import require_shared_models

pytestmark = [pytest.mark.models]

SPEC = json.loads((rs.DATA / "vllm" / "cases.json").read_text(encoding="utf-8"))
FORMATS = json.loads((rs.DATA / "vllm" / "content_formats.json").read_text(encoding="utf-8"))["formats"]
RUNS = [(case, tid) for case in SPEC["cases"] for tid in case["templates"]]


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("vllm-prompts")


_RENDERERS: dict[tuple[str, str], object] = {}


def renderer(backend: str, model: str, scratch: Path):  # noqa: ANN201
    if (backend, model) not in _RENDERERS:
        from sidecar.backend import RendererSettings
        from sidecar.chat_template import renderer_inputs
        from sidecar.factory import get_backend
        from sidecar.model_config import ModelConfig

        directory = rs.model_dir(require_shared_models(), model, scratch)
        templates, variables = renderer_inputs(ModelConfig.from_dir(directory))
        tokenizer = rs.tokenizer(backend, model, scratch)
        _RENDERERS[(backend, model)] = get_backend(backend).load_renderer(
            templates, variables, tokenizer, RendererSettings(fixed_time=rs.FIXED_TIME)
        )
    return _RENDERERS[(backend, model)]


@pytest.mark.parametrize("backend", ["native", "reference"])
@pytest.mark.parametrize(("case", "tid"), RUNS, ids=[f"{c['name']}-{t}" for c, t in RUNS])
def test_prompt_is_vllms(backend: str, case: dict, tid: str, scratch: Path) -> None:
    from sidecar.backend import RenderOptions
    from sidecar.errors import InvalidArgument

    target = next(t for t in rs.targets(require_shared_models()) if t.id == tid)
    opts = RenderOptions(
        messages_json=json.dumps(case["messages"], ensure_ascii=False), chat_template=target.source,
        allow_request_template=True, add_generation_prompt=True, return_text=True, return_token_ids=False,
    )
    want = case["expected"][tid]
    if "vllm_refuses" in want:
        with pytest.raises(InvalidArgument) as err:
            renderer(backend, target.model, scratch).render(opts)
        assert case["error"] in err.value.message
        return
    assert renderer(backend, target.model, scratch).render(opts).text == want["text"]


@pytest.mark.parametrize("backend", ["native", "reference"])
def test_content_format_is_vllms(backend: str, scratch: Path) -> None:
    """Every template in ../shared/models gets the content format vLLM 0.33 detects."""
    from sidecar.model_config import ModelConfig
    from sidecar.reference.template_analysis import content_format, rewrite

    shared = require_shared_models()
    tokenizer = None
    if backend == "native":  # the reference variant does not need the native library
        from sidecar.backend import RendererSettings
        from sidecar.native import NativeRenderer, NativeTokenizer

        # One tokenizer for every template (the format depends on the template alone): loading it
        # per template took half a minute of CI.
        tokenizer = NativeTokenizer.from_dir(rs.model_dir(shared, rs.NEUTRAL, scratch))
    got = {}
    for target in rs.targets(shared):
        source = target.source
        if source is None:
            source = ModelConfig.from_dir(shared / target.model).chat_templates["default"]
        if tokenizer is None:
            got[target.id] = content_format(rewrite(source))
        else:
            got[target.id] = NativeRenderer([("t", source)], [], tokenizer, RendererSettings(cache_bytes=0)).content_formats["t"]
    assert got == FORMATS
