"""Every case of tests/data/parse/<folder>/cases.json, in every chunking, against its expectation."""

from __future__ import annotations

import pytest

from tests.conftest import count_parity, require_shared_models
from tests.parse.harness import DATA, check_case, load_cases

FOLDERS = sorted(p.parent.name for p in DATA.glob("*/cases.json"))
CASES = [case for folder in FOLDERS for case in load_cases(folder)]


@pytest.mark.models
@pytest.mark.parametrize("case", CASES, ids=[f"{c['format']}:{c['name']}" for c in CASES])
def test_case(case: dict) -> None:
    require_shared_models()
    runs = check_case(case)["runs"]
    count_parity(f"parse:{case['format']}", cases=1, chunked_runs=runs)
    count_parity("parse:all", cases=1, chunked_runs=runs)
