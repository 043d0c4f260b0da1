"""The engines' own parsers as the oracle (tests/data/parse_oracle, made by tests/oracle/): which
runs apply to which implemented parser, how a case is fed to the native multiplexer, and the
deliberate differences from vLLM (differences.json) with the check that each one names.

A run is one vLLM parser configuration of an input file (`hermes`, `qwen3_json`, `hermes+qwen3`);
it is tested as soon as every parser it names is implemented in the registry, so a format a
colleague implements is checked against the oracle without touching this file. The expected result
is vLLM 0.33's non-streaming one; a case that differs must be listed in differences.json with a
rule (each rule: a reason and a check that the difference is of that kind) and our exact result.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sidecar import parsers
from tests.conftest import REPO, TOKENIZER_MODELS, derived_model, require_shared_models
from tests.parse import harness

ORACLE = REPO / "tests" / "data" / "parse_oracle"
DIFFERENCES = ORACLE / "differences.json"
#: The prompt every oracle case ran after (tests/oracle/README.md), as text.
PROMPT = "user: hi\nassistant: "


@dataclass(frozen=True)
class Run:
    """One vLLM parser configuration of one input file."""

    input: str
    tool: str
    reasoning: str
    #: `tool`, `reasoning` or `combined` (the expected folder).
    kind: str

    @property
    def vllm_name(self) -> str:
        return f"{self.tool}+{self.reasoning}" if self.kind == "combined" else self.tool or self.reasoning

    @property
    def key(self) -> str:
        """The run by canonical names: aliases of one parser share their results. A reasoning-only
        run of a tool input (hf, beam: one name on both sides) is `none+NAME`."""
        tool = parsers.find("tool", self.tool).name if self.tool else ""
        reasoning = parsers.find("reasoning", self.reasoning).name if self.reasoning else ""
        if not tool and reasoning in _tool_names(self.input):
            tool = "none"
        return "+".join(n for n in (tool, reasoning) if n)

    def implemented(self) -> bool:
        rows = [parsers.find("tool", self.tool) if self.tool else None,
                parsers.find("reasoning", self.reasoning) if self.reasoning else None]
        named = [r for r, n in zip(rows, (self.tool, self.reasoning)) if n]
        return all(r is not None and r.implemented for r in named)


@cache
def load_input(name: str) -> dict:
    return json.loads((ORACLE / "inputs" / f"{name}.json").read_text(encoding="utf-8"))


@cache
def _tool_names(input_name: str) -> frozenset[str]:
    """Canonical names of the tool parsers an input runs (a reasoning-only run of the same name is
    told apart from them)."""
    names = set()
    for spec in load_input(input_name)["parsers"]["vllm"]:
        tool = spec.get("tool") if isinstance(spec, dict) else (spec if load_input(input_name)["kind"] == "tool" else None)
        row = parsers.find("tool", tool) if tool else None
        if row is not None:
            names.add(row.name)
    return frozenset(names)


def runs_of(input_name: str) -> list[Run]:
    data = load_input(input_name)
    out = []
    for spec in data["parsers"]["vllm"]:
        if isinstance(spec, dict):
            tool, reasoning = spec.get("tool", ""), spec.get("reasoning", "")
        elif data["kind"] == "tool":
            tool, reasoning = spec, ""
        else:
            tool, reasoning = "", spec
        kind = "combined" if tool and reasoning else ("tool" if tool else "reasoning")
        out.append(Run(input_name, tool, reasoning, kind))
    return out


def all_runs() -> list[Run]:
    """Every run of every input whose parsers are all implemented."""
    names = sorted(p.stem for p in (ORACLE / "inputs").glob("*.json"))
    return [run for name in names for run in runs_of(name) if run.implemented()]


@cache
def expected(run: Run) -> dict[str, dict]:
    """vLLM's results of a run by case id (an alias's file points at its `same_as`)."""
    folder = ORACLE / "expected" / "vllm" / run.kind / run.input
    data = json.loads((folder / f"{run.vllm_name}.json").read_text(encoding="utf-8"))
    while "same_as" in data:
        data = json.loads((folder / f"{data['same_as']}.json").read_text(encoding="utf-8"))
    return {r["id"]: r for r in data["results"]}


@cache
def _added_tokens(model: str) -> frozenset[str]:
    path = require_shared_models() / model / "tokenizer.json"
    return frozenset(t["content"] for t in json.loads(path.read_text(encoding="utf-8"))["added_tokens"])


def fitting_model(input_name: str) -> str:
    """The shared model whose vocabulary has the most of the input's markers as single tokens
    (Qwen3 on a tie, then the order of TOKENIZER_MODELS); the input's own tokenizer when it names
    one (Harmony: gpt-oss); a shared model with the input's markers added as special tokens when
    the input says `extend_model` (a vocabulary no shared model has: Hunyuan's suffixed tags).
    With none of them as tokens the markers are matched as text. An input with a
    `response_template` (hf, beam) runs on a derived model whose tokenizer_config.json carries it."""
    data = load_input(input_name)
    if data.get("tokenizer"):
        return Path(data["tokenizer"]).parent.name
    if data.get("extend_model"):
        return derived_model(data["extend_model"], data["special_tokens"], data.get("response_template"))
    markers = data.get("special_tokens", [])
    order = ["qwen3"] + [m for m in TOKENIZER_MODELS if m != "qwen3"]
    return max(order, key=lambda m: (sum(t in _added_tokens(m) for t in markers), -order.index(m)))


def case_of(run: Run, oracle_case: dict) -> dict:
    """A harness case: the model output fed as the model's tokens, with the request the oracle
    made (tools, kwargs; the prompt as text, opened reasoning included). Special tokens are kept
    in text, as vLLM's parsers (which switch skip_special_tokens off) saw them."""
    data = load_input(run.input)
    prompt = data.get("prompt", PROMPT) + (data.get("reasoning_start", "") if oracle_case.get("prompt_in_reasoning") else "")
    return {
        "name": f"{run.input}:{run.vllm_name}:{oracle_case['id']}",
        "format": run.input,
        "model": fitting_model(run.input),
        "tool_parser": run.tool,
        "reasoning_parser": run.reasoning,
        "prompt": prompt,
        "output": oracle_case["text"],
        "tools": oracle_case.get("tools", data.get("tools")),
        "kwargs": oracle_case.get("chat_template_kwargs"),
        "skip_special_tokens": False,
    }


def chunkings(case: dict) -> list[tuple[str, str, list[list[int]]]]:
    """Seven runs: the tokens all at once, one per step, one per step and an empty final step,
    random sizes; then one token per byte (every multi-byte character and text marker split)
    one per step and in random sizes, or, where the vocabulary has no byte tokens, two more random
    token splittings."""
    seqs = harness.variants(case)
    ids = seqs["tokens"]
    rng = random.Random(case["name"])

    def random_split(seq: list[int]) -> list[list[int]]:
        chunks, i = [], 0
        while i < len(seq):
            n = rng.randint(1, 5)
            chunks.append(seq[i:i + n])
            i += n
        return chunks or [[]]

    runs = [
        ("tokens", "all", [ids]),
        ("tokens", "one", [[i] for i in ids] or [[]]),
        ("tokens", "one+empty", [[i] for i in ids] + [[]]),
        ("tokens", "random", random_split(ids)),
    ]
    if "bytes" in seqs:
        runs += [("bytes", "one", [[i] for i in seqs["bytes"]]), ("bytes", "random", random_split(seqs["bytes"])),
                 ("bytes", "all", [seqs["bytes"]])]
    else:
        runs += [("tokens", "random2", random_split(ids)), ("tokens", "random3", random_split(ids)),
                 ("tokens", "pairs", [ids[i:i + 2] for i in range(0, len(ids), 2)] or [[]])]
    return runs


# ---- results ------------------------------------------------------------------------------------


def arguments(text: str):  # noqa: ANN201
    """Arguments as JSON when they parse, else the text (an incomplete or broken call)."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def ours(result: harness.Result) -> dict:
    calls = [result.calls[i] for i in sorted(result.calls)]
    return {"content": result.content, "reasoning": result.reasoning,
            "tool_calls": [{"name": c["name"], "arguments": arguments(c["arguments"])} for c in calls]}


def vllm_result(raw: dict) -> dict:
    """A vLLM result in the same shape (ids dropped), or `{"error": ...}` when vLLM raised."""
    if "error" in raw:
        return {"error": raw["error"]}
    return {"content": raw["content"], "reasoning": raw["reasoning"],
            "tool_calls": [{"name": c["name"], "arguments": arguments(c["arguments"])} for c in raw["tool_calls"]]}


def vllm_modes(run: Run, case_id: str) -> dict[str, dict]:
    """vLLM's results of a case per mode (non_stream, stream_1, stream_3)."""
    raw = expected(run)[case_id]
    out = {"non_stream": vllm_result(raw["non_stream"])}
    for mode in ("stream_1", "stream_3"):
        value = raw.get(mode)
        out[mode] = out["non_stream"] if value == "same as non_stream" or value is None else vllm_result(value)
    return out


# ---- deliberate differences ---------------------------------------------------------------------


@cache
def differences() -> dict:
    return json.loads(DIFFERENCES.read_text(encoding="utf-8"))


def difference(run: Run, case_id: str) -> dict | None:
    for entry in differences()["cases"]:
        if entry["input"] == run.input and entry["run"] == run.key and entry["case"] == case_id:
            return entry
    return None


def _subsequence(short: str, long: str) -> bool:
    it = iter(long)
    return all(c in it for c in short)


def _calls(result: dict) -> list[tuple[str, object]]:
    return [(c["name"], c["arguments"]) for c in result.get("tool_calls", [])]


#: Disagreements whose rule is specific to a format, by (input, run, case): a check cannot tell
#: them apart from a wrong parse, so each is named here (and reviewed) one by one.
MANUAL_RULES: dict[tuple[str, str, str], str] = {
    ("llama3_json", "llama3_json", "text_before"): "json_only_at_start",
    ("llama3_json", "llama3_json", "json_mid_text"): "json_only_at_start",
    ("llama3_json", "llama3_json", "text_between"): "json_only_at_start",
    ("mistral", "mistral", "separate_blocks"): "later_calls_kept",
    ("mistral", "mistral", "text_between"): "later_calls_kept",
    ("step3", "step3", "separate_blocks"): "later_calls_kept",
    ("step3", "step3", "text_between"): "later_calls_kept",
    **{(block, run, case): "later_calls_kept" for block, run in [
        ("jamba", "jamba"), ("jamba", "hunyuan_a13b"), ("phi4_mini_json", "phi4_mini_json"), ("apertus", "apertus"),
        ("lfm2", "lfm2"), ("olmo3", "olmo3")]
       for case in ("separate_blocks", "text_between")},
    ("kimi_k2", "kimi_k2", "mangled_id"): "mangled_header",
    ("qwen3_coder", "qwen3_coder", "float_for_integer"): "schema_typing",
    ("qwen3_coder", "step3p5", "float_for_integer"): "schema_typing",
    ("qwen3_coder", "step5", "float_for_integer"): "schema_typing",
    ("qwen3_coder", "mimo", "float_for_integer"): "schema_typing",
    ("mistral_v11", "mistral", "call_id"): "call_id_kept",
    ("minimax_m2", "minimax_m2", "single_quoted_name"): "quoting",
    ("deepseek_v3", "deepseek_v3", "malformed"): "fence_optional",
    ("hy_v3", "hy_v3", "typed_values"): "schema_typing",
    ("hy_v4", "hy_v4", "typed_values"): "schema_typing",
    ("hy_v4", "hy_v4", "separate_blocks"): "later_calls_kept",
    ("hy_v4", "hy_v4", "text_between"): "later_calls_kept",
    ("k2_horizon", "k2_horizon", "separate_blocks"): "later_calls_kept",
    ("k2_horizon", "k2_horizon", "text_between"): "later_calls_kept",
    ("gemma4", "gemma4", "nested_json"): "schema_typing",
    ("kimi_k3", "kimi_k3", "text_between"): "later_calls_kept",
    ("functiongemma", "functiongemma", "parallel"): "bare_values_kept",
    ("functiongemma", "functiongemma", "separate_blocks"): "bare_values_kept",
    ("functiongemma", "functiongemma", "text_between"): "bare_values_kept",
    ("functiongemma", "functiongemma", "nested_json"): "bare_values_kept",
    ("functiongemma", "functiongemma", "typed_values"): "bare_values_kept",
    ("muse_think", "muse_glimmer", "nested_lookalike"): "vllm_duplicates_text",
    ("cohere_command", "cohere_command3", "empty_arguments"): "empty_arguments_object",
    ("cohere_command", "cohere_command4", "empty_arguments"): "empty_arguments_object",
}


def check_rule(rule: str, run: Run, oracle_case: dict, mine: dict, modes: dict[str, dict]) -> str | None:
    """Why `mine` is not a difference of kind `rule` from vLLM's result, or None when it is (the
    rules and their reasons: differences.json)."""
    vllm = modes["non_stream"]
    if rule == "vllm_error":
        return None if "error" in vllm else "vLLM did not raise"
    if "error" in vllm:
        return "vLLM raised: only the vllm_error rule applies"
    check = _CHECKS.get(rule)
    if check is None:
        return f"unknown rule {rule!r}"
    return None if check(run, oracle_case, mine, vllm, modes) else "the difference is not of this kind"


def _names(result: dict) -> list[str]:
    return [c["name"] for c in result["tool_calls"]]


def _incomplete(result: dict) -> bool:
    return any(isinstance(c["arguments"], str) for c in result["tool_calls"])


def _prompt_honoured(run: Run, case: dict, mine: dict, vllm: dict, modes: dict) -> bool:
    if not case.get("prompt_in_reasoning") or not run.reasoning:
        return False
    entry = next(n for n in _oracle_registry()["names"]
                 if n["engine"] == "vllm" and n["kind"] == "reasoning" and n["name"] == run.reasoning)
    return (entry.get("start_state_observed") or {}).get("prompt_ending_inside_block_is_honoured") is False


def _call_in_reasoning(run: Run, case: dict, mine: dict, vllm: dict, modes: dict) -> bool:
    missing = [n for n in _names(vllm) if n not in _names(mine)]
    if missing:
        return all(n in mine["reasoning"] for n in missing)
    # Without a tool parser: vLLM ended reasoning at the marker and made the rest content.
    head = vllm["content"][:12]
    return (not mine["tool_calls"] and bool(head.strip()) and head in mine["reasoning"]
            and mine["reasoning"].startswith(vllm["reasoning"].rstrip()))


def _no_invented_call(run: Run, case: dict, mine: dict, vllm: dict, modes: dict) -> bool:
    invented = [c for c in vllm["tool_calls"] if c["name"] not in _names(mine)]
    return bool(invented) and all(c["arguments"] in ({}, "") or isinstance(c["arguments"], str) for c in invented)


def _text_kept(run: Run, case: dict, mine: dict, vllm: dict, modes: dict) -> bool:
    return (_calls(mine) == _calls(vllm) and _subsequence(vllm["content"], mine["content"])
            and _subsequence(vllm["reasoning"], mine["reasoning"]))


def _undeclared(run: Run, case: dict, mine: dict, vllm: dict, modes: dict) -> bool:
    declared = {t["function"]["name"] for t in (case.get("tools") or load_input(run.input).get("tools", []))}
    extra = [n for n in _names(mine) if n not in _names(vllm)]
    return bool(extra) and all(n not in declared for n in extra)


def _calls_within_text(run: Run, case: dict, mine: dict, vllm: dict, modes: dict) -> bool:
    return not vllm["tool_calls"] and vllm["content"] == case["text"] and bool(mine["tool_calls"])


def _missing_close_tag(run: Run, case: dict, mine: dict, vllm: dict, modes: dict) -> bool:
    if _names(mine) != _names(vllm):
        return False
    pairs = zip(mine["tool_calls"], vllm["tool_calls"])
    return any(isinstance(m["arguments"], dict) and isinstance(v["arguments"], dict)
               and set(v["arguments"]) < set(m["arguments"]) for m, v in pairs)


def _unclosed_reasoning(run: Run, case: dict, mine: dict, vllm: dict, modes: dict) -> bool:
    return (not vllm["reasoning"] and not mine["content"] and bool(mine["reasoning"])
            and vllm["content"].endswith(mine["reasoning"]))


def _no_injected_text(run: Run, case: dict, mine: dict, vllm: dict, modes: dict) -> bool:
    injected = "<think>"
    if run.reasoning != "minimax_m2_append_think" or not vllm["content"].startswith(injected):
        return False
    rest = {**vllm, "content": vllm["content"][len(injected):]}
    return _normal(mine) == _normal(rest) or any(
        _CHECKS[rule](run, case, mine, rest, modes) for rule in ("text_kept", "cut_off_call", "block_text_framing"))


def _block_text_framing(run: Run, case: dict, mine: dict, vllm: dict, modes: dict) -> bool:
    return not mine["tool_calls"] and not vllm["tool_calls"] and vllm["content"].startswith(mine["content"])


def _vllm_duplicates(run: Run, case: dict, mine: dict, vllm: dict, modes: dict) -> bool:
    r = vllm["reasoning"]
    repeated = any(r.count(r[i:i + 12]) > case["text"].count(r[i:i + 12]) for i in range(len(r) - 11))
    return r.startswith(mine["reasoning"]) and vllm["content"] in mine["content"] and repeated


_CHECKS = {
    "prompt_honoured": _prompt_honoured,
    "harmony_reads_both": lambda run, case, mine, vllm, modes: bool(load_input(run.input).get("harmony"))
    and run.kind != "combined",
    "cut_off_call": lambda run, case, mine, vllm, modes: case.get("finish_reason") == "length"
    and bool(mine["tool_calls"] or vllm["tool_calls"]),
    "call_in_reasoning": _call_in_reasoning,
    "no_invented_call": _no_invented_call,
    "broken_call": lambda run, case, mine, vllm, modes: case.get("finish_reason") != "length" and _incomplete(mine),
    "text_kept": _text_kept,
    "undeclared_tool_kept": _undeclared,
    "whole_output_rejected": _calls_within_text,
    "missing_close_tag": _missing_close_tag,
    "bare_values_kept": _missing_close_tag,
    "unclosed_reasoning": _unclosed_reasoning,
    "no_injected_text": _no_injected_text,
    "block_text_framing": _block_text_framing,
    "vllm_duplicates_text": _vllm_duplicates,
    "vllm_stream_agrees": lambda run, case, mine, vllm, modes: any(
        _normal(mine) == _normal(modes[m]) or ("error" not in modes[m] and _text_kept(run, case, mine, modes[m], modes))
        for m in ("stream_1", "stream_3")),
    "json_only_at_start": lambda run, case, mine, vllm, modes: len(_names(vllm)) > len(_names(mine)),
    "later_calls_kept": lambda run, case, mine, vllm, modes: _names(mine)[:len(_names(vllm))] == _names(vllm)
    and len(_names(mine)) > len(_names(vllm)),
    "mangled_header": lambda run, case, mine, vllm, modes: len(_names(mine)) > len(_names(vllm)),
    "schema_typing": lambda run, case, mine, vllm, modes: _names(mine) == _names(vllm) and _calls(mine) != _calls(vllm),
    "call_id_kept": lambda run, case, mine, vllm, modes: _names(mine) != _names(vllm)
    and [c["arguments"] for c in mine["tool_calls"]] == [c["arguments"] for c in vllm["tool_calls"]],
    "quoting": lambda run, case, mine, vllm, modes: len(_names(vllm)) > len(_names(mine)),
    "call_dropped": lambda run, case, mine, vllm, modes: not vllm["tool_calls"] and bool(mine["tool_calls"])
    and not _incomplete(mine) and _subsequence(vllm["content"], mine["content"]),
    "call_text_repeated": lambda run, case, mine, vllm, modes: _calls(mine) == _calls(vllm)
    and len(mine["content"]) < len(vllm["content"]) and _subsequence(mine["content"], vllm["content"]),
    "empty_arguments_object": lambda run, case, mine, vllm, modes: _names(mine) == _names(vllm) and (
        lambda pairs: bool(pairs) and all(m == {} and v == "" for m, v in pairs))(
        [(m["arguments"], v["arguments"]) for m, v in zip(mine["tool_calls"], vllm["tool_calls"])
         if m["arguments"] != v["arguments"]]),
    "fence_optional": lambda run, case, mine, vllm, modes: len(_names(mine)) > len(_names(vllm))
    and "```" not in case["text"],
}


@cache
def _oracle_registry() -> dict:
    return json.loads((ORACLE / "registry.json").read_text(encoding="utf-8"))


def _normal(result: dict) -> dict:
    return {k: result.get(k) for k in ("content", "reasoning", "tool_calls")}
