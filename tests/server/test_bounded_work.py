"""Issue 9, items 2 and 3, against the real server: nothing input-sized blocks the event loop,
work is bounded by limits with clear errors, a call whose client has gone stops burning CPU, and a
large call's memory goes back to the system.

Timing is asserted here, which the project otherwise does not do, because the issue asks for it:
each stall is measured in the same test (how long the stalling call itself takes) and health
checks (from another process) must stay under 100 ms while it runs, a bound far from both the
stall (seconds before the fix) and a health check's usual latency (about a millisecond). A stall
whose checks cross the bound runs again (up to three times): holding the loop fails every run, a
loaded machine's scheduling delays do not repeat.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from sidecar.v1 import kv_router_pb2 as kv
from sidecar.v1 import preprocessor_pb2 as pb
from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc
from tests.conftest import LiveServer, require_shared_models, start_server, stop_server

pytestmark = [pytest.mark.e2e]

HEALTH_BOUND_S = 0.1
BIG = [("grpc.max_send_message_length", 200 << 20), ("grpc.max_receive_message_length", 200 << 20)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    models = require_shared_models()
    live = start_server(
        tmp_path_factory.mktemp("bounded"), "--model", f"qwen3={models / 'qwen3'}", "--model", f"gpt-oss={models / 'gpt-oss'}",
        "--allow-request-templates", "--max-message-mb", "128", "--max-kwargs-bytes", str(32 << 20),
        "--max-stop-strings", "50000", "--max-stop-bytes", str(4 << 20), "--max-word-chars", str(30_000_000),
        # A KV source that never publishes: Score answers (every worker at 0 blocks).
        "--kv-events", "w0=tcp://127.0.0.1:9,model=qwen3",
    )
    yield live
    stop_server(live)


#: The health checker: its own process, as an orchestrator's probe is, so what it measures is the
#: server (not this process's GIL, which the stalling client holds while it sends 40 MB). It checks
#: every 10 ms from "ready" until its stdin closes, then prints the latencies (seconds) as JSON.
_CHECKER = """
import json, sys, threading, time
import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
stub = health_pb2_grpc.HealthStub(grpc.insecure_channel(sys.argv[1]))
stub.Check(health_pb2.HealthCheckRequest(), timeout=5)
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
print("ready", flush=True)
latencies = []
while not stop.is_set():
    started = time.perf_counter()
    stub.Check(health_pb2.HealthCheckRequest(), timeout=10)
    latencies.append(time.perf_counter() - started)
    time.sleep(0.01)
