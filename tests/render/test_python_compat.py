"""Python rules the native renderer reimplements (str whitespace and line breaks, `repr` of strings,
`dictsort`/`sort` ordering, `int`/`float`, `escape`, line breaks in the source, Jinja2's filters,
tests and globals), checked on the snippets of tests/data/render/python_compat/cases.json against
what transformers rendered for them (tests/render/generate_python_compat.py), and `str` methods,
`format`, `wordwrap`, `pprint` and `striptags` against Python itself on random input."""

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


def random_method_call(rng: random.Random, s: str) -> tuple[str, dict, object]:
    """A `str` method call on `s` with random arguments: its template, variables and the Python
    call (which may raise, as the render then must fail)."""
    sub = random_text(rng)[: rng.randint(0, 2)] if rng.random() < 0.7 else rng.choice([None, 1, ("a", "b")])
    bound = lambda: rng.choice([None, rng.randint(-20, 20), rng.randint(-3, 3)])  # noqa: E731
    start, end = bound(), bound()
    n = rng.choice([rng.randint(-2, 12), rng.randint(-2, 12), True, 1.5, None])
    fill = rng.choice([" ", "*", "é", "ab", ""])
    calls = [
        ("find", [sub, start, end]), ("rfind", [sub, start, end]), ("index", [sub, start, end]),
        ("rindex", [sub, start, end]), ("count", [sub, start, end]),
        ("startswith", [sub if rng.random() < 0.8 else (sub, "a"), start, end]),
        ("endswith", [sub if rng.random() < 0.8 else (sub, "b"), start, end]),
        ("split", [sub, n]), ("rsplit", [sub, n]), ("rsplit", [None, n]), ("partition", [sub]),
        ("rpartition", [sub]), ("center", [n, fill]), ("ljust", [n, fill]), ("rjust", [n]), ("zfill", [n]),
        ("removeprefix", [sub]), ("removesuffix", [sub]), ("expandtabs", [n]), ("casefold", []),
        ("swapcase", []), ("istitle", []), ("islower", []), ("isupper", []),
    ]
    name, args = rng.choice(calls)
    args = args[: rng.randint(0 if name in ("split", "rsplit", "expandtabs") else min(1, len(args)), len(args))]
    variables = {f"a{i}": a for i, a in enumerate(args)}
    names = [f"a{i}" for i in range(len(args))]
    # Tuples arrive from JSON as lists; the template rebuilds them.
    shown = list(names)
    for i, a in enumerate(args):
        if isinstance(a, tuple):
            shown[i] = f"({names[i]}[0], {names[i]}[1])"
    if name in ("split", "rsplit") and len(args) == 2 and rng.random() < 0.5:
        shown[1] = f"maxsplit={names[1]}"
    template = "{{ s.%s(%s) }}" % (name, ", ".join(shown))
    return template, {"s": s, **variables}, lambda: str(getattr(s, name)(*args))


def test_str_methods_with_arguments_match_python_on_random_calls(renderer) -> None:  # noqa: ANN001
    """Python's `str` methods are the reference: positions in characters, `start`/`end` adjusted as
    CPython does, errors (wrong types, empty separators, missing substrings) failing the render."""
    rng = random.Random(13)
    for _ in range(3000):
        s = random_text(rng)
        template, variables, call = random_method_call(rng, s)
        assert render_one(renderer, template, variables) == python_or_none(call), (template, variables)


def test_str_format_conversions_match_python_on_random_specs(renderer) -> None:  # noqa: ANN001
    """`str.format` fields with a conversion or the `%` type, against Python's `str.format`."""
    rng = random.Random(17)
    for _ in range(500):
        value = rng.choice([0, 7, -42, 0.25, -0.5, 1e-7, 123456.789, -0.0, 2.675, True, "é'x", None, [1, "a"]])
        if rng.random() < 0.5:
            fill = rng.choice(["", "", "*", "0"]) if rng.random() < 0.5 else ""
            align = rng.choice(["", "<", ">", "^", "="]) if fill or rng.random() < 0.5 else ""
            spec = (fill + align if align else "") + rng.choice(["", "+", "-", " "]) + rng.choice(["", "z"])
            spec += rng.choice(["", "#"]) + rng.choice(["", str(rng.randint(0, 14))])
            spec += rng.choice(["", ",", "_"]) + rng.choice(["", "." + str(rng.randint(0, 4))]) + "%"
            field = "{:" + spec + "}"
        else:
            # A string field without a conversion is formatted here too (minijinja padded by bytes).
            conversion = rng.choice(["!r", "!s", "!a"] + ([""] if isinstance(value, str) else []))
            field = "{" + conversion + rng.choice(["", ":>8", ":<5", ":^7", ":.2", ":*^6.1s", ":05", ":+", ":d"]) + "}"
        text = rng.choice(["", "a ", "{{"]) + field + rng.choice(["", " b", "}}"])
        got = render_one(renderer, "{{ f.format(v) }}", {"f": text, "v": value})
        assert got == python_or_none(lambda: text.format(value)), (text, value)


