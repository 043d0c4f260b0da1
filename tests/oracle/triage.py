"""Lists where the native parsers and vLLM 0.33 disagree on the oracle's cases, with the deliberate
difference rule each disagreement appears to be (tests/data/parse_oracle/differences.json has the
rules). Run by hand with the project's venv, after building the test library:

    .venv/bin/python tests/oracle/triage.py [INPUT ...]          # print the disagreements
    .venv/bin/python tests/oracle/triage.py --write [INPUT ...]  # (re)write differences.json entries

The rule a disagreement gets is only a proposal: every entry is reviewed before it is committed
(a wrong parse can also look like a difference). `--write` keeps the file's rules and the entries
of inputs not named, and replaces the entries of the named inputs (all when none is named) with
the current results. An unclassified disagreement is printed and not written: fix the parser, or
add a rule.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.parse import harness, oracle  # noqa: E402

RULE_ORDER = [
    "vllm_error", "no_injected_text", "prompt_honoured", "harmony_reads_both", "cut_off_call",
    "unclosed_reasoning", "call_in_reasoning", "no_invented_call", "broken_call", "text_kept",
    "undeclared_tool_kept", "vllm_stream_agrees", "whole_output_rejected", "missing_close_tag",
    "call_dropped", "call_text_repeated", "empty_arguments_object",
]


def propose(run: oracle.Run, case: dict, mine: dict, modes: dict) -> str | None:
    """The rule named by hand for the case (oracle.MANUAL_RULES), else the first rule (in
    RULE_ORDER) whose check holds."""
    manual = oracle.MANUAL_RULES.get((run.input, run.key, case["id"]))
    if manual is not None:
        return manual
    for rule in RULE_ORDER:
        if oracle.check_rule(rule, run, case, mine, modes) is None:
            return rule
    return None


def main(argv: list[str]) -> int:
    write = "--write" in argv
    only = [a for a in argv if not a.startswith("--")]
    runs = list({(r.input, r.key): r for r in oracle.all_runs()}.values())
    entries, unclassified = [], 0
    for run in runs:
        if only and run.input not in only:
            continue
        for case in oracle.load_input(run.input)["cases"]:
            harness_case = oracle.case_of(run, case)
            mine = oracle.ours(harness.checked_runs(harness_case, oracle.chunkings(harness_case)))
            modes = oracle.vllm_modes(run, case["id"])
            if mine == modes["non_stream"]:
                continue
            rule = propose(run, case, mine, modes)
            print(f"--- {run.input} {run.key} {case['id']}: {rule or 'UNCLASSIFIED'}")
            print(f"  text {case['text']!r}\n  ours {json.dumps(mine, ensure_ascii=False)}")
            print(f"  vLLM {json.dumps(modes['non_stream'], ensure_ascii=False)}")
            if rule is None:
                unclassified += 1
                continue
            entries.append({"input": run.input, "run": run.key, "case": case["id"], "rule": rule, "ours": mine})
    if write:
        data = json.loads(oracle.DIFFERENCES.read_text(encoding="utf-8"))
        kept = [e for e in data["cases"] if only and e["input"] not in only]
        data["cases"] = sorted(kept + entries, key=lambda e: (e["input"], e["run"], e["case"]))
        oracle.DIFFERENCES.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{len(entries)} differences, {unclassified} unclassified")
    return 1 if unclassified else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
