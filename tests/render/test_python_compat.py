"""Python rules the native renderer reimplements (str whitespace and line breaks, `repr` of strings,
`dictsort`/`sort` ordering, `int`/`float`, `escape`), checked on the snippets of
tests/data/render/python_compat/cases.json against what transformers rendered for them
(tests/render/generate_python_compat.py)."""

from __future__ import annotations

import json
import random
import re

import pytest

import tests.render.support as rs
from sidecar.backend import RenderOptions
from sidecar.errors import InvalidArgument

pytestmark = pytest.mark.parity

CASES = json.loads((rs.DATA / "python_compat" / "cases.json").read_text(encoding="utf-8"))["cases"]


@pytest.fixture(scope="module")
def renderer():  # noqa: ANN201
    return rs.bare_renderer("native")


@pytest.fixture(scope="module")
def reference():  # noqa: ANN201
    return rs.bare_renderer("reference")


def check_case(renderer, case: dict) -> None:  # noqa: ANN001
    opts = RenderOptions(
        messages_json='[{"role": "user", "content": "x"}]',
        chat_template_kwargs_json=json.dumps(case["variables"], ensure_ascii=False),
        chat_template=case["template"], allow_request_template=True, return_text=True, return_token_ids=False,
    )
    if "error" in case:
        # A template that fails in Jinja2 fails the request as a bad argument, as template errors do.
        with pytest.raises(InvalidArgument):
            renderer.render(opts)
    else:
        assert renderer.render(opts).text == case["expected"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_native_renders_what_transformers_renders(renderer, case: dict) -> None:  # noqa: ANN001
    check_case(renderer, case)


#: Cases whose rule is a source rewrite, which the reference backend applies too (the other rules
#: are native only, see COMPATIBILITY.md "Reference backend limits").
REFERENCE_CASES = [c for c in CASES if c["name"].startswith("newlines_")]


@pytest.mark.parametrize("case", REFERENCE_CASES, ids=[c["name"] for c in REFERENCE_CASES])
def test_reference_renders_what_transformers_renders(reference, case: dict) -> None:  # noqa: ANN001
    check_case(reference, case)


ALPHABET = " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2028\u2029\u3000\u200b\u200d\ufeff\xad\U000f0000ab_Aé'\"\\ǆßΣσﬁᾳ٣ʰ-."


def random_text(rng: random.Random) -> str:
    return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 16)))


def test_str_rules_match_python_on_random_text(renderer) -> None:  # noqa: ANN001
    """The Python methods themselves are the reference here: Jinja2's `trim` is `str.strip()`,
    its `wordcount` counts `\\w+`, and `{{ [s] }}` prints `repr(s)`."""
    rng = random.Random(11)
    texts = [random_text(rng) for _ in range(300)]
    parts = [
        ("{{ s.strip() }}", lambda s: s.strip()), ("{{ s.lstrip() }}", lambda s: s.lstrip()),
        ("{{ s.rstrip() }}", lambda s: s.rstrip()), ("{{ s|trim }}", lambda s: s.strip()),
        ("{{ s.split() }}", lambda s: str(s.split())), ("{{ s.split(none, 2) }}", lambda s: str(s.split(None, 2))),
        ("{{ s.splitlines() }}", lambda s: str(s.splitlines())),
        ("{{ s.splitlines(true) }}", lambda s: str(s.splitlines(True))),
        ("{{ s.isspace() }}", lambda s: str(s.isspace())), ("{{ s.title() }}", lambda s: s.title()),
        ("{{ s|wordcount }}", lambda s: str(len(re.findall(r"\w+", s)))), ("{{ [s] }}", lambda s: str([s])),
    ]
    template = "\x02".join(t for t, _ in parts)
    for s in texts:
        opts = RenderOptions(
            messages_json='[{"role": "user", "content": "x"}]', chat_template_kwargs_json=json.dumps({"s": s}),
            chat_template=template, allow_request_template=True, return_text=True, return_token_ids=False,
        )
        assert renderer.render(opts).text.split("\x02") == [f(s) for _, f in parts], repr(s)