def render_one(renderer, template: str, variables: dict) -> str | None:  # noqa: ANN001
    """The rendered text, or None when the render failed with INVALID_ARGUMENT."""
    opts = RenderOptions(
        messages_json='[{"role": "user", "content": "x"}]', chat_template_kwargs_json=json.dumps(variables),
        chat_template=template, allow_request_template=True, return_text=True, return_token_ids=False,
    )
    try:
        return renderer.render(opts).text
    except InvalidArgument:
        return None


def python_or_none(f) -> str | None:  # noqa: ANN001
    try:
        return f()
    except Exception:  # noqa: BLE001 - any failure is a failed render
        return None


FORMAT_NUMBERS = [0, 7, -42, 255, 10**20, -(2**70), 3.0, -2.5, 0.5, 1e-7, 123456.789, 1e22, -0.0, 2.675, 1e300,
                  float("inf"), float("nan"), True, False, 65]
FORMAT_OTHERS = ["", "é", "ab c", "x'y", "z", None, [1, "a"], {"k": 1.5}]


def random_format_spec(rng: random.Random) -> tuple[str, list]:
    """A `%` spec and arguments for it (of a fitting type most of the time)."""
    width = rng.choice(["", "", str(rng.randint(0, 12)), "*"])
    precision = rng.choice(["", "", "." + str(rng.randint(0, 8)), ".", ".*"])
    conversion = rng.choice("sdiuoxXeEfFgGcra%")
    spec = "%" + "".join(rng.sample("-+ #0", rng.randint(0, 3))) + width + precision + conversion
    if spec == "%%":
        return spec, []
    args = [rng.randint(-3, 12) for _ in range(spec.count("*"))]
    pool = FORMAT_NUMBERS if conversion in "diuoxXeEfFgGc" and rng.random() < 0.8 else FORMAT_NUMBERS + FORMAT_OTHERS
    return spec, args + [rng.choice(pool)]


def test_format_matches_python_percent_on_random_specs(renderer) -> None:  # noqa: ANN001
    """Jinja2's `format` is `str % args`: Python's `%` itself is the reference."""
    rng = random.Random(7)
    for _ in range(500):
        text, args = "", []
        for _ in range(rng.randint(1, 3)):
            spec, spec_args = random_format_spec(rng)
            text += rng.choice(["", "a", " "]) + spec
            args += spec_args
        if rng.random() < 0.1:
            args = args[1:] if rng.random() < 0.5 else args + [1]
        names = [f"a{i}" for i in range(len(args))]
        template = "{{ f|format(%s) }}" % ", ".join(names)
        got = render_one(renderer, template, {"f": text, **dict(zip(names, args))})
        assert got == python_or_none(lambda: text % tuple(args)), (text, args)


WRAP_ALPHABET = ["a", "b", "é", "1", " ", " ", "  ", "-", "--", ",", ".", "!", "\n", "\t", "\u3000", "ab-cd", "well-known"]


def test_wordwrap_matches_jinja2_on_random_text(renderer) -> None:  # noqa: ANN001
    import jinja2.sandbox

    env = jinja2.sandbox.ImmutableSandboxedEnvironment()
    template = "{{ s|wordwrap(w, b, none, h) }}"
    jinja = env.from_string(template)
    rng = random.Random(3)
    for _ in range(300):
        variables = {
            "s": "".join(rng.choice(WRAP_ALPHABET) for _ in range(rng.randint(0, 30))),
            "w": rng.randint(1, 12), "b": rng.random() < 0.7, "h": rng.random() < 0.7,
        }
        assert render_one(renderer, template, variables) == jinja.render(**variables), variables


def random_value(rng: random.Random, depth: int = 0):  # noqa: ANN201
    kind = rng.randint(0, 9 if depth < 3 else 4)
    if kind <= 1:
        return rng.choice([0, -3, 1.5, 1e-7, None, True])
    if kind <= 4:
        return " ".join("w" * rng.randint(1, 12) for _ in range(rng.randint(0, 14))) + rng.choice(["", "\n", " "])
    if kind <= 7:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 6))]
    return {rng.choice("bcaé") + "k" * rng.randint(0, 20): random_value(rng, depth + 1) for _ in range(rng.randint(0, 6))}


def test_pprint_matches_pformat_on_random_values(renderer) -> None:  # noqa: ANN001
    import pprint

    rng = random.Random(5)
    for _ in range(200):
        v = random_value(rng)
        assert render_one(renderer, "{{ v|pprint }}", {"v": v}) == pprint.pformat(v), v


STRIP_ALPHABET = ["<", ">", "<!--", "-->", "&", "&amp;", "&amp", "&lt", "&#", "&#x", "x", "3", "9", ";", "not", "in", " ", "\n", "é", "b", "-"]


def test_striptags_matches_markupsafe_on_random_text(renderer) -> None:  # noqa: ANN001
    from markupsafe import Markup

    rng = random.Random(9)
    texts = ["".join(rng.choice(STRIP_ALPHABET) for _ in range(rng.randint(0, 20))) for _ in range(300)]
    template = "\x02".join("{{ t[%d]|striptags }}" % i for i in range(len(texts)))
    got = render_one(renderer, template, {"t": texts})
    assert got is not None
    assert got.split("\x02") == [Markup(t).striptags() for t in texts]
