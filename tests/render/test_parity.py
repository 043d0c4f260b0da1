"""Render parity: every template in ../shared/models against every conversation in
tests/data/render/conversations, compared with what transformers' `apply_chat_template` produced
(tests/data/render/expected.json.xz, recorded by tests/render/generate_expected.py and
re-checked live on a sample here).

- native: text equal byte for byte, ids equal where the template's family has a tokenizer, and an
  error wherever transformers raised (carrying the template's message for `raise_exception`),
  except the cases listed with their reason in tests/data/render/known_mismatches.json.
- reference: agrees with native on every case, except where native matches transformers and the
  reference does not (the limits of the minijinja Python binding, see COMPATIBILITY.md).
- multi-turn cache: ids with the cache (warm, shared by all cases) equal ids without it, with both
  native encoders.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import SHARED_MODELS, count_parity, require_shared_models
import tests.render.support as rs

pytestmark = [pytest.mark.models, pytest.mark.parity]

KNOWN = json.loads((rs.DATA / "known_mismatches.json").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class Outcome:
    text: str | None
    ids: tuple[int, ...] | None
    error: str | None

    def same_as(self, other: Outcome) -> bool:
        if self.error or other.error:
            return bool(self.error) == bool(other.error)
        return self.text == other.text and self.ids == other.ids


def _targets() -> list[rs.Target]:
    return rs.targets(SHARED_MODELS) if (SHARED_MODELS / "SOURCES.md").is_file() else []


TARGETS = _targets()
CONVERSATIONS = rs.load_conversations()


class Renderers:
    """Renderers per (backend, model, encoder), built once per session."""

    def __init__(self, scratch: Path) -> None:
        from sidecar.backend import RendererSettings

        self.scratch = scratch
        self.settings = RendererSettings(fixed_time=rs.FIXED_TIME)
        self._cache: dict[tuple[str, str, bool], object] = {}
        self.outcomes: dict[tuple[str, str], dict[str, Outcome]] = {}

    def get(self, backend: str, model: str, fast: bool = True):  # noqa: ANN201
        key = (backend, model, fast)
        if key not in self._cache:
            from sidecar.factory import get_backend
            from sidecar.chat_template import renderer_inputs
            from sidecar.model_config import ModelConfig

            directory = rs.model_dir(require_shared_models(), model, self.scratch)
            be = get_backend(backend)
            tokenizer = rs.tokenizer(backend, model, self.scratch, fast)
            templates, variables = renderer_inputs(ModelConfig.from_dir(directory))
            self._cache[key] = be.load_renderer(templates, variables, tokenizer, self.settings)
        return self._cache[key]

    def outcomes_for(self, backend: str, target: rs.Target) -> dict[str, Outcome]:
        key = (backend, target.id)
        if key not in self.outcomes:
            renderer = self.get(backend, target.model)
            self.outcomes[key] = {c.name: render(renderer, target, c) for c in CONVERSATIONS}
        return self.outcomes[key]


def options(target: rs.Target, conv: rs.Conversation, **overrides):  # noqa: ANN003, ANN201
    from sidecar.backend import RenderOptions

    fields = dict(
        messages_json=conv.messages_json, tools_json=conv.tools_json, documents_json=conv.documents_json,
        chat_template_kwargs_json=conv.kwargs_json, chat_template=target.source, allow_request_template=True,
        add_generation_prompt=conv.add_generation_prompt, continue_final_message=conv.continue_final_message,
        return_text=True, return_token_ids=target.compare_ids,
    )
    fields.update(overrides)
    return RenderOptions(**fields)


def render(renderer, target: rs.Target, conv: rs.Conversation, **overrides) -> Outcome:  # noqa: ANN001
    from sidecar.errors import SidecarError

    try:
        out = renderer.render(options(target, conv, **overrides))
    except SidecarError as e:
        return Outcome(None, None, f"{type(e).__name__}: {e.message}")
    return Outcome(out.text, tuple(out.ids) if target.compare_ids else None, None)


@pytest.fixture(scope="session")
def renderers(tmp_path_factory: pytest.TempPathFactory) -> Renderers:
    require_shared_models()
    return Renderers(tmp_path_factory.mktemp("render-models"))


@pytest.fixture(scope="session")
def expected() -> dict:
    require_shared_models()
    return rs.load_expected()


def compare(outcome: Outcome, want: dict, compare_ids: bool) -> str | None:
    """None when `outcome` is what transformers produced, else the kind of difference."""
    if "error" in want:
        if outcome.error is None:
            return "error"
        message = rs.raised_message(want["error"])
        return None if message is None or message in outcome.error else "error"
    if outcome.error is not None:
        return "error"
    if outcome.text != want["text"]:
        return "text"
    if compare_ids and (rs.ids_digest(list(outcome.ids or ())) != want["ids"] or len(outcome.ids or ()) != want["n_ids"]):
        return "ids"
    return None


def known_cases(target_id: str) -> tuple[set[str], str | None]:
    entry = KNOWN.get(target_id)
    if entry is None:
        return set(), None
    if entry["cases"] == "*":
        names = {c.name for c in CONVERSATIONS}
    elif entry["cases"] == "*tools":
        names = {c.name for c in CONVERSATIONS if c.tools_json}
    else:
        names = set(entry["cases"])
    return names - set(entry.get("except", [])), entry["kind"]


def diff_excerpt(want: str, got: str) -> str:
    i = next((k for k, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
    return f"first difference at char {i}:\n  transformers: {want[max(0, i - 80) : i + 80]!r}\n  sidecar:      {got[max(0, i - 80) : i + 80]!r}"


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.id)
def test_native_matches_transformers(target: rs.Target, renderers: Renderers, expected: dict) -> None:
    outcomes = renderers.outcomes_for("native", target)
    known, known_kind = known_cases(target.id)
    problems = []
    for conv in CONVERSATIONS:
        want = expected[target.id][conv.name]
        got = outcomes[conv.name]
        kind = compare(got, want, target.compare_ids)
        if kind is None:
            count_parity("render:native-vs-transformers", cases=1, **({"errors_matched": 1} if "error" in want else {"equal": 1}))
            if conv.name in known:
                problems.append(f"{conv.name}: listed in known_mismatches.json but now matches; remove it")
            continue
        if conv.name in known and kind == known_kind:
            count_parity("render:native-vs-transformers", cases=1, known_mismatches=1)
            continue
        detail = ""
        if kind == "text":
            detail = diff_excerpt(want["text"], got.text or "")
        elif kind == "error":
            detail = f"transformers: {want.get('error')!r}; sidecar: {got.error!r}"
        elif kind == "ids":
            detail = f"{want['n_ids']} ids expected, {len(got.ids or ())} produced"
        problems.append(f"{conv.name}: {kind} differs. {detail}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.id)
def test_reference_agrees_with_native(target: rs.Target, renderers: Renderers, expected: dict) -> None:
    native = renderers.outcomes_for("native", target)
    reference = renderers.outcomes_for("reference", target)
    problems = []
    for conv in CONVERSATIONS:
        n, r = native[conv.name], reference[conv.name]
        if n.same_as(r):
            count_parity("render:reference-vs-native", cases=1, agree=1)
            continue
        want = expected[target.id][conv.name]
        native_right = compare(n, want, target.compare_ids) is None
        reference_right = compare(r, want, target.compare_ids) is None
        if native_right and not reference_right:
            count_parity("render:reference-vs-native", cases=1, only_native_exact=1)
            continue  # a limit of the minijinja Python binding (COMPATIBILITY.md), native is exact
        problems.append(f"{conv.name}: native {n.error or (n.text or '')[:120]!r} != reference {r.error or (r.text or '')[:120]!r}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.id)
def test_cache_gives_the_same_ids(target: rs.Target, renderers: Renderers) -> None:
    if not target.compare_ids:
        pytest.skip("text-only target")
    cached = renderers.outcomes_for("native", target)
    problems = []
    for fast in (True, False):
        renderer = renderers.get("native", target.model, fast=fast)
        for conv in CONVERSATIONS:
            without = render(renderer, target, conv, use_cache=False)
            again = render(renderer, target, conv)  # warm: the same prompt, every segment a hit
            for label, other in (("cold cache", cached[conv.name]), ("warm cache", again)):
                count_parity("render:cache-vs-no-cache", cases=1)
                if without.error is None and other.ids != without.ids:
                    problems.append(f"{conv.name} ({'fastokens' if fast else 'tokenizers'} encoder, {label}): ids differ")
    assert not problems, "\n".join(problems)


def test_template_variables_match_transformers(renderers: Renderers, expected: dict) -> None:
    from sidecar.chat_template import template_variables
    from sidecar.model_config import ModelConfig

    recorded = expected["_meta"]["special_tokens_map"]
    for model, want in recorded.items():
        directory = rs.model_dir(require_shared_models(), model, renderers.scratch)
        got = dict(template_variables(ModelConfig.from_dir(directory).tokenizer_config))
        assert got == want, model


def test_content_format_native_matches_reference(renderers: Renderers) -> None:
    from sidecar.backend import RendererSettings
    from sidecar.native import NativeRenderer
    from sidecar.reference.template_analysis import content_format, rewrite

    from sidecar.native import NativeTokenizer

    tokenizer = NativeTokenizer.from_dir(rs.model_dir(require_shared_models(), rs.NEUTRAL, renderers.scratch))
    formats = {}
    for target in TARGETS:
        source = target.source
        if source is None:
            from sidecar.model_config import ModelConfig

            source = ModelConfig.from_dir(require_shared_models() / target.model).chat_templates["default"]
        native = NativeRenderer([("t", source)], [], tokenizer, RendererSettings(cache_bytes=0)).content_formats.get("t")
        formats[target.id] = native
        if native is not None:
            assert native == content_format(rewrite(source)), target.id
    # The suite covers both formats.
    assert {"string", "openai"} <= set(formats.values())


def test_recorded_outputs_are_transformers(renderers: Renderers, expected: dict) -> None:
    """Re-runs transformers live on a sample and compares with the recorded file."""
    from tests.render import generate_expected as gen

    gen.pin_clock()
    tf = gen.Transformers(renderers.scratch)
    sample = [t for t in TARGETS if t.id == "qwen3/default"]
    sample += [t for t in TARGETS if t.model == rs.NEUTRAL][::9]
    assert len(sample) >= 8
    for target in sample:
        for conv in CONVERSATIONS:
            assert gen.expected_for(tf, target, conv) == expected[target.id][conv.name], (target.id, conv.name)


def test_suite_size() -> None:
    require_shared_models()
    assert len(CONVERSATIONS) >= 40
    ids = {t.id for t in TARGETS}
    jinja_files = list((SHARED_MODELS / "templates" / "llama.cpp").glob("*.jinja"))
    assert sum(1 for t in ids if t.startswith("llama.cpp/")) == len(jinja_files) >= 70
    assert "smg/kimi_k25.chat_template" in ids
