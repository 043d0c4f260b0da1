"""What a Rust router sees: the sidecar through the Rust client crate (`router_adapter/rust`, tonic
over the Unix socket), against two references measured in the same run with the same client
machinery, inputs and concurrency:

- the floor: `bench/floor_server.py`, a grpc.aio server answering canned bytes with no work at all,
  the least any unary call through Python gRPC costs;
- vllm-rs (`../shared/peers/vllm-rs.sh`): vLLM's Rust render server, over keep-alive HTTP/1.1.

The load generator (`sidecar-load`, built by `make rust-client`) runs N clients, each one request
at a time on its own connection, for a fixed time; rounds interleave every target on every
workload. Latency is taken at 1 client, throughput at 8. Every request is a different input
(Render sets bypass_cache, so no target answers from a cache) and the load generator first checks
that every target returns the same token ids.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator

import grpc

from bench.common import Section
from bench.peers import VllmRs
from bench.render import prose, requests as render_requests
from bench.server import BenchServer
from bench.tokenize import _word_pool, make_text
from sidecar.v1 import preprocessor_pb2 as pb
from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc

REPO = Path(__file__).resolve().parent.parent
LOAD = REPO / "router_adapter" / "rust" / "target" / "release" / "sidecar-load"
SHARED_QWEN3 = Path(os.environ.get("SIDECAR_SHARED_MODELS", REPO.parent / "shared" / "models")) / "qwen3"
#: Workloads whose throughput is compared with the floor and vllm-rs (a router's common requests).
SMALL = ("Tokenize 500 B", "Render chat")
#: Multiplex streams the "multiplex" target's clients share (one Client, one connection).
MULTIPLEX_STREAMS = 4


def short_chat(seed: int) -> dict:
    """A four-message chat of about 300 tokens (the shape of bench.render's short chat)."""
    rng = random.Random(seed)
    return {"messages": [
        {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
        {"role": "user", "content": prose(rng, 80)},
        {"role": "assistant", "content": prose(rng, 60)},
        {"role": "user", "content": prose(rng, 70)},
    ]}


def agentic(variant: int) -> dict:
    """bench.render's agentic request (8 KB system prompt, 6 tools, 10 turns), its last question
    numbered so each variant is a distinct prompt."""
    body = json.loads(json.dumps(render_requests()["agentic (8 KB system, 6 tools, 10 turns)"]))
    body["messages"][-1]["content"] = f"Summarize what you found (report {variant})."
    return body


def workloads(quick: bool) -> list[dict]:
    pool = _word_pool()
    texts = lambda size, n: [make_text(size, 31 * size + i, pool) for i in range(n)]  # noqa: E731
    return [
        {"name": "Tokenize 500 B", "rpc": "tokenize", "inputs": texts(500, 64)},
        {"name": "Render chat", "rpc": "render", "inputs": [short_chat(5000 + i) for i in range(64)]},
        {"name": "Tokenize 12 KB", "rpc": "tokenize", "inputs": texts(12_000, 32)},
        {"name": "Render agentic", "rpc": "render", "inputs": [agentic(i) for i in range(16)]},
        {"name": "Tokenize 200 KB", "rpc": "tokenize", "inputs": texts(200_000, 4 if quick else 8)},
    ]


def floor_replies(uds: str, work: list[dict]) -> dict[str, str]:
    """The sidecar's real answers to the first small requests: what the floor sends back."""
    stub = pb_grpc.PreprocessorStub(grpc.insecure_channel(uds))
    tokenize = next(w for w in work if w["name"] == "Tokenize 500 B")["inputs"][0]
    chat = next(w for w in work if w["name"] == "Render chat")["inputs"][0]
    tokens = stub.Tokenize(pb.TokenizeRequest(model="qwen3", texts=[tokenize], add_special_tokens=False), timeout=30)
    render = stub.Render(pb.RenderRequest(model="qwen3", messages_json=json.dumps(chat["messages"]), bypass_cache=True), timeout=30)
    return {"Tokenize": tokens.SerializeToString().hex(), "Render": render.SerializeToString().hex()}


@contextlib.contextmanager
def floor_server(replies: dict[str, str]) -> Iterator[str]:
    with tempfile.TemporaryDirectory(prefix="sidecar-floor-") as tmp:
        replies_path = Path(tmp) / "replies.json"
        replies_path.write_text(json.dumps(replies))
        uds = f"{tmp}/floor.sock"
        process = subprocess.Popen([sys.executable, "-m", "bench.floor_server", "--uds", uds, "--replies", str(replies_path)],
                                   stdout=subprocess.PIPE, text=True, cwd=REPO)
        try:
            if process.stdout.readline().strip() != "listening":
                raise RuntimeError("floor server did not start")
            yield f"unix:{uds}"
        finally:
            process.terminate()
            process.wait(10)


def load(spec: dict) -> list[dict]:
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(spec, f)
    try:
        out = subprocess.run([str(LOAD), f.name], check=True, capture_output=True, text=True, timeout=3600)
    finally:
        os.unlink(f.name)
    return [json.loads(line) for line in out.stdout.splitlines()]


def run(quick: bool) -> list[Section]:
    title = "Rust client (tonic over UDS): the sidecar against the grpc.aio floor and vllm-rs"
    if not LOAD.is_file():
        return [Section(title, ["skipped"], [[f"{LOAD} not built (make rust-client)"]])]
    server_args = ("--model", f"qwen3={SHARED_QWEN3}") if (SHARED_QWEN3 / "tokenizer.json").is_file() else ()
    work = workloads(quick)
    with BenchServer(*server_args, tcp=True) as server, BenchServer(*server_args, processes=2) as pair, \
            VllmRs.start_or_none() as peer:
        with floor_server(floor_replies(server.uds, work)) as floor:
            targets = [{"name": "sidecar", "kind": "grpc", "address": server.uds},
                       {"name": "multiplex", "kind": "grpc", "address": server.uds, "mode": "multiplex",
                        "streams": MULTIPLEX_STREAMS},
                       {"name": "floor", "kind": "grpc", "address": floor},
                       # 1 and 2 processes over TCP, where SO_REUSEPORT spreads the clients' connections.
                       {"name": "tcp, 1 process", "kind": "grpc", "address": server.tcp},
                       {"name": "tcp, 2 processes", "kind": "grpc", "address": pair.tcp}]
            if peer is not None:
                targets.append({"name": "vllm-rs", "kind": "http", "address": f"127.0.0.1:{peer.port}"})
            spec = {"seconds": 0.5 if quick else 2.0, "warmup_seconds": 0.2 if quick else 0.3, "rounds": 1 if quick else 3,
                    "clients": [1, 8], "targets": targets, "http_model": peer.model if peer else "",
                    "workloads": [{**w, "model": "qwen3"} for w in work]}
            results = load(spec)
            # 1 and 2 processes over Unix sockets: the Rust client given the pair's base path
            # spreads over PATH.0 and PATH.1 (unary: one channel per process per client;
            # multiplex: the same streams in total, half per process).
            scaling = {**spec, "clients": [8], "workloads": [w for w in spec["workloads"] if w["name"] in SMALL],
                       "targets": [
                           {"name": "unary, 1 process", "kind": "grpc", "address": server.uds},
                           {"name": "unary, 2 processes", "kind": "grpc", "address": pair.base},
                           {"name": "multiplex, 1 process", "kind": "grpc", "address": server.uds, "mode": "multiplex",
                            "streams": MULTIPLEX_STREAMS},
                           {"name": "multiplex, 2 processes", "kind": "grpc", "address": pair.base, "mode": "multiplex",
                            "streams": MULTIPLEX_STREAMS // 2}]}
            scaled = load(scaling)
    return [table(title, results, peer is not None, spec), processes_table(scaled, scaling)]


def _runs(results: list[dict], workload: str, target: str, clients: int) -> list[dict]:
    return [r for r in results if r.get("workload") == workload and r.get("target") == target and r.get("clients") == clients]


def _latency(runs: list[dict]) -> str:
    if not runs:
        return "n/a"
    return f"{statistics.median(r['p50_us'] for r in runs) / 1e3:.2f} / {statistics.median(r['p99_us'] for r in runs) / 1e3:.2f}"


def _rate(runs: list[dict]) -> str:
    if not runs:
        return "n/a"
    rates = sorted(r["per_second"] for r in runs)
    return f"{rates[0]:,.0f}" if len(rates) == 1 else f"{rates[0]:,.0f}-{rates[-1]:,.0f}"


def _ratio(runs: list[dict], reference: list[dict]) -> str:
    if not runs or not reference:
        return "n/a"
    # Same-round pairs, so a slow moment of the machine hits both sides of a ratio.
    by_round = {r["round"]: r["per_second"] for r in reference}
    ratios = sorted(r["per_second"] / by_round[r["round"]] for r in runs if r["round"] in by_round)
    return f"{statistics.median(ratios):.2f}x" if len(ratios) < 3 else f"{statistics.median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})"


def processes_table(results: list[dict], spec: dict) -> Section:
    section = Section("Rust client over Unix sockets: 1 and 2 server processes (8 clients)", [
        "request", "carrier", "req/s, 1 process", "req/s, 2 processes", "2 / 1 processes",
    ])
    for workload in spec["workloads"]:
        for carrier in ("unary", "multiplex"):
            one = _runs(results, workload["name"], f"{carrier}, 1 process", 8)
            two = _runs(results, workload["name"], f"{carrier}, 2 processes", 8)
            section.rows.append([workload["name"], carrier, _rate(one), _rate(two), _ratio(two, one)])
    errors = [r for r in results if r.get("errors")]
    section.notes += [
        f"{spec['rounds']} interleaved rounds of {spec['seconds']} s per target; same inputs as above. 2 processes: "
        "`serve --processes 2`, the client given `unix:PATH` finds PATH.0 and PATH.1 and spreads its calls over "
        f"both (unary: each client one channel per process; multiplex: one shared Client, {MULTIPLEX_STREAMS} streams "
        "in total, half per process). On this 2-core machine the load generator shares the cores with the servers.",
    ]
    if errors:
        section.notes.append("Errors: " + "; ".join(f"{r['workload']} on {r['target']}: {r['errors']} ({r['first_error']})" for r in errors))
    return section


def table(title: str, results: list[dict], with_peer: bool, spec: dict) -> Section:
    section = Section(title, [
        "request", "sidecar p50 / p99 ms, 1 client", "sidecar req/s, 8 clients", "floor p50 / p99 ms", "floor req/s, 8",
        "vllm-rs p50 / p99 ms", "vllm-rs req/s, 8", "sidecar / floor, 8", "sidecar / vllm-rs, 8",
        "multiplex p50 / p99 ms", "multiplex req/s, 8", "multiplex / unary, 8", "multiplex / vllm-rs, 8",
        "TCP req/s, 8: 1 process", "2 processes", "2 / 1 processes",
    ])
    for workload in spec["workloads"]:
        name = workload["name"]
        get = lambda target, clients: _runs(results, name, target, clients)  # noqa: E731
        section.rows.append([
            name, _latency(get("sidecar", 1)), _rate(get("sidecar", 8)), _latency(get("floor", 1)), _rate(get("floor", 8)),
            _latency(get("vllm-rs", 1)), _rate(get("vllm-rs", 8)),
            _ratio(get("sidecar", 8), get("floor", 8)), _ratio(get("sidecar", 8), get("vllm-rs", 8)),
            _latency(get("multiplex", 1)), _rate(get("multiplex", 8)),
            _ratio(get("multiplex", 8), get("sidecar", 8)), _ratio(get("multiplex", 8), get("vllm-rs", 8)),
            _rate(get("tcp, 1 process", 8)), _rate(get("tcp, 2 processes", 8)),
            _ratio(get("tcp, 2 processes", 8), get("tcp, 1 process", 8)),
        ])
    errors = [r for r in results if r.get("errors")]
    mismatches = [r for r in results if r.get("check") == "ids" and not r["same"] and r["target"] != "floor"]
    section.notes += [
        f"{spec['rounds']} interleaved rounds of {spec['seconds']} s per target and client count; latency medians of the "
        "per-round p50/p99, throughput as the range over rounds, ratios as the median of same-round ratios (range).",
        "Each client has its own connection and one request in flight; the load generator runs on one thread. "
        "The sidecar runs with default settings (info log line per call). \"multiplex\" is the same server through the "
        f"same client built with multiplex(true): all clients share one Client, whose calls travel on {MULTIPLEX_STREAMS} "
        "Multiplex streams (calls waiting at one moment go in one message). The TCP columns are unary calls to the "
        "same server over loopback TCP and to `serve --processes 2` (one port shared with SO_REUSEPORT; each "
        "client's connection lands on one process); on this 2-core machine the load generator shares the cores.",
        "The floor answers every call with the sidecar's bytes for the first small request, without parsing or work; "
        f"the target of issue 13 is sidecar / floor >= 0.85x on {' and '.join(SMALL)} at 8 clients.",
        f"Token ids of the first inputs equal the sidecar's: {'yes' if not mismatches else 'NO: ' + ', '.join(m['workload'] + ' on ' + m['target'] for m in mismatches)}.",
    ]
    if errors:
        section.notes.append("Errors: " + "; ".join(f"{r['workload']} on {r['target']}: {r['errors']} ({r['first_error']})" for r in errors))
    if not with_peer:
        section.notes.append("vllm-rs (../shared/peers/vllm-rs.sh) did not start here, so its columns are empty.")
    return section