print(json.dumps(latencies), flush=True)
"""


def _health_while(target: str, stall) -> tuple[float, list[float]]:  # noqa: ANN001 - a callable
    """Runs `stall()` with health checks from another process meanwhile; (stall seconds, health
    latencies)."""
    checker = subprocess.Popen([sys.executable, "-c", _CHECKER, target], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert checker.stdout.readline().strip() == "ready"
        time.sleep(0.02)
        started = time.perf_counter()
        stall()
        took = time.perf_counter() - started
        checker.stdin.close()
        latencies = json.loads(checker.stdout.readline())
    finally:
        checker.kill()
        checker.wait()
    return took, latencies


def _stalls(target: str) -> dict:
    """Each stall as a callable that only sends bytes built beforehand and drops the answer's bytes
    unparsed: the health checks run in this process, so building or parsing a 40 MB message here
    (protobuf holds the GIL for it) would stall them whatever the server does."""
    channel = grpc.insecure_channel(target, options=BIG)
    messages = json.dumps([{"role": "user", "content": "hi"}])
    render = channel.unary_unary("/sidecar.v1.Preprocessor/Render")

    def send_render(request: pb.RenderRequest):  # noqa: ANN202
        body = request.SerializeToString()
        return lambda: render(body, timeout=120)

    def parse_open(**fields):  # noqa: ANN003, ANN202
        body = pb.ParseStreamRequest(open=pb.OpenRequest(request_id="r", model="qwen3", **fields)).SerializeToString()
        call = channel.stream_stream("/sidecar.v1.Preprocessor/ParseStream")

        def run() -> None:
            replies = list(call(iter([body]), timeout=120))
            assert not pb.ParseStreamResponse.FromString(replies[0]).deltas, replies[0]

        return run

    score = channel.unary_unary("/sidecar.v1.KvRouter/Score")
    score_text = kv.ScoreRequest(model="qwen3", text="The quick brown fox jumps over the lazy dog. " * 900_000)
    score_body = score_text.SerializeToString()
    kwargs = json.dumps({"model_identity": "a" * 20_000_000})
    template = "{% set ns = namespace(s='ab') %}{% for i in range(26) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}"
    return {
        "render kwargs 20 MB": send_render(pb.RenderRequest(
            model="gpt-oss", messages_json=messages, chat_template_kwargs_json=kwargs, return_token_ids=False,
            return_text=True)),
        "request template doubling a string": send_render(pb.RenderRequest(
            model="qwen3", messages_json=messages, chat_template=template)),
        "open with 10M prompt ids": parse_open(prompt_token_ids=[1000 + i % 5000 for i in range(10_000_000)]),
        "open with 20k stop strings": parse_open(stop=[f"stop-{i}-{'x' * (i % 30)}" for i in range(20_000)]),
        # 40 MB of text, some 9M ids: handed over as a list they held the GIL (and the loop) 0.3-0.5 s.
        "Score of a 40 MB text": lambda: score(score_body, timeout=120),
    }


#: Runs of one stall before it fails: a server that holds the loop (or the GIL) does so in every run,
#: while a loaded shared machine delays a process now and then whatever it runs.
ATTEMPTS = 3


def test_health_checks_stay_fast_while_each_stall_runs(server: LiveServer) -> None:
    report: dict[str, list] = {}
    for name, stall in _stalls(server.tcp).items():
        for _attempt in range(ATTEMPTS):
            took, latencies = _health_while(server.tcp, stall)
            assert latencies, f"{name}: finished before any health check ({took:.3f} s)"
            report.setdefault(name, []).append((round(took, 3), round(max(latencies) * 1e3, 1), len(latencies)))
            if max(latencies) < HEALTH_BOUND_S:
                break
        else:
            pytest.fail(f"{name}: a health check took {HEALTH_BOUND_S * 1e3:.0f} ms or more in each of {ATTEMPTS} runs "
                        f"(stall s, worst health ms, checks): {report[name]}")
    print("stall s / worst health ms / checks, per run:", report)


def _step(stub_call, request_id: str, ids: list[int]) -> None:  # noqa: ANN001
    stub_call.write(pb.ParseStreamRequest(step=pb.Step(items=[pb.StepTokens(request_id=request_id, token_ids=ids)])))


def test_one_stop_among_twenty_thousand_ends_the_request_where_it_alone_would(server: LiveServer) -> None:
    # The stop-string matcher is one automaton over all of a request's stops (its per-step cost with 20k
    # stops is a row of `make bench`, bench/parse.py). Here: with 20k decoys around the one stop string that
    # occurs, the request ends at the same place with the same text as with that stop string alone, for
    # every chunking of the output (one token per step, random splits, everything at once).
    import random

    from sidecar.backend import EncodeOptions, ParseLimits, ParseOpenConfig
    from sidecar.native import NativeParseModel, NativeParseMux, NativeTokenizer

    tok = NativeTokenizer.from_dir(require_shared_models() / "qwen3")
    model = NativeParseModel(tok)
    text = "The quick brown fox jumps over the lazy dog. " * 40 + "Then the cat sat on the mat, and more text follows."
    ids = tok.encode_batch([text], EncodeOptions())[0].ids
    decoys = tuple(f"never-{i}-{'q' * (i % 30)}" for i in range(20_000))

    def run(stops: tuple[str, ...], chunks: list[int]) -> tuple[str, str, bool]:
        mux = NativeParseMux(ParseLimits())
        mux.open(model, "r", "", ParseOpenConfig(stop=stops).as_dict(), [])
        parts, matched, finished, at = [], "", False, 0
        for size in chunks:
            step = pb.Step(items=[pb.StepTokens(request_id="r", token_ids=ids[at:at + size])])
            at += size
            reply = pb.ParseStreamResponse.FromString(mux.handle(pb.ParseStreamRequest(step=step).SerializeToString()))
            for delta in reply.deltas:
                parts.append(delta.content)
                matched = matched or delta.matched_stop
                finished = finished or delta.finished
            if finished:
                break
        mux.close()
        return "".join(parts), matched, finished

    rng = random.Random(9)
    chunkings = [[1] * len(ids), [len(ids)]]
    for _ in range(3):
        sizes, left = [], len(ids)
        while left:
            sizes.append(min(left, rng.randint(1, 9)))
            left -= sizes[-1]
        chunkings.append(sizes)
    alone = run(("sat on the",), chunkings[0])
    assert alone[1:] == ("sat on the", True) and alone[0].endswith("Then the cat "), alone
    for chunks in chunkings:
        assert run(decoys[:10_000] + ("sat on the",) + decoys[10_000:], chunks) == alone, chunks


def test_limits_are_clear_errors_naming_the_flag(tmp_path: Path) -> None:
    models = require_shared_models()
    live = start_server(tmp_path, "--model", f"qwen3={models / 'qwen3'}", "--max-message-mb", "128")
    try:
        stub = pb_grpc.PreprocessorStub(grpc.insecure_channel(live.uds, options=BIG))
        started = time.perf_counter()
        with pytest.raises(grpc.RpcError) as e:
            stub.Tokenize(pb.TokenizeRequest(model="qwen3", texts=["a" * 50_000_000]), timeout=60)
        refused_in = time.perf_counter() - started
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "texts[0]" in e.value.details() and "--max-word-chars" in e.value.details(), e.value.details()
        print(f"50 MB single word refused in {refused_in:.2f} s (transfer included)")
        cases = [
            (lambda: stub.Render(pb.RenderRequest(model="qwen3", messages_json="[]",
                                                  chat_template_kwargs_json="{" + " " * (2 << 20) + "}")),
             "chat_template_kwargs_json", "--max-kwargs-bytes"),
            (lambda: stub.Detokenize(pb.DetokenizeRequest(model="qwen3", sequences=[pb.TokenIds(token_ids=[1] * (17 << 20))])),
             "sequences", "--max-token-ids"),
        ]
        for call, field, flag in cases:
            with pytest.raises(grpc.RpcError) as e:
                call()
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value
            assert field in e.value.details() and flag in e.value.details(), e.value.details()
    finally:
        stop_server(live)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 1/100 s


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def test_a_cancelled_call_stops_burning_cpu_and_memory_goes_back(tmp_path: Path) -> None:
    models = require_shared_models()
    live = start_server(tmp_path, "--model", f"qwen3={models / 'qwen3'}", "--max-message-mb", "128")
    try:
        pid = live.process.pid
        stub = pb_grpc.PreprocessorStub(grpc.insecure_channel(live.uds, options=BIG))
        stub.Tokenize(pb.TokenizeRequest(model="qwen3", texts=["warm up " * 1000]), timeout=30)
        # Legitimate but long: 20 MB of prose with offsets (the slow, exact path, ~1 us per char).
        text = ("The quick brown fox jumps over the lazy dog, again and again. " * 330_000)[:20_000_000]
        sent_at = _cpu_seconds(pid)
        future = stub.Tokenize.future(pb.TokenizeRequest(model="qwen3", texts=[text], return_offsets=True), timeout=120)
        # Cancelled once the server has spent a second of CPU on it (however slowly a loaded machine
        # lets it get there); the whole call needs about twenty.
        give_up = time.monotonic() + 60
        while _cpu_seconds(pid) - sent_at < 1.0 and time.monotonic() < give_up and not future.done():
            time.sleep(0.05)
        busy = _cpu_seconds(pid) - sent_at
        assert busy >= 1.0 and not future.done(), f"the call was not running when it was cancelled ({busy:.2f} s CPU)"
        future.cancel()
        time.sleep(0.3)  # the cancellation reaches the server and the workers stop
        idle_from = _cpu_seconds(pid)
        time.sleep(1.0)
        after_cancel = _cpu_seconds(pid) - idle_from
        print(f"CPU before cancelling: {busy:.2f} s; in the second after cancelling: {after_cancel:.2f} s")
        assert after_cancel < 0.15, f"the server burned {after_cancel:.2f} s of CPU after the client went away"

        # The first large call on a worker thread builds that thread's BPE cache (`tokenizers` keeps
        # one per thread, ~16 MB for Qwen3), bounded by the number of threads, not of requests; what
        # must go back is everything a large call allocates for itself.
        big = pb.TokenizeRequest(model="qwen3", texts=[text + text[:30_000_000]])
        sizes = []
        for _ in range(3):
            response = stub.Tokenize(big, timeout=120)
            assert len(response.encodings[0].token_ids) > 5_000_000
            del response
            time.sleep(0.5)
            stub.Tokenize(pb.TokenizeRequest(model="qwen3", texts=["small"]), timeout=30)
            sizes.append(_rss_mb(pid))
        print(f"RSS after each of three 40 MB Tokenize calls: {sizes} MB")
        assert max(sizes[1:]) < sizes[0] * 1.10, f"RSS grew from {sizes[0]:.0f} to {max(sizes[1:]):.0f} MB over two more calls"
    finally:
        stop_server(live)
