"""`--max-word-chars` refuses the same texts with the same message on both backends, in Tokenize and
in Render's prompt (cases: tests/data/word_limit/cases.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sidecar.backend import EncodeOptions, RenderOptions, RendererSettings
from sidecar.errors import ResourceExhausted
from sidecar.native import NativeBackend
from sidecar.reference import ReferenceBackend
from tests.conftest import require_shared_models

DATA = json.loads((Path(__file__).parents[1] / "data" / "word_limit" / "cases.json").read_text(encoding="utf-8"))
LIMIT = DATA["limit"]
BACKENDS = {"native": NativeBackend(), "reference": ReferenceBackend()}
# A template that writes the message as it is: the prompt is the case's text.
ECHO = "{% for m in messages %}{{ m.content }}{% endfor %}"


def _text(case: dict) -> str:
    return "".join(piece * times for piece, times in case["text"])


def _message(case: dict, field: str = "") -> str | None:
    if case["refused"] is None:
        return None
    cls, start = case["refused"]
    prefix = f"{field}: " if field else ""
    return (f"{prefix}a run of more than {LIMIT} {cls} starting at character {start} is longer than the longest word "
            f"the server encodes ({LIMIT} characters, --max-word-chars)")


@pytest.fixture(scope="module", params=sorted(BACKENDS))
def loaded(request: pytest.FixtureRequest):  # noqa: ANN201
    backend = BACKENDS[request.param]
    tokenizer = backend.load_tokenizer(require_shared_models() / "qwen3")
    renderer = backend.load_renderer([("default", ECHO)], [], tokenizer, RendererSettings(max_word_chars=LIMIT))
    return tokenizer, renderer


@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["name"])
def test_tokenize(loaded, case: dict) -> None:  # noqa: ANN001
    tokenizer, _ = loaded
    want = _message(case, "texts[1]")
    if want is None:
        tokenizer.encode_batch(["fine", _text(case)], EncodeOptions(max_word_chars=LIMIT))
        return
    with pytest.raises(ResourceExhausted) as e:
        tokenizer.encode_batch(["fine", _text(case)], EncodeOptions(max_word_chars=LIMIT))
    assert e.value.message == want


@pytest.mark.parametrize("use_cache", [False, True], ids=["uncached", "cached"])
@pytest.mark.parametrize("case", DATA["cases"], ids=lambda c: c["name"])
def test_render(loaded, case: dict, use_cache: bool) -> None:  # noqa: ANN001
    _, renderer = loaded
    opts = RenderOptions(messages_json=json.dumps([{"role": "user", "content": _text(case)}]), use_cache=use_cache)
    want = _message(case)
    if want is None:
        renderer.render(opts)
        return
    with pytest.raises(ResourceExhausted) as e:
        renderer.render(opts)
    assert e.value.message == want
