"""Every case of tests/data/parse/<format>/cases.json, in every chunking, against its expectation."""

from __future__ import annotations

import pytest

from tests.conftest import count_parity, require_shared_models
from tests.parse.harness import check_case, load_cases

FORMATS = ["reasoning", "hermes", "qwen3_coder", "llama3_json", "mistral", "deepseek_v3", "deepseek_v31", "deepseek_v32", "minimax_m2", "glm45", "kimi_k2", "openai", "pythonic"]
CASES = [case for fmt in FORMATS for case in load_cases(fmt)]


@pytest.mark.models
@pytest.mark.parametrize("case", CASES, ids=[f"{c['format']}:{c['name']}" for c in CASES])
def test_case(case: dict) -> None:
    require_shared_models()
    runs = check_case(case)["runs"]
    count_parity(f"parse:{case['format']}", cases=1, chunked_runs=runs)
    count_parity("parse:all", cases=1, chunked_runs=runs)
