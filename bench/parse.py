"""ParseStream benchmarks: per-token cost of detokenize + parse, and an engine-like gRPC client.

(a) Native cost per request-step (one token per step) for hermes, qwen3_coder, harmony, hy_v3, phi4_mini_json
    (JSON list) and lfm2 (pythonic) outputs, each also per token relative to hermes in the same run:
    inside the native core (no FFI), and through the server's path (one native call per decode
    step carrying many requests, raw protobuf in and out).
(b) An engine-like client on one ParseStream over a Unix socket: 1, 64 and 256 concurrent
    requests, one token per request per step, one message per step (lock-step): steps/s,
    request-steps/s, p50/p99 step round trip.

Parsing runs in the native core only (the reference backend refuses ParseStream), so there is no
Python baseline here; the figures are absolute, per token and per step.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import time
from pathlib import Path

from bench.common import Section, Stats, fmt_time
from bench.server import BenchServer

REPO = Path(__file__).resolve().parent.parent
MODELS = Path(os.environ.get("SIDECAR_SHARED_MODELS", REPO.parent / "shared" / "models"))

WEATHER = '{"location": "San Francisco, CA", "unit": "celsius", "days": 3}'
QWEN_PROMPT = "<|im_start|>user\nWhat is the weather in San Francisco?<|im_end|>\n<|im_start|>assistant\n"
HERMES = (
    "<think>\nThe user asks about the weather in San Francisco. I have a get_weather tool that takes a "
    "location and a unit; the user did not say which unit, so Celsius is a reasonable default. I will call "
    "the tool and then summarise the forecast for the next three days.\n</think>\n\n"
    "Let me look that up for you.\n<tool_call>\n"
    '{"name": "get_weather", "arguments": ' + WEATHER + "}\n</tool_call>\n"
    "<tool_call>\n"
    '{"name": "get_air_quality", "arguments": {"location": "San Francisco, CA", "pollutants": ["pm25", "o3"]}}'
    "\n</tool_call>"
)
CODER = (
    "I'll create the file with a small HTTP handler.\n<tool_call>\n<function=write_file>\n"
    "<parameter=path>\nsrc/server.py\n</parameter>\n<parameter=content>\n"
    "import json\nfrom http.server import BaseHTTPRequestHandler, HTTPServer\n\n\n"
    "class Handler(BaseHTTPRequestHandler):\n    def do_GET(self):\n        body = json.dumps({'ok': True, 'path': self.path})\n"
    "        self.send_response(200)\n        self.send_header('Content-Type', 'application/json')\n"
    "        self.end_headers()\n        self.wfile.write(body.encode())\n\n\n"
    "if __name__ == '__main__':\n    HTTPServer(('127.0.0.1', 8080), Handler).serve_forever()\n"
    "</parameter>\n<parameter=mode>\n420\n</parameter>\n</function>\n</tool_call>"
)
CODER_TOOLS = json.dumps([{"type": "function", "function": {"name": "write_file", "parameters": {"type": "object", "properties": {
    "path": {"type": "string"}, "content": {"type": "string"}, "mode": {"type": "integer"}}}}}])
# hy_v3 (Hunyuan): the arg_key/arg_value family (GLM, ling3, poolside_v1, k2_horizon share its reader).
HY_V3 = (
    "Let me look that up for you.\n<tool_calls>\n<tool_call>get_weather<tool_sep>\n"
    "<arg_key>location</arg_key>\n<arg_value>San Francisco, CA</arg_value>\n"
    "<arg_key>unit</arg_key>\n<arg_value>celsius</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n"
    "</tool_call>\n<tool_call>get_air_quality<tool_sep>\n<arg_key>location</arg_key>\n"
    "<arg_value>San Francisco, CA</arg_value>\n<arg_key>pollutants</arg_key>\n<arg_value>[\"pm25\", \"o3\"]</arg_value>\n"
    "</tool_call>\n</tool_calls>"
)
HY_V3_TOOLS = json.dumps([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "location": {"type": "string"}, "unit": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "get_air_quality", "parameters": {"type": "object", "properties": {
        "location": {"type": "string"}, "pollutants": {"type": "array"}}}}},
])
HARMONY_PROMPT = "<|start|>system<|message|>You are ChatGPT.\nReasoning: medium<|end|><|start|>user<|message|>Weather in SF?<|end|><|start|>assistant"
HARMONY = (
    "<|channel|>analysis<|message|>The user wants the current weather in San Francisco. We have a get_weather "
    "function taking a location and a unit. Call it with San Francisco, CA and celsius, then answer.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    + WEATHER + "<|call|>"
)

# The same two calls in a JSON-list format and a pythonic-style one (issue 10.7: per token, beside hermes).
PHI4_MINI = (
    "Let me look that up for you.\nfunctools["
    '{"name": "get_weather", "arguments": ' + WEATHER + "}, "
    '{"name": "get_air_quality", "arguments": {"location": "San Francisco, CA", "pollutants": ["pm25", "o3"]}}]'
)
LFM2 = (
    "Let me look that up for you.\n<|tool_call_start|>[get_weather(location='San Francisco, CA', unit='celsius', "
    "days=3), get_air_quality(location='San Francisco, CA', pollutants=['pm25', 'o3'])]<|tool_call_end|>"
)

WORKLOADS = [
    # name, model dir, tool parser, reasoning parser, prompt, output, tools
    ("hermes", "qwen3", "hermes", "qwen3", QWEN_PROMPT, HERMES, ""),
    ("phi4_mini_json", "qwen3", "phi4_mini_json", "", QWEN_PROMPT, PHI4_MINI, ""),
    ("lfm2", "qwen3", "lfm2", "", QWEN_PROMPT, LFM2, ""),
    ("qwen3_coder", "qwen3", "qwen3_coder", "", QWEN_PROMPT, CODER, CODER_TOOLS),
    # Harmony drops the calls of a request without tools (as vLLM): it gets get_weather declared.
    ("harmony", "gpt-oss", "openai", "openai", HARMONY_PROMPT, HARMONY, HY_V3_TOOLS),
    ("hy_v3", "qwen3", "hy_v3", "", QWEN_PROMPT, HY_V3, HY_V3_TOOLS),
]


def _encode(model: str, text: str) -> list[int]:
    import tokenizers

    tok = tokenizers.Tokenizer.from_file(str(MODELS / model / "tokenizer.json"))
    return tok.encode(text, add_special_tokens=False).ids


def _config(tool: str, reasoning: str, tools: str):  # noqa: ANN202 - sidecar.backend.ParseOpenConfig
    from sidecar.backend import ParseOpenConfig

    return ParseOpenConfig(tool_parser=tool, reasoning_parser=reasoning, tools_json=tools)


def _step_messages(n_requests: int, ids: list[int], prefix: str = "r") -> list[bytes]:
    from sidecar.v1 import preprocessor_pb2 as pb

    out = []
    for k, token in enumerate(ids):
        last = k == len(ids) - 1
        items = [pb.StepTokens(request_id=f"{prefix}{r}", token_ids=[token], finished=last) for r in range(n_requests)]
        out.append(pb.ParseStreamRequest(step=pb.Step(items=items)).SerializeToString())
    return out


def _mux_cost(backend, parse_model, cfg, prompt: list[int], ids: list[int], n_requests: int,  # noqa: ANN001
              repeats: int) -> float:
    """Seconds per request-step through a multiplexer (raw protobuf in and out), as the server
    runs it."""
    from sidecar.backend import ParseLimits

    messages = _step_messages(n_requests, ids)
    total = 0.0
    for _ in range(repeats):
        mux = backend.new_parse_mux(ParseLimits())
        for r in range(n_requests):
            mux.open(parse_model, f"r{r}", "fp", cfg, prompt)
        started = time.perf_counter()
        for message in messages:
            mux.handle(message)
        total += time.perf_counter() - started
        mux.close()
    return total / (repeats * len(ids) * n_requests)


def section_native_cost(quick: bool) -> Section:
    from sidecar.factory import get_backend

    section = Section(
        "ParseStream: cost per request-step (one token per step)",
        ["output", "tokens", "native core", "native via mux (FFI + protobuf)", "core per token vs hermes"],
        notes=[
            "native core: sc_parse_bench, a whole request fed one token per step inside Rust (session creation included).",
            "via mux: what the server does per decode step: one call per step carrying 64 requests, raw protobuf in "
            "and out, measured from Python.",
            "vs hermes: the native core's cost per token over hermes's, same run.",
        ],
    )
    backend = get_backend("native")
    n = 16 if quick else 64
    hermes_per_token = None
    for name, model, tool, reasoning, prompt_text, output, tools in WORKLOADS:
        prompt = _encode(model, prompt_text)
        ids = _encode(model, output)
        cfg = _config(tool, reasoning, tools)
        parse_model = backend.load_parse_model(backend.load_tokenizer(MODELS / model))
        core_ns = parse_model.bench(cfg.as_dict(), prompt, ids, 1, 50 if quick else 400)
        native = _mux_cost(backend, parse_model, cfg, prompt, ids, n, 2 if quick else 5)
        # `bench` gives nanoseconds per token already; hermes is the first workload.
        hermes_per_token = hermes_per_token or core_ns
        ratio = f"{core_ns / hermes_per_token:.2f}x"
        section.rows.append([name, str(len(ids)), fmt_time(core_ns * 1e-9), fmt_time(native), ratio])
    return section


async def _engine(target: str, messages_by_step: list[bytes], opens: list[bytes]) -> list[float]:
    import grpc

    async with grpc.aio.insecure_channel(target) as channel:
        call = channel.stream_stream("/sidecar.v1.Preprocessor/ParseStream")()
        for message in opens:
            await call.write(message)
            await call.read()
        latencies = []
        for message in messages_by_step:
            started = time.perf_counter()
            await call.write(message)
            await call.read()
            latencies.append(time.perf_counter() - started)
        await call.done_writing()
        return latencies


def _open_messages(n: int, model: str, tool: str, reasoning: str, prompt: list[int], tools: str,
                   prefix: str = "r") -> list[bytes]:
    from sidecar.v1 import preprocessor_pb2 as pb

    return [
        pb.ParseStreamRequest(open=pb.OpenRequest(
            request_id=f"{prefix}{r}", model=model, tool_parser=tool, reasoning_parser=reasoning, tools_json=tools,
            prompt_token_ids=prompt,
        )).SerializeToString()
        for r in range(n)
    ]


def section_grpc(quick: bool) -> Section:
    prompt = _encode("qwen3", QWEN_PROMPT)
    ids = _encode("qwen3", HERMES)
    server_args = ("--model", f"qwen3={MODELS / 'qwen3'}", "--parse-max-requests", "1024", "--log-level", "warning")
    with BenchServer(*server_args) as server:
        target = server.uds
        section = Section(
            f"ParseStream over gRPC (UDS), engine-like client (hermes + qwen3 output, {len(ids)} tokens)",
            ["concurrent requests", "steps/s", "request-steps/s", "p50 step", "p99 step"],
            notes=[
                "One stream; each step message carries one new token of every running request and waits for "
                "the answer (lock-step), so a step's round trip is the latency an engine would add per "
                "decode step.",
                "Target: under 5 ms p99 at 256 concurrent requests.",
            ],
        )
        for n in (1, 64, 256):
            steps = ids if not quick else ids[: min(len(ids), 40)]
            # Warm-up on its own stream (its requests are freed when that stream ends).
            warm_opens = _open_messages(n, "qwen3", "hermes", "qwen3", prompt, "", prefix="w")
            asyncio.run(_engine(target, _step_messages(n, steps[:5], prefix="w"), warm_opens))
            opens = _open_messages(n, "qwen3", "hermes", "qwen3", prompt, "")
            latencies = asyncio.run(_engine(target, _step_messages(n, steps), opens))
            stats = Stats(latencies)
            total = sum(latencies)
            section.rows.append([
                str(n), f"{len(latencies) / total:,.0f}", f"{n * len(latencies) / total:,.0f}",
                fmt_time(stats.p50), fmt_time(stats.p99),
            ])
    return section


def section_stop_strings(quick: bool) -> Section:
    """Per-step cost with thousands of stop strings beside two (issue 9: 20k stop strings made every
    step 13x dearer before the matcher became one automaton over all of a request's stops)."""
    from sidecar.factory import get_backend

    section = Section(
        "ParseStream: stop strings, cost per step (one token per step, none of the stops occurs)",
        ["stop strings", "per step", "vs 2 stop strings"],
        notes=["Through the mux as the server runs it (raw protobuf in and out), one request, hermes output, "
               "best of 3; the stops are distinct strings of 8-37 bytes."],
    )
    backend = get_backend("native")
    parse_model = backend.load_parse_model(backend.load_tokenizer(MODELS / "qwen3"))
    prompt, ids = _encode("qwen3", QWEN_PROMPT), _encode("qwen3", HERMES)
    _mux_cost(backend, parse_model, _config("", "", ""), prompt, ids, 1, 2)  # warm-up (first steps build caches)
    base = None
    for count in (2, 2_000, 20_000):
        stops = tuple(f"never-{i}-{'q' * (i % 30)}" for i in range(count))
        cfg = dataclasses.replace(_config("", "", ""), stop=stops)
        cost = min(_mux_cost(backend, parse_model, cfg, prompt, ids, 1, 1) for _ in range(1 if quick else 3))
        base = base or cost
        section.rows.append([f"{count:,}", fmt_time(cost), f"{cost / base:.2f}x"])
    return section


LONG_STRING_SHAPES = {
    "argument": "write_file(path='notes.txt', content='{body}')",
    "in a list": "write_files(files=['notes.txt', '{body}'])",
    "in a dict": "post(opts={{'headers': {{'x': 'y'}}, 'body': '{body}'}})",
}


def _long_string_call(size: int, shape: str = "argument") -> str:
    """An lfm2 call with one string of about `size` bytes of prose (quotes escaped), the argument
    itself or nested in a list or dict argument (`LONG_STRING_SHAPES`)."""
    sentence = "The handler reads the request, checks the user\\'s token and writes a JSON reply. "
    body = (sentence * (size // len(sentence) + 1))[:size]
    call = LONG_STRING_SHAPES[shape].format(body=body)
    return f"<|tool_call_start|>[{call}]<|tool_call_end|>"


def section_long_string(quick: bool) -> Section:
    """Per-token cost of a pythonic call with one long string, as the argument or nested in a list
    or dict: the call reader resumes inside the string (and the containers around it), so 20 KB
    costs per token what 200 bytes do (it used to reread the argument from its start every step,
    quadratic in its length)."""
    from sidecar.factory import get_backend

    section = Section(
        "ParseStream: a long string argument (lfm2, pythonic reader), cost per token",
        ["string", "tokens", "native core per token", "vs 200 B argument"],
        notes=["sc_parse_bench, one token per step, qwen3 tokenizer, same run; each row the best of 3."],
    )
    backend = get_backend("native")
    parse_model = backend.load_parse_model(backend.load_tokenizer(MODELS / "qwen3"))
    prompt = _encode("qwen3", QWEN_PROMPT)
    cfg = _config("lfm2", "", "").as_dict()
    base = None
    rows = [(200, "argument")] + [(20_000, shape) for shape in LONG_STRING_SHAPES]
    for size, shape in rows:
        ids = _encode("qwen3", _long_string_call(size, shape))
        iterations = max(1, (2_000 if quick else 20_000) // len(ids))
        cost = min(parse_model.bench(cfg, prompt, ids, 1, iterations) for _ in range(3))
        base = base or cost
        section.rows.append([f"{size:,} B {shape}", str(len(ids)), f"{cost:,.0f} ns", f"{cost / base:.2f}x"])
    return section


#: Undecided waits a model (or a hostile client) can make each parser hold: (parser, kind, text
#: before the wait, the unit repeated, one token each).
LONG_WAITS = [
    ("hermes", "tool", "<tool_call>", " "),
    ("mistral", "tool", "[TOOL_CALLS]", "a"),
    ("deepseek_v3", "tool", "<｜tool▁call▁begin｜>", "a"),
    ("glm45", "reasoning", "<think>plan", " "),
    ("pythonic", "tool", '[f(x="', "["),
]


def section_long_wait(quick: bool) -> Section:
    """Per-token cost of a wait on undecided text as it grows (`native/src/parse/pacing.rs`): each
    parser's cost per token stays flat from 1k to 32k units, where re-reading the wait at every step
    grew with it. (A reasoning wait holds each token's attribution too: 64k tokens pass the
    default 1 MiB `--parse-max-held-kb`.)"""
    from sidecar.factory import get_backend

    section = Section(
        "ParseStream: a growing undecided wait, cost per token",
        ["parser", "wait", "1,000 units", "8,000 units", "32,000 units", "32k vs 1k"],
        notes=["sc_parse_bench, one token per step, qwen3 tokenizer, the end of the output included; each cell the "
               "best of 3. Before pacing (2026-12-02), hermes after <tool_call> and spaces: 0.5 us per token at "
               "1,500 units, 3.1 us at 6,000."],
    )
    backend = get_backend("native")
    parse_model = backend.load_parse_model(backend.load_tokenizer(MODELS / "qwen3"))
    sizes = [1_000, 8_000] + ([] if quick else [32_000])
    for parser, kind, head, unit in LONG_WAITS:
        cfg = (_config(parser, "", "") if kind == "tool" else _config("", parser, "")).as_dict()
        unit_ids = _encode("qwen3", unit)
        costs = [min(parse_model.bench(cfg, [], _encode("qwen3", head) + unit_ids * n, 1, 1) for _ in range(3))
                 for n in sizes]
        cells = [f"{c:,.0f} ns" for c in costs] + ["-"] * (3 - len(costs))
        ratio = f"{costs[-1] / costs[0]:.2f}x" if len(costs) == 3 else "-"
        section.rows.append([parser, f"{head!r} then {unit!r}", *cells, ratio])
    return section


def run(quick: bool) -> list[Section]:
    if not (MODELS / "SOURCES.md").is_file():
        return [Section("ParseStream", ["skipped"], rows=[[f"../shared/models not found at {MODELS}"]])]
    return [section_native_cost(quick), section_long_string(quick), section_long_wait(quick), section_stop_strings(quick),
            section_grpc(quick)]
