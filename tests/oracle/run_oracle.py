"""Runs vLLM's and SGLang's own parsers on the written outputs and writes the expected results.

Run by hand in the scratch venv (see README.md):
    HF_HUB_OFFLINE=1 /work/oracle-venv/bin/python tests/oracle/run_oracle.py [FORMAT ...]
Reads tests/data/parse_oracle/inputs/<format>.json, writes
tests/data/parse_oracle/expected/<engine>/<kind>/<format>/<parser-name>.json (kind = tool |
reasoning, as vLLM registers glm45, kimi_k2, mistral, ... in both registries; one folder per
input file, as some names parse several inputs, e.g. mistral pre-v11 and v11).
"""
import argparse
import datetime
import json
import logging
import os
import re
import sys
import traceback
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
warnings.filterwarnings("ignore")

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "data" / "parse_oracle"
sys.path.insert(0, str(HERE))

import chartok  # noqa: E402

MODES = {"non_stream": None, "stream_1": 1, "stream_3": 3}
SAME = "same as non_stream"
DEFAULT_PROMPT = "user: hi\nassistant: "
RANDOM_IDS = [re.compile(p) for p in (r"^chatcmpl-tool-[0-9a-f-]{8,36}$", r"^call_(\d+_)?[0-9a-f]{8,32}$",
                                      r"^[A-Za-z0-9]{9}$")]


def _id(value):
    if value is None:
        return None
    return "<random>" if any(p.match(value) for p in RANDOM_IDS) else value


def _tidy(result):
    """Absent content/reasoning become "", ids that are random become "<random>"."""
    calls = []
    for c in result["tool_calls"]:
        call = {"name": c["name"], "arguments": c["arguments"]}
        if c.get("id") is not None:
            call["id"] = _id(c["id"])
        if c.get("name_deltas", 1) != 1:
            call["name_deltas"] = c["name_deltas"]
        calls.append(call)
    out = {"content": result["content"] or "", "reasoning": result["reasoning"] or "",
           "tool_calls": calls}
    if result.get("server_swallowed_error"):
        out["server_swallowed_error"] = result["server_swallowed_error"]
    return out


def _error(exc):
    last = traceback.extract_tb(exc.__traceback__)[-1]
    where = f"{Path(last.filename).name}:{last.lineno}"
    return {"error": f"{type(exc).__name__}: {str(exc)[:300]}", "raised_at": where}


def _fold(row):
    """A streaming result equal to the non-streaming one is written as SAME (keeps files small)."""
    for mode in MODES:
        if mode != "non_stream" and row.get(mode) == row.get("non_stream"):
            row[mode] = SAME
    return row


def _dump(body):
    """One result row per line: small diffs when an engine changes one case."""
    head = {k: v for k, v in body.items() if k != "results"}
    text = json.dumps(head, ensure_ascii=False, indent=1)
    if "results" not in body:
        return text + "\n"
    rows = ",\n  ".join(json.dumps(r, ensure_ascii=False) for r in body["results"])
    return text[:-2] + ',\n "results": [\n  ' + rows + "\n ]\n}\n"


def _chunks(tokenizer, text, per):
    """Deltas of `per` tokens. With a real (byte-level) tokenizer the delta text is the growth of
    the decoded prefix, holding back an incomplete UTF-8 character as an incremental
    detokenizer does."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    if getattr(tokenizer, "_oracle_chartok", True):
        ids, pieces = chartok.token_strings(tokenizer, text)
        out = [("".join(pieces[i:i + per]), ids[i:i + per]) for i in range(0, len(ids), per)]
        return out or [("", [])]
    out, sent = [], ""
    for i in range(0, len(ids), per):
        full = tokenizer.decode(ids[:i + per], skip_special_tokens=False)
        if full.endswith("\ufffd") and i + per < len(ids):
            out.append(("", ids[i:i + per]))
            continue
        out.append((full[len(sent):], ids[i:i + per]))
        sent = full
    if sent != text:
        raise ValueError(f"tokenizer does not round-trip {text!r}")
    return out or [("", [])]


def _case_view(spec, case):
    view = dict(case)
    view.setdefault("tools", spec.get("tools"))
    view.setdefault("model_type", spec.get("model_type"))
    prompt = case.get("prompt")
    if prompt is None:
        prompt = spec.get("prompt", DEFAULT_PROMPT)
        if case.get("prompt_in_reasoning"):
            prompt += spec["reasoning_start"]
    view["prompt"] = prompt
    return view


def _tokenizer(spec):
    if spec.get("tokenizer"):
        from transformers import PreTrainedTokenizerFast

        path = (HERE.parent.parent / spec["tokenizer"]).resolve()
        os.environ.setdefault("TIKTOKEN_ENCODINGS_BASE", str(path.parent))
        tok = PreTrainedTokenizerFast(tokenizer_file=str(path))
        tok._oracle_chartok = False
        return tok
    texts = [c["text"] for c in spec["cases"]] + [DEFAULT_PROMPT, spec.get("prompt", "")]
    texts += [c.get("prompt") or "" for c in spec["cases"]]
    tok = chartok.build(texts, spec["special_tokens"])
    if spec.get("response_template"):
        # Where vLLM's and SGLang's resolve_response_template look (tokenizer_config.json's key).
        tok.init_kwargs["response_template"] = spec["response_template"]
    return tok


def _pair(spec, entry):
    """A `parsers` entry is a name of the input's kind or {"tool": ..., "reasoning": ...}."""
    if isinstance(entry, dict):
        return entry.get("tool"), entry.get("reasoning")
    return (entry, None) if spec["kind"] == "tool" else (None, entry)


