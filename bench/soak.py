"""`make soak`: a mixed load against one real server for a set time, then a report.

The server runs on the embedded Qwen3 model with a KV-event source: a local ZMQ publisher (the
test suite's stand-in engine) that keeps storing and removing blocks of a set of prompts while the
load runs. One client process per load, each a closed loop (a new call as soon as one returns):

| load | what |
| --- | --- |
| Tokenize small | one ~40-word text per call, 4 in flight |
| Tokenize large | one ~100 KB text per call, 1 in flight |
| Render chat | the short chat of bench/render.py, 2 in flight |
| Render agentic | the agentic request of bench/render.py (8 KB system, 6 tools, 10 turns), 2 in flight |
| ParseStream | one stream carrying 256 concurrent requests (hermes + qwen3 output), one token per request per step; a request that ends is replaced by a new one |
| Score | token ids of the published prompts, 2 in flight |

It stops by itself after `--seconds` (`SOAK_SECONDS`, default 600) and reports, per load: calls,
errors by status code, p50/p99 latency in the first and in the last minute; the server's RSS
sampled every few seconds; the machine's load average (the machine may be shared). Targets: no
errors, last-minute p99 within 2x of the first minute's, RSS growth under 5% after warm-up (the
first 20% of the run, at least 60 s). Writes the report to `--out` (bench/soak.md) and stdout;
exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import platform
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

BLOCK_SIZE = 16
PARSE_REQUESTS = 256
PARSE_OUTPUT = (
    "<think>\nThe user wants the weather in Paris, so I should call the tool.\n</think>\n\n"
    "Let me check that for you. <tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
    "{\"city\": \"Paris\", \"days\": 3, \"units\": \"celsius\"}}\n</tool_call>"
)
PARSE_TOOLS = json.dumps([{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}])


# ---- client processes ----------------------------------------------------------------------------


class Recorder:
    """Latencies by minute of the run, and errors by code (thread-safe enough: appends only)."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.by_minute: dict[int, list[float]] = {}
        self.errors: dict[str, int] = {}
        self.examples: dict[str, str] = {}

    def ok(self, began: float, ended: float) -> None:
        self.by_minute.setdefault(int((began - self.start) // 60), []).append(ended - began)

    def error(self, code: str, details: str) -> None:
        self.errors[code] = self.errors.get(code, 0) + 1
        self.examples.setdefault(code, details[:300])

    def summary(self, name: str, minutes: int) -> dict:
        def stats(values: list[float]) -> dict:
            if not values:
                return {"n": 0, "p50": None, "p99": None}
            values = sorted(values)
            return {"n": len(values), "p50": values[len(values) // 2], "p99": values[min(len(values) - 1, int(len(values) * 0.99))]}

        last = max(0, minutes - 1)
        return {
            "name": name,
            "calls": sum(len(v) for v in self.by_minute.values()) + sum(self.errors.values()),
            "errors": self.errors,
            "error_examples": self.examples,
            "first": stats(self.by_minute.get(0, [])),
            "last": stats(self.by_minute.get(last, [])),
            "per_minute_p99": [stats(self.by_minute.get(m, []))["p99"] for m in range(minutes)],
        }


def unary_load(name: str, target: str, start: float, end: float, concurrency: int, requests: list[bytes], method: str,
               out: mp.Queue) -> None:
    import grpc

    rec = Recorder(start)
    limit = 64 << 20
    channel = grpc.insecure_channel(target, options=[("grpc.max_send_message_length", limit),
                                                     ("grpc.max_receive_message_length", limit)])
    call = channel.unary_unary(method)

    def loop(k: int) -> None:
        i = k
        while time.time() < end:
            began = time.time()
            try:
                call(requests[i % len(requests)], timeout=30)
                rec.ok(began, time.time())
            except grpc.RpcError as e:
                rec.error(e.code().name, e.details() or "")
            i += concurrency

    threads = [threading.Thread(target=loop, args=(k,)) for k in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.put(rec.summary(name, minutes_of(start, end)))


def parse_load(target: str, start: float, end: float, prompt: list[int], output: list[int], out: mp.Queue) -> None:
    """One engine: one stream, PARSE_REQUESTS requests in flight, one token each per step."""
    import grpc

    from sidecar.v1 import preprocessor_pb2 as pb

    rec, opens = Recorder(start), Recorder(start)
    channel = grpc.insecure_channel(target)
    outbox: list[bytes] = []
    cond = threading.Condition()

    def messages():  # noqa: ANN202
        while True:
            with cond:
                cond.wait_for(lambda: outbox)
                message = outbox.pop(0)
            if message == b"END":
                return
            yield message

    def send(message: bytes) -> None:
        with cond:
            outbox.append(message)
            cond.notify()

    answers = channel.stream_stream("/sidecar.v1.Preprocessor/ParseStream",
                                    response_deserializer=pb.ParseStreamResponse.FromString)(messages(), timeout=end - time.time() + 120)

    def open_message(rid: str) -> bytes:
        return pb.ParseStreamRequest(open=pb.OpenRequest(
            request_id=rid, model="qwen3", tool_parser="hermes", reasoning_parser="qwen3", tools_json=PARSE_TOOLS,
            prompt_token_ids=prompt)).SerializeToString()

    def exchange(message: bytes, recorder: Recorder) -> pb.ParseStreamResponse | None:
        began = time.time()
        send(message)
        answer = next(answers)
        failed = [d for d in answer.deltas if d.HasField("error")]
        if failed:
            recorder.error(f"request {failed[0].error.code}", failed[0].error.message)
        else:
            recorder.ok(began, time.time())
        return answer

    rng = random.Random(5)
    serial = 0
    position: dict[str, int] = {}
    try:
        for _ in range(PARSE_REQUESTS):
            rid = f"r{serial}"
            serial += 1
            exchange(open_message(rid), opens)
            position[rid] = rng.randrange(len(output))  # staggered, so requests end at different steps
        while time.time() < end:
            items, done = [], []
            for rid, pos in position.items():
                finished = pos + 1 >= len(output)
                items.append(pb.StepTokens(request_id=rid, token_ids=[output[pos]], finished=finished))
                if finished:
                    done.append(rid)
                else:
                    position[rid] = pos + 1
            exchange(pb.ParseStreamRequest(step=pb.Step(items=items)).SerializeToString(), rec)
            for rid in done:
                del position[rid]
                new = f"r{serial}"
                serial += 1
                exchange(open_message(new), opens)
                position[new] = 0
    except grpc.RpcError as e:
        rec.error(e.code().name, e.details() or "")
    finally:
        send(b"END")
    minutes = minutes_of(start, end)
    out.put(rec.summary(f"ParseStream step ({PARSE_REQUESTS} requests)", minutes))
    out.put(opens.summary("ParseStream open", minutes))


def minutes_of(start: float, end: float) -> int:
    return max(1, int(-(-(end - start) // 60)))


# ---- the engine's KV events ----------------------------------------------------------------------


class EventFeed:
    """Keeps storing and removing the prompts' blocks on the publisher until stopped."""

    def __init__(self, publisher, prompts: list[list[int]]) -> None:  # noqa: ANN001
        from tests.kv.publisher import removed, stored
        from router_adapter import _reference
        from router_adapter.spec import HashSpec

        spec = HashSpec("vllm_sha256", BLOCK_SIZE)
        self._blocks = []
        for ids in prompts:
            n = len(ids) // BLOCK_SIZE
            self._blocks.append((_reference.block_hashes(ids, spec)[:n], ids[: n * BLOCK_SIZE]))
        self._stored, self._removed = stored, removed
        self._publisher = publisher
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.batches = 0

    def start(self) -> None:
        for hashes, ids in self._blocks:
            self._publisher.publish([self._stored(hashes, ids, BLOCK_SIZE)])
        self._thread.start()

    def _run(self) -> None:
        rng = random.Random(9)
        while not self._stop.wait(0.05):
            hashes, ids = rng.choice(self._blocks)
            cut = rng.randrange(1, len(hashes) + 1)
            # Drop the tail of a prompt's chain and store it again: the index churns, its size stays.
            self._publisher.publish([self._removed(hashes[cut - 1:]),
                                     self._stored(hashes[cut - 1:], ids[(cut - 1) * BLOCK_SIZE:], BLOCK_SIZE,
                                                  parent=hashes[cut - 2] if cut > 1 else None)])
            self.batches += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


# ---- the run -------------------------------------------------------------------------------------


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def build_requests(target: str) -> dict:
    """Request bodies for every load, and the ids the parse and Score loads use."""
    import grpc

    from bench.render import prose, requests as render_requests
    from sidecar.v1 import kv_router_pb2 as kv
    from sidecar.v1 import preprocessor_pb2 as pb
    from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc

    stub = pb_grpc.PreprocessorStub(grpc.insecure_channel(target))
    rng = random.Random(3)
    small = [pb.TokenizeRequest(model="qwen3", texts=[prose(rng, 40)]).SerializeToString() for _ in range(64)]
    large = [pb.TokenizeRequest(model="qwen3", texts=[prose(rng, 16_000)]).SerializeToString() for _ in range(4)]
    bodies = render_requests()

    def render(body: dict, variants: int) -> list[bytes]:
        out = []
        for v in range(variants):
            messages = json.loads(json.dumps(body["messages"]))
            messages[-1]["content"] += f" (variant {v})"
            out.append(pb.RenderRequest(model="qwen3", messages_json=json.dumps(messages),
                                        tools_json=json.dumps(body.get("tools") or []) if body.get("tools") else "")
                       .SerializeToString())
        return out

    chat = render(bodies["short chat"], 16)
    agentic = render(bodies["agentic (8 KB system, 6 tools, 10 turns)"], 16)
    prompts = [list(stub.Tokenize(pb.TokenizeRequest(model="qwen3", texts=[prose(rng, 300)]), timeout=30).encodings[0].token_ids)
               for _ in range(32)]
    score = [kv.ScoreRequest(model="qwen3", token_ids=pb.TokenIds(token_ids=ids[: rng.randrange(BLOCK_SIZE, len(ids))]))
             .SerializeToString() for ids in prompts for _ in range(2)]
    encode = lambda text: list(stub.Tokenize(pb.TokenizeRequest(model="qwen3", texts=[text], add_special_tokens=False),  # noqa: E731
                                             timeout=30).encodings[0].token_ids)
    parse_prompt = encode("<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n")
    return {"small": small, "large": large, "chat": chat, "agentic": agentic, "score": score, "prompts": prompts,
            "parse_prompt": parse_prompt, "parse_output": encode(PARSE_OUTPUT)}


def run(seconds: float, sample_every: float) -> tuple[list[dict], list[tuple[float, int, float]], dict]:
    import zmq

    from tests.kv.publisher import FakeEnginePublisher
    from tests.conftest import start_server, stop_server

    ctx = zmq.Context()
    publisher = FakeEnginePublisher(ctx)
    tmp = tempfile.TemporaryDirectory(prefix="sidecar-soak-")
    server = start_server(Path(tmp.name), "--kv-events", f"worker-a={publisher.endpoint},replay={publisher.replay_endpoint},model=qwen3",
                          "--kv-block-size", str(BLOCK_SIZE))
    info: dict = {}
    try:
        publisher.wait_for_subscriber(30)
        target = server.uds
        bodies = build_requests(target)
        feed = EventFeed(publisher, bodies["prompts"])
        feed.start()
        time.sleep(1.0)
        spawn = mp.get_context("spawn")
        results: mp.Queue = spawn.Queue()
        start = time.time() + 5.0  # the clients start their clocks together, after importing
        end = start + seconds
        pre, kv = "/sidecar.v1.Preprocessor/", "/sidecar.v1.KvRouter/"
        loads = [
            ("Tokenize small", 4, bodies["small"], pre + "Tokenize"),
            ("Tokenize large (100 KB)", 1, bodies["large"], pre + "Tokenize"),
            ("Render chat", 2, bodies["chat"], pre + "Render"),
            ("Render agentic", 2, bodies["agentic"], pre + "Render"),
            ("Score", 2, bodies["score"], kv + "Score"),
        ]
        procs = [spawn.Process(target=unary_load, args=(name, target, start, end, n, reqs, method, results))
                 for name, n, reqs, method in loads]
        procs.append(spawn.Process(target=parse_load, args=(target, start, end, bodies["parse_prompt"], bodies["parse_output"],
                                                            results)))
        for p in procs:
            p.start()
        samples = []
        while time.time() < end:
            if server.process.poll() is not None:
                raise RuntimeError(f"the server died:\n{server.log_path.read_text()[-4000:]}")
            if time.time() >= start:
                samples.append((time.time() - start, rss_bytes(server.process.pid), os.getloadavg()[0]))
            time.sleep(sample_every)
        summaries = [results.get(timeout=300) for _ in range(len(loads) + 2)]
        order = [name for name, *_ in loads]
        summaries.sort(key=lambda s: order.index(s["name"]) if s["name"] in order else len(order))
        for p in procs:
            p.join(60)
        feed.stop()
        info["kv_batches"] = feed.batches
        info["server_alive"] = server.process.poll() is None
    finally:
        code = stop_server(server)
        info["exit_code"] = code
        publisher.close()
        ctx.term()
        tmp.cleanup()
    return summaries, samples, info


def report(seconds: float, summaries: list[dict], samples: list[tuple[float, int, float]], info: dict) -> tuple[str, bool]:
    ms = lambda s: "-" if s is None else f"{s * 1000:.2f} ms"  # noqa: E731
    lines = [
        "# Soak results",
        "",
        f"Generated by `make soak` on {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC: {seconds:.0f} s of mixed "
        f"load against one server (embedded Qwen3, KV events from a local publisher: {info.get('kv_batches', 0)} batches); "
        f"{os.cpu_count()} CPUs, {platform.machine()}, Python {platform.python_version()}. The machine may be shared: the "
        "load average column below shows how busy it was (2.0 = both cores in use).",
        "",
        "| load | calls | errors | p50 first min | p99 first min | p50 last min | p99 last min | p99 last/first |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ok = True
    for s in summaries:
        errors = sum(s["errors"].values())
        f, last = s["first"], s["last"]
        ratio = last["p99"] / f["p99"] if f["p99"] and last["p99"] else None
        ok &= errors == 0 and ratio is not None and ratio <= 2.0
        err_text = "0" if not errors else ", ".join(f"{k}: {v}" for k, v in s["errors"].items())
        lines.append(f"| {s['name']} | {s['calls']} | {err_text} | {ms(f['p50'])} | {ms(f['p99'])} | {ms(last['p50'])} | "
                     f"{ms(last['p99'])} | {'-' if ratio is None else f'{ratio:.2f}x'} |")
    for s in summaries:
        for code, example in s["error_examples"].items():
            lines.append(f"\n{s['name']} error {code}: {example!r}")
    lines += ["", "p99 per minute (ms): " + "; ".join(
        f"{s['name']}: " + " ".join("-" if p is None else f"{p * 1000:.1f}" for p in s["per_minute_p99"]) for s in summaries)]
    warm = max(60.0, seconds * 0.2)
    after = [r for t, r, _ in samples if t >= warm]
    growth = None
    if after:
        base = after[0]
        tail = [r for t, r, _ in samples if t >= seconds - 60] or after[-1:]
        growth = (sum(tail) / len(tail) - base) / base
        ok &= growth < 0.05
    lines += ["", f"Server RSS over time (warm-up: first {warm:.0f} s); load average of the machine:", "",
              "| t (s) | RSS (MB) | load avg |", "|---:|---:|---:|"]
    step = max(1, len(samples) // 20)
    for t, r, load in samples[::step] + ([samples[-1]] if samples and (len(samples) - 1) % step else []):
        lines.append(f"| {t:.0f} | {r / 1e6:.1f} | {load:.2f} |")
    verdicts = [
        f"- errors: {sum(sum(s['errors'].values()) for s in summaries)} (target 0)",
        "- p99 last/first minute: " + ", ".join(
            f"{s['name']} {s['last']['p99'] / s['first']['p99']:.2f}x" if s["first"]["p99"] and s["last"]["p99"] else f"{s['name']} -"
            for s in summaries) + " (target <= 2x)",
        f"- RSS growth after warm-up: {'-' if growth is None else f'{growth * 100:+.1f}%'} (target < 5%)",
        f"- server alive at the end: {info.get('server_alive')}, exit code after SIGTERM: {info.get('exit_code')}",
        f"- verdict: {'all targets met' if ok else 'a target was missed'}",
    ]
    lines += ["", "## Verdict", "", *verdicts, ""]
    return "\n".join(lines), ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", "600")))
    parser.add_argument("--sample-every", type=float, default=5.0, help="RSS sampling interval (s)")
    parser.add_argument("--out", default="bench/soak.md")
    args = parser.parse_args()
    summaries, samples, info = run(args.seconds, args.sample_every)
    text, ok = report(args.seconds, summaries, samples, info)
    Path(args.out).write_text(text)
    print(text)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
