"""Writes tests/data/parse_oracle/registry.json: every registered parser name of both engines.

Run by hand in the scratch venv:  /work/oracle-venv/bin/python tests/oracle/build_registry.py
The class each name maps to and the alias groups (same class, same configuration) are read from
the installed engines; markers and the other format facts come from formats_meta.py (written from
the parser sources) and the SGLang-to-vLLM mapping is checked against the oracle results when
they exist (agreement = share of case x mode results equal between the two engines).
"""
import datetime
import json
import logging
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data" / "parse_oracle"
sys.path.insert(0, str(HERE))

import formats_meta  # noqa: E402

# SGLang's ReasoningParser.__init__ forces reasoning on for these names whatever the request says.
SGLANG_FORCED = {"qwen3-thinking", "gpt-oss", "minimax"}


def _path(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


def vllm_names():
    import vllm.reasoning as vr
    import vllm.tool_parsers as vt

    rows = []
    for kind, table in (("tool", vt._TOOL_PARSERS_TO_REGISTER), ("reasoning", vr._REASONING_PARSERS_TO_REGISTER)):
        pkg = "vllm.tool_parsers" if kind == "tool" else "vllm.reasoning"
        for name, (module, cls) in table.items():
            rows.append({"engine": "vllm", "kind": kind, "name": name, "class": f"{pkg}.{module}.{cls}",
                         "config": {}})
    return rows


def sglang_names():
    from sglang.srt.function_call.function_call_parser import FunctionCallParser
    from sglang.srt.function_call.parser_names import TOOL_CALL_PARSER_NAMES
    from sglang.srt.parser.reasoning_parser import ReasoningParser
    from sglang.srt.parser.reasoning_parser_names import REASONING_PARSER_NAMES

    rows = []
    for name in TOOL_CALL_PARSER_NAMES:
        rows.append({"engine": "sglang", "kind": "tool", "name": name,
                     "class": _path(FunctionCallParser.ToolCallParserEnum[name]), "config": {}})
    for name in REASONING_PARSER_NAMES:
        config = {"force_reasoning": True} if name in SGLANG_FORCED else {}
        rows.append({"engine": "sglang", "kind": "reasoning", "name": name,
                     "class": _path(ReasoningParser.DetectorMap[name]), "config": config})
    return rows


def _alias_groups(rows):
    groups = {}
    for r in rows:
        key = (r["engine"], r["kind"], r["class"], json.dumps(r["config"], sort_keys=True))
        groups.setdefault(key, []).append(r["name"])
    for r in rows:
        key = (r["engine"], r["kind"], r["class"], json.dumps(r["config"], sort_keys=True))
        r["same_format_as"] = [n for n in groups[key] if n != r["name"]]


def _load(engine, kind, name, stem):
    path = DATA / "expected" / engine / kind / stem / f"{name}.json"
    if not path.exists():
        return None
    body = json.loads(path.read_text())
    while "same_as" in body:
        body = json.loads((path.parent / f"{body['same_as']}.json").read_text())
    return {(r["id"], m): (r["non_stream"] if r[m] == "same as non_stream" else r[m])
            for r in body.get("results", []) for m in body["provenance"]["modes"] if m in r}


def _agreement(kind, vllm_name, sglang_name, input_stem):
    a = _load("vllm", kind, vllm_name, input_stem)
    b = _load("sglang", kind, sglang_name, input_stem)
    if not a or not b:
        return None
    keys = sorted(set(a) & set(b))
    same = sum(1 for k in keys if _strip_ids(a[k]) == _strip_ids(b[k]))
    loose = sum(1 for k in keys if _loose(a[k]) == _loose(b[k]))
    return {"input": f"inputs/{input_stem}.json", "equal": same,
            "equal_ignoring_outer_whitespace": loose, "of": len(keys)}


def _loose(result):
    """Content and reasoning compared without leading/trailing whitespace, arguments as JSON."""
    result = _strip_ids(result)
    if not isinstance(result, dict) or "tool_calls" not in result:
        return result
    calls = []
    for c in result["tool_calls"]:
        try:
            args = json.loads(c["arguments"])
        except (TypeError, ValueError):
            args = c["arguments"]
        calls.append({"name": c["name"], "arguments": args})
    return {"content": result["content"].strip(), "reasoning": result["reasoning"].strip(),
            "tool_calls": calls}


def _start_state(engine, kind, name, stem):
    """Whether output starts inside reasoning, read off the oracle results of the think-style
    inputs (non-streaming): no markers at all, the prompt ending inside the block, and the
    request switches enable_thinking=false / thinking=true|false."""
    results = _load(engine, kind, name, stem)
    if not results:
        return None

    def inside(case):
        r = results.get((case, "non_stream"))
        if r is None:
            return None
        if not isinstance(r, dict) or "reasoning" not in r:
            return "error"
        return bool(r["reasoning"])

    if ("no_markers", "non_stream") not in results:
        return None

    return {"input": stem, "plain_output_is_reasoning": inside("no_markers"),
            "prompt_ending_inside_block_is_honoured": inside("prompt_in_reasoning"),
            "enable_thinking_false_gives_reasoning": inside("thinking_disabled"),
            "enable_thinking_true_gives_reasoning": inside("enable_thinking_true"),
            "reasoning_effort_high_gives_reasoning": inside("reasoning_effort_high"),
            "thinking_true_gives_reasoning": inside("thinking_kwarg_true"),
            "thinking_false_gives_reasoning": inside("thinking_kwarg_false")}


def _strip_ids(result):
    if not isinstance(result, dict) or "tool_calls" not in result:
        return result
    calls = [{k: v for k, v in c.items() if k != "id"} for c in result["tool_calls"]]
    return {**result, "tool_calls": calls}


def _agree_text(rows, fmt):
    parts = []
    for r in rows:
        a = r.get("oracle_agreement_with_vllm")
        if r["format"] == fmt and r["engine"] == "sglang" and a:
            parts.append(f"{r['name']} {a['equal']}/{a['of']} ({a['equal_ignoring_outer_whitespace']})")
    return ", ".join(parts)


def write_formats_md(registry):
    """The summary table of FORMATS.md between its GENERATED markers (the prose is by hand)."""
    path = HERE / "FORMATS.md"
    lines = ["| format | kind | vLLM names | SGLang names | markers | schema-typed | SGLang = vLLM (equal/of, ignoring outer whitespace) |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for fmt, info in registry["formats"].items():
        markers = info.get("markers")
        markers = " ".join(f"`{m}`" for m in markers) if isinstance(markers, list) else (markers or "")
        schema = info.get("schema", "")
        schema = {True: "yes", False: "no", None: ""}.get(schema, schema) if not isinstance(schema, str) else schema
        lines.append(f"| {fmt} | {info['kind']} | {', '.join(info.get('vllm', []))} | {', '.join(info.get('sglang', []))} | "
                     f"{markers.replace('|', '&#124;')} | {schema} | {_agree_text(registry['names'], fmt)} |")
    table = "\n".join(lines)
    text = path.read_text() if path.exists() else "<!-- GENERATED -->\n<!-- /GENERATED -->\n"
    head, rest = text.split("<!-- GENERATED -->", 1)
    tail = rest.split("<!-- /GENERATED -->", 1)[1]
    path.write_text(f"{head}<!-- GENERATED -->\n{table}\n<!-- /GENERATED -->{tail}")


def main():
    logging.disable(logging.CRITICAL)
    import sglang
    import vllm

    rows = vllm_names() + sglang_names()
    _alias_groups(rows)
    meta = formats_meta.FORMATS
    by_name = {}
    for fmt, info in meta.items():
        for engine in ("vllm", "sglang"):
            for name in info.get(engine, []):
                key = (engine, info["kind"], name)
                assert key not in by_name, f"{key} in {fmt} and {by_name.get(key)}"
                by_name[key] = fmt
    for r in rows:
        r["format"] = by_name.get((r["engine"], r["kind"], r["name"]))
        if r["engine"] == "sglang" and r["format"]:
            info = meta[r["format"]]
            vnames = info.get("vllm", [])
            r["vllm_equivalent"] = vnames[0] if vnames else None
            if vnames and info.get("oracle_input"):
                r["oracle_agreement_with_vllm"] = _agreement(r["kind"], vnames[0], r["name"], info["oracle_input"])
    for r in rows:
        if r["kind"] == "reasoning":
            state = _start_state(r["engine"], "reasoning", r["name"], meta[r["format"]].get("oracle_input") or "")
            if state:
                r["start_state_observed"] = state
    missing = [f"{r['engine']}/{r['kind']}/{r['name']}" for r in rows if not r["format"]]
    formats = {k: {kk: vv for kk, vv in v.items()} for k, v in meta.items()}
    counts = {f"{e}_{k}": sum(1 for r in rows if r["engine"] == e and r["kind"] == k)
              for e in ("vllm", "sglang") for k in ("tool", "reasoning")}
    out = {"provenance": {"engines": {"vllm": vllm.__version__, "sglang": sglang.__version__},
                          "generated": datetime.date.today().isoformat(),
                          "generator": "tests/oracle/build_registry.py",
                          "sources": ["vllm/tool_parsers/__init__.py", "vllm/reasoning/__init__.py",
                                      "sglang/srt/function_call/parser_names.py",
                                      "sglang/srt/parser/reasoning_parser_names.py",
                                      "tests/oracle/formats_meta.py"]},
           "counts": counts, "names_without_format": missing, "formats": formats, "names": rows}
    (DATA / "registry.json").write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n")
    write_formats_md(out)
    print(counts, "without format:", len(missing))
    for m in missing:
        print("  ", m)


if __name__ == "__main__":
    main()
