"""Message normalization (vLLM's and transformers' rules, COMPATIBILITY.md) on both backends, checked
against hand-written expectations in tests/data/render/normalize/cases.json. The template under
test prints what it receives: `{{ messages|tojson }}`. Tools normalization (vLLM's tool model, dumped)
likewise, against tests/data/render/normalize/tools.json, printing `{{ tools|tojson }}`.
"""

from __future__ import annotations

import json

import pytest

import tests.render.support as rs
from sidecar.backend import RenderOptions
from sidecar.errors import InvalidArgument

CASES = json.loads((rs.DATA / "normalize" / "cases.json").read_text(encoding="utf-8"))
TOOL_CASES = json.loads((rs.DATA / "normalize" / "tools.json").read_text(encoding="utf-8"))
TEMPLATES = {
    "string": "{{ messages|tojson }}",
    # A loop over a message's content makes vLLM (and the sidecar) pass content as parts.
    "openai": "{% for m in messages %}{% for p in m.content %}{% endfor %}{% endfor %}{{ messages|tojson }}",
    # Developer messages stay developer messages when the template's source names the role, in a
    # comment too (a plain substring test, as vLLM makes it).
    "string, names 'developer'": "{# 'developer' #}{{ messages|tojson }}",
}


@pytest.fixture(scope="module", params=["native", "reference"])
def renderer(request: pytest.FixtureRequest):  # noqa: ANN201
    return rs.bare_renderer(request.param)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_normalization(case: dict, renderer) -> None:  # noqa: ANN001
    messages = case.get("messages_raw") or json.dumps(case["messages"], ensure_ascii=False)
    opts = RenderOptions(
        messages_json=messages, chat_template=TEMPLATES[case["format"]], allow_request_template=True,
        add_generation_prompt=False, return_text=True, return_token_ids=False,
    )
    assert_rendered(renderer, opts, case, lambda: case.get("expected_text") or json.dumps(case["expected"], ensure_ascii=False))


@pytest.mark.parametrize("case", TOOL_CASES, ids=[c["name"] for c in TOOL_CASES])
def test_tools_normalization(case: dict, renderer) -> None:  # noqa: ANN001
    opts = RenderOptions(
        messages_json='[{"role": "user", "content": "hi"}]', tools_json=json.dumps(case["tools"], ensure_ascii=False),
        chat_template="{{ tools|tojson }}", allow_request_template=True,
        add_generation_prompt=False, return_text=True, return_token_ids=False,
    )
    assert_rendered(renderer, opts, case, lambda: json.dumps(case["expected"], ensure_ascii=False))


def assert_rendered(renderer, opts: RenderOptions, case: dict, want) -> None:  # noqa: ANN001
    """The case's error (a part of its message), or the text `want()` spells."""
    if "error" in case:
        with pytest.raises(InvalidArgument) as err:
            renderer.render(opts)
        assert case["error"] in err.value.message
        return
    assert renderer.render(opts).text == want()
