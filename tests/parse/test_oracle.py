"""The native parsers against vLLM 0.33's own (tests/data/parse_oracle): every case of every input
of every implemented parser, fed in seven chunkings through the native multiplexer, keeps the
stream invariants (no character lost or duplicated, delta shape, attribution) and ends in vLLM's
non-streaming result, or in the result a deliberate difference in differences.json pins, whose
rule must hold. The summary lists agreement per input and parser (`oracle:<input>:<parser>`).

Aliases of one parser share its results (the oracle checked they are identical), so each input
runs once per registry row; a parser a colleague marks implemented is picked up here unchanged.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import count_parity, require_shared_models
from tests.parse import harness, oracle

RUNS = list({(r.input, r.key): r for r in oracle.all_runs()}.values())
CASES = [(run, c) for run in RUNS for c in oracle.load_input(run.input)["cases"]]


@pytest.mark.models
@pytest.mark.parity
@pytest.mark.parametrize("run,oracle_case", CASES, ids=[f"{r.input}:{r.key}:{c['id']}" for r, c in CASES])
def test_oracle_case(run: oracle.Run, oracle_case: dict) -> None:
    require_shared_models()
    case = oracle.case_of(run, oracle_case)
    mine = oracle.ours(harness.checked_runs(case, oracle.chunkings(case)))
    modes = oracle.vllm_modes(run, oracle_case["id"])
    entry = oracle.difference(run, oracle_case["id"])
    area = f"oracle:{run.input}:{run.key}"
    shown = json.dumps(mine, ensure_ascii=False)
    if entry is None:
        assert mine == modes["non_stream"], (
            f"differs from vLLM and is not a listed difference\nours: {shown}\nvLLM: "
            f"{json.dumps(modes['non_stream'], ensure_ascii=False)}"
        )
        count_parity(area, cases=1, equal=1)
        count_parity("oracle:all", cases=1, equal=1)
        return
    assert mine != modes["non_stream"], "listed as a difference but equals vLLM: drop the entry"
    assert entry["ours"] == mine, f"differs from the listed result\nours:   {shown}\nlisted: {entry['ours']}"
    why_not = oracle.check_rule(entry["rule"], run, oracle_case, mine, modes)
    assert why_not is None, f"rule {entry['rule']!r} does not hold: {why_not}"
    count_parity(area, cases=1, deliberate=1)
    count_parity("oracle:all", cases=1, deliberate=1)


def test_differences_are_current() -> None:
    """Every listed difference names a rule of the file, a case that exists and a parser run that
    is tested (a stale entry fails here, a changed one in its case)."""
    data = oracle.differences()
    tested = {(r.input, r.key) for r in RUNS}
    for entry in data["cases"]:
        where = f"{entry['input']}:{entry['run']}:{entry['case']}"
        assert entry["rule"] in data["rules"], f"{where}: unknown rule {entry['rule']!r}"
        assert (entry["input"], entry["run"]) in tested, f"{where}: no implemented run"
        ids = {c["id"] for c in oracle.load_input(entry["input"])["cases"]}
        assert entry["case"] in ids, f"{where}: no such case"
    for name, rule in data["rules"].items():
        assert rule.get("reason"), f"rule {name} has no reason"