def run_vllm(spec, entry, tokenizer):
    import engine_vllm

    tool, reasoning = _pair(spec, entry)
    cls = engine_vllm.parser_class(tool, reasoning, tokenizer, harmony=spec.get("harmony", False))
    results = []
    for case in spec["cases"]:
        view = _case_view(spec, case)
        prompt_ids = tokenizer.encode(view["prompt"], add_special_tokens=False)
        output_ids = tokenizer.encode(view["text"], add_special_tokens=False)
        finish = case.get("finish_reason", "stop")
        row = {"id": case["id"]}
        for mode, per in MODES.items():
            try:
                if per is None:
                    res = engine_vllm.run_non_stream(cls, tokenizer, view, prompt_ids, output_ids)
                else:
                    res = engine_vllm.run_stream(cls, tokenizer, view, prompt_ids,
                                                 _chunks(tokenizer, view["text"], per), finish)
                row[mode] = _tidy(res)
            except Exception as exc:  # recorded, not dropped
                row[mode] = _error(exc)
        results.append(_fold(row))
    return f"{cls.__mro__[1].__module__}", results


def run_sglang(spec, entry, tokenizer):
    import engine_sglang

    tool, reasoning = _pair(spec, entry)
    results = []
    for case in spec["cases"]:
        view = _case_view(spec, case)
        row = {"id": case["id"]}
        for mode, per in MODES.items():
            try:
                if per is None:
                    res = engine_sglang.run_non_stream(tool, reasoning, tokenizer, view)
                else:
                    res = engine_sglang.run_stream(tool, reasoning, tokenizer, view,
                                                   _chunks(tokenizer, view["text"], per))
                row[mode] = _tidy(res)
            except Exception as exc:
                row[mode] = _error(exc)
        results.append(_fold(row))
    return None, results


def _versions():
    import sglang
    import vllm

    return {"vllm": vllm.__version__, "sglang": sglang.__version__}


def run_format(path, today, versions):
    spec = json.loads(path.read_text())
    tokenizer = _tokenizer(spec)
    summary = {}
    for engine, names in spec["parsers"].items():
        first = {}
        for entry in names:
            runner = run_vllm if engine == "vllm" else run_sglang
            tool, reasoning = _pair(spec, entry)
            name = "+".join(n for n in (tool, reasoning) if n)
            kind = "combined" if tool and reasoning else ("tool" if tool else "reasoning")
            try:
                _, results = runner(spec, entry, tokenizer)
            except Exception as exc:
                results = [{"id": "*", "non_stream": _error(exc)}]
            provenance = {"engine": engine, "engine_version": versions[engine], "parser": name,
                          "tool_parser": tool, "reasoning_parser": reasoning, "kind": kind, "format": spec["format"],
                          "input": f"inputs/{path.name}", "modes": list(MODES),
                          "generated": today, "generator": "tests/oracle/run_oracle.py",
                          "tokenizer": spec.get("tokenizer") or "per-character (parsers.md 7.2)"}
            body = {"provenance": provenance}
            key = json.dumps(results, sort_keys=True)
            if key in first:
                body["same_as"] = first[key]
            else:
                first[key] = name
                body["results"] = results
            out = DATA / "expected" / engine / kind / path.stem / f"{name}.json"
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(_dump(body))
            summary[f"{engine}/{kind}/{name}"] = _count(results)
    return summary


def _count(results):
    errors = sum(1 for r in results for m in MODES if "error" in r.get(m, {}))
    split = sum(1 for r in results if any(r.get(m) not in (SAME, None) for m in MODES if m != "non_stream"))
    return {"cases": len(results), "errors": errors, "stream_differs": split}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("formats", nargs="*", help="input file stems; default all")
    args = ap.parse_args()
    logging.disable(logging.CRITICAL)
    today = datetime.date.today().isoformat()
    versions = _versions()
    paths = sorted((DATA / "inputs").glob("*.json"))
    if args.formats:
        paths = [p for p in paths if p.stem in args.formats]
    for path in paths:
        for key, counts in run_format(path, today, versions).items():
            print(f"{path.stem:18s} {key:40s} {counts}")


if __name__ == "__main__":
    main()
