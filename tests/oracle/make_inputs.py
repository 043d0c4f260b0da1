"""Writes tests/data/parse_oracle/inputs/<format>.json: model outputs written per format.

Run by hand (plain Python, no engine needed):  python3 tests/oracle/make_inputs.py
Every output is written here from the format's description (parsers.md and the parser sources'
marker strings), never taken from a parser's output. A format module lists which registered
names of each engine parse it.
"""
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import formats_combined  # noqa: E402
import formats_reasoning  # noqa: E402
import formats_rtpl  # noqa: E402
import formats_tool  # noqa: E402
import formats_tool2  # noqa: E402

OUT = HERE.parent / "data" / "parse_oracle" / "inputs"


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    specs = (formats_tool.specs() + formats_tool2.specs() + formats_reasoning.specs()
             + formats_combined.specs() + formats_rtpl.specs())
    for spec in specs:
        ids = [c["id"] for c in spec["cases"]]
        assert len(ids) == len(set(ids)), spec["format"]
        path = OUT / f"{spec['format']}.json"
        path.write_text(json.dumps(spec, ensure_ascii=False, indent=1) + "\n")
        print(f"{spec['format']:20s} {len(ids):3d} cases")


if __name__ == "__main__":
    main()
