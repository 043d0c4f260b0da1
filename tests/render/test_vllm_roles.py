"""Developer messages and Claude Code's billing header, on both backends: each conversation of
tests/data/render/vllm_roles renders to the prompt vLLM 0.33.0 builds with the same template
(expected.json, recorded by running vLLM's own message code and then transformers:
tests/render/generate_vllm_roles.py), or fails where that failed (with the template's message when
it raised one).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tests.render.support as rs
from tests.conftest import SHARED_MODELS, require_shared_models

pytestmark = [pytest.mark.models]

DATA = rs.DATA / "vllm_roles"
EXPECTED = json.loads((DATA / "expected.json").read_text(encoding="utf-8"))
CONVERSATIONS = {c.name: c for c in rs.load_conversations(DATA / "conversations")}
TARGET_IDS = [t for t in EXPECTED if t != "_meta"]
CASES = [(t, name) for t in TARGET_IDS for name in CONVERSATIONS]


class Renderers:
    """Renderers per (backend, model), built once per module."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.targets = {t.id: t for t in rs.targets(require_shared_models())}
        self._cache: dict[tuple[str, str], object] = {}

    def get(self, backend: str, model: str):  # noqa: ANN201
        if (backend, model) not in self._cache:
            from sidecar.backend import RendererSettings
            from sidecar.chat_template import renderer_inputs
            from sidecar.factory import get_backend
            from sidecar.model_config import ModelConfig

            directory = rs.model_dir(SHARED_MODELS, model, self.scratch)
            templates, variables = renderer_inputs(ModelConfig.from_dir(directory))
            tokenizer = rs.tokenizer(backend, model, self.scratch)
            settings = RendererSettings(fixed_time=rs.FIXED_TIME, cache_bytes=0)
            self._cache[(backend, model)] = get_backend(backend).load_renderer(templates, variables, tokenizer, settings)
        return self._cache[(backend, model)]


@pytest.fixture(scope="module")
def renderers(tmp_path_factory: pytest.TempPathFactory) -> Renderers:
    return Renderers(tmp_path_factory.mktemp("vllm-roles"))


def test_every_conversation_was_recorded() -> None:
    missing = [f"{t}/{name}" for t, name in CASES if name not in EXPECTED[t]]
    assert not missing, f"run tests/render/generate_vllm_roles.py: no expectation for {missing}"


@pytest.mark.parametrize("backend", ["native", "reference"])
@pytest.mark.parametrize(("target_id", "name"), CASES, ids=[f"{t}:{n}" for t, n in CASES])
def test_rendered_as_vllm(target_id: str, name: str, backend: str, renderers: Renderers) -> None:
    from sidecar.backend import RenderOptions
    from sidecar.errors import SidecarError

    target, conv = renderers.targets[target_id], CONVERSATIONS[name]
    want = EXPECTED[target_id][name]
    opts = RenderOptions(
        messages_json=conv.messages_json, chat_template=target.source, allow_request_template=True,
        add_generation_prompt=conv.add_generation_prompt, continue_final_message=conv.continue_final_message,
        return_text=True, return_token_ids=False,
    )
    renderer = renderers.get(backend, target.model)
    if "error" in want:
        with pytest.raises(SidecarError) as err:
            renderer.render(opts)
        message = rs.raised_message(want["error"])
        assert message is None or message in err.value.message
        return
    assert renderer.render(opts).text == want["text"]
