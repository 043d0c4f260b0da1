"""Python rules the native renderer reimplements (str whitespace and line breaks, `repr` of strings,
`dictsort`/`sort` ordering, `int`/`float`, `escape`), checked on the snippets of
tests/data/render/python_compat/cases.json against what transformers rendered for them
(tests/render/generate_python_compat.py)."""

from __future__ import annotations

import json

import pytest

import tests.render.support as rs
from sidecar.backend import RenderOptions
from sidecar.errors import SidecarError

pytestmark = pytest.mark.parity

CASES = json.loads((rs.DATA / "python_compat" / "cases.json").read_text(encoding="utf-8"))["cases"]


@pytest.fixture(scope="module")
def renderer():  # noqa: ANN201
    return rs.bare_renderer("native")


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_native_renders_what_transformers_renders(renderer, case: dict) -> None:  # noqa: ANN001
    opts = RenderOptions(
        messages_json='[{"role": "user", "content": "x"}]',
        chat_template_kwargs_json=json.dumps(case["variables"], ensure_ascii=False),
        chat_template=case["template"], allow_request_template=True, return_text=True, return_token_ids=False,
    )
    if "error" in case:
        with pytest.raises(SidecarError):
            renderer.render(opts)
    else:
        assert renderer.render(opts).text == case["expected"]
