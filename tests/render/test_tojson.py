"""The `tojson` filter and value printing spell values exactly as Python does in transformers
(`json.dumps(x, ensure_ascii=False, ...)`, `str(x)`), checked against Python itself on random data."""

from __future__ import annotations

import json
import math
import random
import struct

import pytest

import tests.render.support as rs
from sidecar.backend import RenderOptions

pytestmark = pytest.mark.parity

VARIANTS = [
    ("", {}),
    ("(ensure_ascii=true)", {"ensure_ascii": True}),
    ("(true)", {"ensure_ascii": True}),  # Python fills ensure_ascii first from a positional argument
    ("(indent=2)", {"indent": 2}),
    ("(indent='\\t', sort_keys=true)", {"indent": "\t", "sort_keys": True}),
    ("(separators=[',', ':'])", {"separators": (",", ":")}),
    ("(false, 4, none, true)", {"indent": 4, "sort_keys": True}),
    ("(indent=0)", {"indent": 0}),
]


def random_float(rng: random.Random) -> float:
    kind = rng.random()
    if kind < 0.3:
        return struct.unpack("d", rng.getrandbits(64).to_bytes(8, "little"))[0]
    if kind < 0.6:
        return rng.choice([1e-7, 1.0, 1e100, 1e16, 1e15, 0.1, -0.0, 2.5e-5, 1e-4, 123456789.125, 5e-324, 1.7976931348623157e308])
    return round(rng.uniform(-1e6, 1e6), rng.randint(0, 8)) * 10 ** rng.randint(-20, 20)


def random_string(rng: random.Random) -> str:
    alphabet = 'ab "\\/\n\t\r\b\x0c\x00\x1f\x7fé中🎉<>&\u2028\u200b\''
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))


def random_value(rng: random.Random, depth: int = 0):  # noqa: ANN201
    roll = rng.random()
    if depth > 3 or roll < 0.5:
        return rng.choice([
            lambda: random_float(rng),
            lambda: rng.randint(-(2**127), 2**127 - 1) if rng.random() < 0.3 else rng.randint(-1000, 1000),
            lambda: random_string(rng),
            lambda: rng.choice([True, False, None]),
        ])()
    if roll < 0.75:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {random_string(rng): random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def finite(value) -> bool:  # noqa: ANN001
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(finite(v) for v in value)
    if isinstance(value, dict):
        return all(finite(v) for v in value.values())
    return True


@pytest.fixture(scope="module", params=["native", "reference"])
def renderer(request: pytest.FixtureRequest):  # noqa: ANN201
    return rs.bare_renderer(request.param)


def render(renderer, template: str, variables: dict) -> str:  # noqa: ANN001
    opts = RenderOptions(
        messages_json='[{"role": "user", "content": "x"}]', chat_template_kwargs_json=json.dumps(variables),
        chat_template=template, allow_request_template=True, return_text=True, return_token_ids=False,
    )
    return renderer.render(opts).text


@pytest.mark.parametrize("seed", range(6))
def test_tojson_matches_python_json_dumps(renderer, seed: int) -> None:  # noqa: ANN001
    rng = random.Random(seed)
    # Containers at the top: the reference backend's Python callbacks receive them unchanged.
    values = [v for v in ({"k": random_value(rng)} for _ in range(40)) if finite(v)]
    for args, kwargs in VARIANTS:
        template = "".join(f"{{{{ v{i}|tojson{args} }}}}\x1e" for i in range(len(values)))
        got = render(renderer, template, {f"v{i}": v for i, v in enumerate(values)}).split("\x1e")[:-1]
        kwargs = {"ensure_ascii": False, **kwargs}
        want = [json.dumps(v, **kwargs) for v in values]
        assert got == want, args


def test_floats_print_as_python_writes_them() -> None:
    renderer = rs.bare_renderer("native")
    rng = random.Random(7)
    floats = [random_float(rng) for _ in range(300)]
    floats = [f for f in floats if math.isfinite(f)]
    template = "".join(f"{{{{ f{i} }}}}|{{{{ f{i}|string }}}}|{{{{ f{i}|tojson }}}}\x1e" for i in range(len(floats)))
    got = render(renderer, template, {f"f{i}": f for i, f in enumerate(floats)}).split("\x1e")[:-1]
    assert got == [f"{f!r}|{f!r}|{json.dumps(f)}" for f in floats]
    # Containers print as Python's str() prints them.
    value = {"a": [1e-07, 1.0, "it's", None, True], "b": {"c": 1e100}}
    assert render(renderer, "{{ v }}|{{ v|string }}", {"v": value}) == f"{value}|{value}"


def test_tojson_refuses_what_python_refuses() -> None:
    # Native only: the minijinja Python binding hands undefined to Python filters as None.
    from sidecar.errors import InvalidArgument

    renderer = rs.bare_renderer("native")
    with pytest.raises(InvalidArgument):
        render(renderer, "{{ undefined_thing|tojson }}", {})
