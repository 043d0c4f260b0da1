"""Records what transformers renders for the Python-compatibility snippets of
tests/data/render/python_compat/cases.json, into its `expected` fields.

    .venv/bin/python tests/render/generate_python_compat.py

Each case is a template (with `chat_template_kwargs` as its variables) that exercises one Python
rule the native renderer reimplements: `str` whitespace and line breaks, `repr` of strings in
lists, `dictsort`/`sort` ordering, `int`/`float` conversion, `escape`, dict attributes, line breaks
in the template source, Jinja2's filters, tests and globals, arguments given twice. transformers'
`render_jinja_template` renders it on one user message, as `apply_chat_template(tokenize=False)`
does; a failure is recorded as `error` (the exception's type).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CASES = Path(__file__).resolve().parent.parent / "data" / "render" / "python_compat" / "cases.json"


def main() -> int:
    import transformers
    from transformers.utils.chat_template_utils import render_jinja_template

    data = json.loads(CASES.read_text(encoding="utf-8"))
    for case in data["cases"]:
        case.pop("expected", None)
        case.pop("error", None)
        try:
            rendered, _ = render_jinja_template(
                conversations=[[{"role": "user", "content": "x"}]],
                chat_template=case["template"], **case.get("variables", {}),
            )
            case["expected"] = rendered[0]
        except Exception as e:  # noqa: BLE001 - a failure is the expected outcome of the case
            case["error"] = type(e).__name__
    data["_meta"] = {"transformers": transformers.__version__, "python": sys.version.split()[0]}
    CASES.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(data['cases'])} cases to {CASES}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
