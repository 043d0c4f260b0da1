"""Drives the native ParseStream multiplexer the way the server does, with raw protobuf messages,
and checks the invariants every case must keep.

A case (see tests/data/parse/README.md) is fed in many chunkings; each run is reduced to its final
result (content, reasoning, calls, counts, finish), which must equal the case's expectation in
every chunking.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field

from sidecar import parsers
from sidecar.backend import ParseLimits, ParseOpenConfig
from sidecar.factory import get_backend
from sidecar.v1 import preprocessor_pb2 as pb
from tests.conftest import REPO, derived_model, load_tokenizer, model_dir

DATA = REPO / "tests" / "data" / "parse"

#: Parsing runs in the native core only (the reference backend refuses ParseStream).
BACKEND = "native"

_PARSE_MODELS: dict[tuple[str, bool], object] = {}
_HF: dict[str, object] = {}


def parse_model(model: str, force_generic: bool = False):  # noqa: ANN201
    key = (model, force_generic)
    if key not in _PARSE_MODELS:
        tok = load_tokenizer(BACKEND, model)
        from sidecar.model_config import ModelConfig

        template = ModelConfig.from_dir(model_dir(model)).response_template
        _PARSE_MODELS[key] = get_backend(BACKEND).load_parse_model(tok, force_generic, response_template=template)
    return _PARSE_MODELS[key]


def hf_tokenizer(model: str):  # noqa: ANN201
    """The PyPI `tokenizers` tokenizer of a shared (or derived) model (for encoding case texts)."""
    if model not in _HF:
        import tokenizers

        _HF[model] = tokenizers.Tokenizer.from_file(str(model_dir(model) / "tokenizer.json"))
    return _HF[model]


def encode(model: str, text: str) -> list[int]:
    return hf_tokenizer(model).encode(text, add_special_tokens=False).ids


def load_cases(fmt: str) -> list[dict]:
    cases = json.loads((DATA / fmt / "cases.json").read_text(encoding="utf-8"))
    for case in cases:
        case.setdefault("format", fmt)
    return cases


def case_ids(cases: list[dict]) -> list[str]:
    return [c["name"] for c in cases]


@dataclass
class Result:
    """The final outcome of one run."""

    content: str = ""
    reasoning: str = ""
    #: index -> {"id", "name", "arguments"}
    calls: dict[int, dict] = field(default_factory=dict)
    reasoning_tokens: int = 0
    completion_tokens: int = 0
    finished: bool = False
    finish_reason: str = ""
    matched_stop: str = ""
    error: tuple[int, str] | None = None
    #: Tokens actually sent (an engine stops sending once the request finished).
    fed: int = 0
    deltas: list[pb.RequestDelta] = field(default_factory=list)

    def comparable(self) -> dict:
        """Everything but the random call ids."""
        return {
            "content": self.content, "reasoning": self.reasoning,
            "calls": [(i, c["name"], _json_pairs(c["arguments"])) for i, c in sorted(self.calls.items())],
            "reasoning_tokens": self.reasoning_tokens, "completion_tokens": self.completion_tokens,
            "finished": self.finished, "finish_reason": self.finish_reason, "matched_stop": self.matched_stop,
            "error": self.error[0] if self.error else None,
        }


def _json_pairs(text: str):  # noqa: ANN202
    """Arguments as JSON with key order kept (equal as JSON, whatever the number spelling)."""
    try:
        return json.loads(text, object_pairs_hook=lambda pairs: ("obj", pairs))
    except ValueError:
        return ("invalid", text)


def step_message(request_id: str, ids: list[int], finished: bool) -> bytes:
    item = pb.StepTokens(request_id=request_id, token_ids=ids, finished=finished)
    return pb.ParseStreamRequest(step=pb.Step(items=[item])).SerializeToString()


def session_config(case: dict, trace: bool = False) -> ParseOpenConfig:
    return ParseOpenConfig(
        tool_parser=case.get("tool_parser", ""),
        reasoning_parser=case.get("reasoning_parser", ""),
        tools_json=json.dumps(case["tools"]) if case.get("tools") else "",
        chat_template_kwargs_json=json.dumps(case["kwargs"]) if case.get("kwargs") else "",
        skip_special_tokens=case.get("skip_special_tokens", True),
        stop=tuple(case.get("stop", [])),
        include_stop_str_in_output=case.get("include_stop", False),
        max_held_bytes=case.get("max_held_bytes", 1 << 20),
        trace=trace,
    )


def run(case: dict, chunks: list[list[int]], trace: bool = False,
        force_generic: bool = False) -> tuple[Result, dict | None]:
    """Feeds `chunks` (the last one with finished=True unless the case says `"end": false`)."""
    model = case["model"]
    mux = get_backend(BACKEND).new_parse_mux(ParseLimits())
    prompt = prompt_ids(case)
    mux.open(parse_model(model, force_generic), "r", "fp", session_config(case, trace), prompt)
    result = Result()
    end = case.get("end", True)
    for k, chunk in enumerate(chunks):
        if result.finished:
            break  # as an engine does once a request finished (a stop string matched)
        last = k == len(chunks) - 1
        result.fed += len(chunk)
        answer = mux.handle(step_message("r", chunk, last and end))
        for d in pb.ParseStreamResponse.FromString(answer).deltas:
            absorb(result, d)
    trace_data = mux.trace("r") if trace else None
    mux.close()
    return result, trace_data


def absorb(result: Result, d: pb.RequestDelta) -> None:
    result.deltas.append(d)
    result.content += d.content
    result.reasoning += d.reasoning
    for c in d.tool_calls:
        call = result.calls.setdefault(c.index, {"id": "", "name": "", "arguments": ""})
        call["id"] += c.id
        call["name"] += c.name
        call["arguments"] += c.arguments
    if d.HasField("error"):
        result.error = (d.error.code, d.error.message)
    result.reasoning_tokens = max(result.reasoning_tokens, d.reasoning_tokens)
    result.completion_tokens = max(result.completion_tokens, d.completion_tokens)
    result.finished |= d.finished
    result.finish_reason = result.finish_reason or d.finish_reason
    result.matched_stop = result.matched_stop or d.matched_stop


def prompt_ids(case: dict) -> list[int]:
    if "prompt_ids" in case:
        return case["prompt_ids"]
    return encode(case["model"], case.get("prompt", ""))


def output_ids(case: dict) -> list[int]:
    if "output_ids" in case:
        return case["output_ids"]
    return encode(case["model"], case["output"])


def byte_ids(case: dict) -> list[int] | None:
    """The output as one token per byte (byte-level vocabularies only), marker tokens kept."""
    tok = hf_tokenizer(case["model"])
    table = _byte_token_table(case["model"])
    if table is None:
        return None
    out: list[int] = []
    for token_id in output_ids(case):
        piece = tok.id_to_token(token_id)
        raw = _piece_bytes(piece)
        if raw is None or _is_added(case["model"], token_id):
            out.append(token_id)
        else:
            out.extend(table[b] for b in raw)
    return out


_BYTE_TABLES: dict[str, dict[int, int] | None] = {}
_ADDED: dict[str, set[int]] = {}


def _gpt2_chars() -> dict[str, int]:
    direct = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = list(direct)
    n = 0
    for b in range(256):
        if b not in direct:
            direct.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(direct, chars)}


_CHAR_TO_BYTE = _gpt2_chars()


def _piece_bytes(piece: str) -> bytes | None:
    try:
        return bytes(_CHAR_TO_BYTE[c] for c in piece)
    except KeyError:
        return None


def _is_added(model: str, token_id: int) -> bool:
    if model not in _ADDED:
        _ADDED[model] = set(hf_tokenizer(model).get_added_tokens_decoder())
    return token_id in _ADDED[model]


def _byte_token_table(model: str) -> dict[int, int] | None:
    if model not in _BYTE_TABLES:
        tok = hf_tokenizer(model)
        config = json.loads(tok.to_str())
        if (config.get("decoder") or {}).get("type") != "ByteLevel":
            _BYTE_TABLES[model] = None
        else:
            byte_of = {c: b for c, b in _CHAR_TO_BYTE.items()}
            table = {}
            for c, b in byte_of.items():
                token_id = tok.token_to_id(c)
                if token_id is not None:
                    table[b] = token_id
            _BYTE_TABLES[model] = table if len(table) == 256 else None
    return _BYTE_TABLES[model]


def chunkings(ids: list[int], seed: int = 0) -> dict[str, list[list[int]]]:
    """The splits every case is fed in."""
    rng = random.Random(seed)
    out = {"all": [ids], "one": [[i] for i in ids] or [[]], "one+empty": [[i] for i in ids] + [[]]}
    for k in range(3):
        chunks, i = [], 0
        while i < len(ids):
            n = rng.randint(1, 6)
            chunks.append(ids[i : i + n])
            i += n
        out[f"random{k}"] = chunks or [[]]
    out["pairs-with-empty"] = [ids[i : i + 2] for i in range(0, len(ids), 2)] + [[]] if ids else [[]]
    return out


# ---- invariants -----------------------------------------------------------------------------------


def json_object_prefix(text: str) -> bool:
    """Whether `text` is an unfinished JSON object that closing quotes and brackets alone would
    complete (what an incomplete call's arguments are: what was read, never closed)."""
    if not text.startswith("{"):
        return False
    stack, in_string, escaped = [], False, False
    for c in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (c == "\\", c != '"')
        elif c == '"':
            in_string = True
        elif c in "{[":
            stack.append("}" if c == "{" else "]")
        elif c in "}]":
            if not stack or stack.pop() != c:
                return False
    closers = ('"' if in_string else "") + "".join(reversed(stack))
    try:
        return bool(closers) and isinstance(json.loads(text + closers), dict)
    except ValueError:
        return False


def check_delta_shape(result: Result) -> None:
    """OpenAI streaming shape: a call's first fragment carries id and name, later ones only
    arguments; calls start in index order; ids unique; a call's arguments concatenate to a JSON
    object, or (a call cut off or broken: incomplete) to an unfinished one never closed by the
    parser, and then finish_reason is not "tool_calls"."""
    seen: list[int] = []
    for d in result.deltas:
        for c in d.tool_calls:
            if c.index not in seen:
                assert c.index == len(seen), f"call {c.index} started before call {len(seen)}"
                assert c.id and c.name, f"first fragment of call {c.index} lacks id or name: {c}"
                seen.append(c.index)
            else:
                assert not c.id and not c.name, f"call {c.index} repeats id/name: {c}"
    incomplete = 0
    for index, call in result.calls.items():
        try:
            args = json.loads(call["arguments"])
        except ValueError:
            assert call["arguments"] == "" or json_object_prefix(call["arguments"]), (
                f"call {index} arguments are neither an object nor an unfinished one: {call['arguments']!r}"
            )
            incomplete += 1
            continue
        assert isinstance(args, dict), f"call {index} arguments are not an object: {call['arguments']!r}"
    if incomplete:
        assert result.finish_reason != "tool_calls", "finish_reason tool_calls with an incomplete call"
    ids = [c["id"] for c in result.calls.values()]
    assert len(set(ids)) == len(ids), f"duplicate call ids {ids}"
    counts = [d.completion_tokens for d in result.deltas if d.completion_tokens]
    assert counts == sorted(counts), "completion_tokens went down"
    reasoning = [d.reasoning_tokens for d in result.deltas if d.reasoning_tokens]
    assert reasoning == sorted(reasoning), "reasoning_tokens went down"


def check_attribution(result: Result, trace: dict, n_tokens: int) -> None:
    """No character lost or duplicated, and first-byte ownership, recomputed from the trace: the
    spans partition the routed stream (all of it when the request finished without a stop string);
    the text of the reasoning/content spans is exactly the reasoning/content output; text goes to
    the tool channel only when calls were made, and every call's name is in it; reasoning_tokens
    counts exactly the tokens whose first byte is in a span counted as reasoning: reasoning text,
    except under Harmony, which counts by message as vLLM does (a span says so)."""
    source = trace["source"].encode("utf-8")
    sentinels = trace["sentinels"]
    spans = sorted(trace["spans"])  # [start, end, channel, counts as reasoning]
    for (_, e1, _, _), (s2, _, _, _) in zip(spans, spans[1:]):
        assert e1 <= s2, f"overlapping spans {spans}"
    covered = sum(e - s for s, e, _, _ in spans)
    assert covered <= len(source)
    if result.finished and not result.matched_stop and result.error is None:
        assert covered == len(source), f"routed {covered} of {len(source)} bytes"

    # Characters the model wrote in the sentinel range are U+FFFD in the source (they cannot forge
    # a marker); content and reasoning show the originals.
    literals = {offset: ch for offset, ch in trace.get("literals", [])}

    def render(start: int, b: bytes) -> str:
        out, at = [], start
        for ch in b.decode("utf-8"):
            out.append(literals.get(at, sentinels.get(ch, ch)))
            at += len(ch.encode("utf-8"))
        return "".join(out)

    def text_of(channel: str) -> str:
        return "".join(render(s, source[s:e]) for s, e, ch, _ in spans if ch == channel)

    assert text_of("reasoning") == result.reasoning, "reasoning is not the text routed to reasoning"
    assert text_of("content") == result.content, "content is not the text routed to content"
    tool_text = text_of("tool")
    if not result.calls:
        assert tool_text == "", f"text went to the tool channel but no call was made: {tool_text!r}"
    for call in result.calls.values():
        assert call["name"] in tool_text or call["name"] in text_of("framing"), (
            f"call {call['name']!r} was not written in the output"
        )

    def counts_at(offset: int) -> bool | None:
        for s, e, _, counts in spans:
            if s <= offset < e:
                return counts
        return None

    anchors = trace["anchors"]
    assert sorted(a[0] for a in anchors) == list(range(n_tokens)), "every token has exactly one anchor"
    reasoning = 0
    for _seq, offset, zero in anchors:
        counts = counts_at(offset - 1) if zero and offset > 0 else counts_at(offset)
        if counts is None and zero:
            counts = counts_at(offset)
        reasoning += counts is True
    assert reasoning == result.reasoning_tokens == trace["reasoning_tokens"]
    if result.matched_stop:
        # vLLM counts the tokens up to the one completing the stop string (checked by the cases
        # that give `completion_tokens`, and across chunkings by `run_case`).
        assert 0 < result.completion_tokens <= n_tokens
    else:
        assert result.completion_tokens == n_tokens


def check_ids(result: Result, tool_parser: str, expect: dict) -> None:
    """Generated ids by the parser's registry row: `call_` + 24 alphanumerics, or 9 alphanumerics
    for the `mistral` id style; ids the format writes are kept as written."""
    given = {w["id"] for w in expect.get("tool_calls", []) if "id" in w}
    row = parsers.find("tool", tool_parser) if tool_parser not in ("", "none") else None
    for call in result.calls.values():
        if call["id"] in given:
            continue
        if row is not None and row.id_style == "mistral":
            assert re.fullmatch(r"[A-Za-z0-9]{9}", call["id"]), call["id"]
        else:
            assert re.fullmatch(r"call_[A-Za-z0-9]{24}", call["id"]), call["id"]


def check_expected(result: Result, expect: dict, exact_tokens: bool = True) -> None:
    assert result.error is None or "error" in expect, f"unexpected error {result.error}"
    if "error" in expect:
        assert result.error is not None and result.error[0] == expect["error"], result.error
        return
    assert result.content == expect.get("content", ""), "content"
    assert result.reasoning == expect.get("reasoning", ""), "reasoning"
    calls = [result.calls[i] for i in sorted(result.calls)]
    want = expect.get("tool_calls", [])
    assert [c["name"] for c in calls] == [w["name"] for w in want], "call names"
    for got, w in zip(calls, want):
        if isinstance(w["arguments"], str):
            # An incomplete call: exactly the arguments text read before the cut.
            assert got["arguments"] == w["arguments"], f"arguments text of {w['name']}"
        else:
            assert json.loads(got["arguments"]) == w["arguments"], f"arguments of {w['name']}"
        if "id" in w:
            assert got["id"] == w["id"], "call id"
    complete = want and not any(isinstance(w["arguments"], str) for w in want)
    assert result.finish_reason == expect.get("finish_reason", "tool_calls" if complete else ""), "finish_reason"
    assert result.matched_stop == expect.get("matched_stop", ""), "matched_stop"
    if "reasoning_tokens" in expect and exact_tokens:
        assert result.reasoning_tokens == expect["reasoning_tokens"], "reasoning_tokens"
    if "completion_tokens" in expect and exact_tokens:
        assert result.completion_tokens == expect["completion_tokens"], "completion_tokens"


def check_decoding(case: dict, ids: list[int]) -> None:
    """Item 1 on the case's own ids: with parsers off, the output is Hugging Face's decode of the
    ids in the context of the prompt's last 32 ids."""
    tok = hf_tokenizer(case["model"])
    skip = case.get("skip_special_tokens", True)
    context = prompt_ids(case)[-32:]
    before = tok.decode(context, skip_special_tokens=skip)
    after = tok.decode(context + ids, skip_special_tokens=skip)
    if not after.startswith(before):
        return
    plain = {k: v for k, v in case.items() if k not in ("tool_parser", "reasoning_parser", "stop")}
    for chunks in (chunkings(ids)["one"], [ids]):
        result, _ = run(plain, chunks)
        assert result.content == after[len(before):], f"{case['name']}: decoding differs from HF"


def checked_runs(case: dict, runs: list[tuple[str, str, list[list[int]]]], expect: dict | None = None) -> Result:
    """Feeds `case` in every `(variant, name, chunks)` of `runs` (variant `tokens` or `bytes`):
    each run keeps every invariant (delta shape, ids, no character lost or duplicated, token
    attribution), equals `expect` when given, and ends in the same final result as the first run
    of its variant and as every other variant. Returns the first run's result."""
    firsts: dict[str, dict] = {}
    first_result: Result | None = None
    for variant, name, chunks in runs:
        result, trace = run(case, chunks, trace=True)
        label = f"{case['name']} [{variant}/{name}]"
        try:
            check_delta_shape(result)
            if result.error is None:
                check_attribution(result, trace, result.fed)
            if expect is not None:
                check_expected(result, expect, exact_tokens=variant == "tokens")
                check_ids(result, case.get("tool_parser", ""), expect)
        except AssertionError as e:
            raise AssertionError(f"{label}: {e}\n{result.comparable()}") from None
        # Beyond what the case pins down: every chunking ends in the same final result.
        final = result.comparable()
        if result.error is not None:
            final.pop("completion_tokens")  # counts what was fed before the error
        if variant == "bytes":
            final.pop("reasoning_tokens")
        first = firsts.setdefault(variant, final)
        assert final == first, f"{label}: differs from the first chunking\n{final}\n{first}"
        counts = ("reasoning_tokens", "completion_tokens")  # one token per byte counts other tokens
        without_counts = {k: v for k, v in final.items() if k not in counts}
        base = {k: v for k, v in next(iter(firsts.values())).items() if k not in counts}
        assert without_counts == base, f"{label}: differs from the token runs\n{final}\n{base}"
        first_result = first_result or result
    assert first_result is not None, "no run"
    return first_result


def variants(case: dict) -> dict[str, list[int]]:
    """The case's output as the tokenizer's ids and, where the vocabulary allows, one token per
    byte (splitting every multi-byte character and every marker spelled as text)."""
    ids = output_ids(case)
    out = {"tokens": ids}
    per_byte = byte_ids(case)
    if per_byte is not None and per_byte != ids:
        out["bytes"] = per_byte
    return out


def with_added_tokens(case: dict) -> dict:
    """The case on its model with the case's `added_tokens` added as special tokens (a vocabulary
    no shared model has), when it names any."""
    if not case.get("added_tokens"):
        return case
    return {**case, "model": derived_model(case["model"], case["added_tokens"])}


def check_case(case: dict) -> dict[str, int]:
    """Runs a case in every chunking (and one token per byte where the vocabulary allows); each
    run must equal the expectation and keep every invariant. Returns run counts."""
    case = with_added_tokens(case)
    seqs = variants(case)
    check_decoding(case, seqs["tokens"])
    runs = [(variant, name, chunks) for variant, seq in seqs.items() for name, chunks in chunkings(seq).items()]
    checked_runs(case, runs, case["expect"])
    return {"runs": len(runs)}
