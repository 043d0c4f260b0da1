"""Probes every implemented parser for a per-step cost that grows with the text it holds back.

For each registry row: each marker (and the marker followed by the start of a call in a few
shapes), then SMALL or BIG one-token units of one kind, fed one token per step through
`sc_parse_bench` (the native core, no FFI per step). A cost per token at BIG units more than
`--ratio` times the cost at SMALL is printed: a stage that reads its held-back text again at every
step shows about BIG/SMALL. Not part of `make bench` (all rows take about 25 minutes on two cores);
run it after changing a parser:

    .venv/bin/python -m bench.parse_waits [--small 10000 --big 40000] [PARSER ...]

Timing on a busy machine flags a few rows by noise: measure a flagged row again alone with larger
sizes before believing it (docs/parse_stream.md, "Waits on undecided text").
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

from bench.parse import MODELS, _config, _encode

UNITS = [" ", "\n", "a", "0", "{", "[", "<", '"', "a,", '{"a": ', ", "]
CALL_STARTS = ['{"name": "', '{"name": "f", "arguments": {"x": "', '[f(x="', '{"name": "f", "arguments": {"x": ', "[",
               "f("]
PARSERS_JSON = Path(__file__).resolve().parent.parent / "sidecar" / "parsers.json"
TOOLS = json.dumps([{"type": "function", "function": {
    "name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}}])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--big", type=int, default=40_000)
    parser.add_argument("--ratio", type=float, default=2.0)
    parser.add_argument("parsers", nargs="*", help="registry names (default: every implemented row)")
    args = parser.parse_args()
    from sidecar.factory import get_backend

    backend = get_backend("native")
    model = backend.load_parse_model(backend.load_tokenizer(MODELS / "qwen3"))
    rows = json.loads(PARSERS_JSON.read_text(encoding="utf-8"))["parsers"]
    for row in rows:
        if not row["implemented"] or (args.parsers and row["name"] not in args.parsers):
            continue
        tool = row["kind"] == "tool"
        cfg = (_config(row["name"], "", TOOLS) if tool else _config("", row["name"], "")).as_dict()
        heads = [""] + row["markers"] + [m + c for m in row["markers"][:2] for c in CALL_STARTS]
        prompts = [[]] if tool or not row["markers"] else [[], _encode("qwen3", row["markers"][0])]
        worst = 0.0
        for head, unit, prompt in itertools.product(heads, UNITS, prompts):
            ids = _encode("qwen3", head) if head else []
            unit_ids = _encode("qwen3", unit)
            try:
                small, big = (min(model.bench(cfg, prompt, ids + unit_ids * n, 1, 1) for _ in range(2))
                              for n in (args.small, args.big))
            except Exception as e:  # noqa: BLE001 - a refused request (held-back limit) is reported, not fatal
                print(f"{row['name']}: {head!r} then {unit!r}: {str(e)[:100]}")
                continue
            worst = max(worst, big / small)
            if big / small > args.ratio:
                print(f"GROWS {row['name']}: {head!r} then {unit!r} (prompt {bool(prompt)}): "
                      f"{small:.0f} -> {big:.0f} ns per token", flush=True)
        print(f"{row['name']}: worst ratio {worst:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
