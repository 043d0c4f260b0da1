"""Tokenize and Detokenize: the native core against the PyPI `tokenizers` package in-process, then the
same requests through the gRPC server over a Unix socket, and the vLLM Rust render server (`vllm-rs`)
as the peer, on the Qwen3 tokenizer (the embedded default model).

Every iteration encodes a different text (word order reshuffled per seed), so no cache of ours or
of the tokenizers can flatter the numbers.
"""

from __future__ import annotations

import multiprocessing
import random
import time
from pathlib import Path

import grpc
import tokenizers

from bench.common import Section, fmt_time, measure
from bench.peers import VllmRs
from bench.server import BenchServer
from sidecar.backend import EncodeOptions
from sidecar.native import NativeTokenizer
from sidecar.registry import materialize_embedded
from sidecar.v1 import preprocessor_pb2 as pb
from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc

SIZES = {"500 B": 500, "12 KB": 12_000, "200 KB": 200_000}
_REPO = Path(__file__).resolve().parent.parent
_BIG = [("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20)]


def _word_pool() -> list[str]:
    text = (_REPO / "README.md").read_text() if (_REPO / "README.md").exists() else ""
    for path in sorted((_REPO / "sidecar").rglob("*.py")):
        text += path.read_text()
    words = text.split()
    # Some CJK and emoji so the byte-level paths are exercised too.
    words += ["中文", "分词", "测试", "日本語", "テキスト", "한국어", "😀", "🚀", "café", "naïve"] * 20
    return words


def make_text(size: int, seed: int, pool: list[str]) -> str:
    rng = random.Random(seed)
    out, n = [], 0
    while n < size:
        w = rng.choice(pool)
        out.append(w)
        n += len(w.encode()) + 1
    return " ".join(out)[:size]


def _ratio(slow: float, fast: float) -> str:
    return f"{slow / fast:.1f}x"


def _in_process(native: NativeTokenizer, hf: tokenizers.Tokenizer, pool: list[str], quick: bool) -> tuple[Section, dict]:
    section = Section(
        "Tokenize in-process: native core vs PyPI `tokenizers` (Qwen3, one prompt per call, distinct texts)",
        ["prompt", "tokens", "tokenizers p50", "native p50", "speedup", "decode: tokenizers", "decode: native", "speedup"],
    )
    baseline = {}
    opts = EncodeOptions(add_special_tokens=False)
    for label, size in SIZES.items():
        n = 20 if quick else (200 if size < 100_000 else 40)
        texts = [make_text(size, 1000 * size + i, pool) for i in range(n + 8)]
        hf_stats = measure(lambda i: hf.encode(texts[i % len(texts)], add_special_tokens=False), n)
        nat_stats = measure(lambda i: native.encode_batch([texts[(i + 3) % len(texts)]], opts), n)
        ids = [hf.encode(t, add_special_tokens=False).ids for t in texts]
        hf_dec = measure(lambda i: hf.decode(ids[i % len(ids)]), n)
        nat_dec = measure(lambda i: native.decode_batch([ids[(i + 3) % len(ids)]], True), n)
        baseline[label] = (hf_stats.p50, texts)
        section.rows.append([
            label, str(len(ids[0])), fmt_time(hf_stats.p50), fmt_time(nat_stats.p50), _ratio(hf_stats.p50, nat_stats.p50),
            fmt_time(hf_dec.p50), fmt_time(nat_dec.p50), _ratio(hf_dec.p50, nat_dec.p50),
        ])
    section.notes.append("Target: native encode at least 10x faster than in-process `tokenizers` on 12 KB and 200 KB.")
    return section, baseline


def _batch(native: NativeTokenizer, hf: tokenizers.Tokenizer, pool: list[str], quick: bool) -> Section:
    section = Section("Tokenize a batch of 64 prompts of 2 KB (one call)", ["path", "p50 per batch", "speedup"])
    n = 5 if quick else 30
    batches = [[make_text(2000, 7_000_000 + b * 64 + i, pool) for i in range(64)] for b in range(n + 4)]
    hf_stats = measure(lambda i: hf.encode_batch(batches[i % len(batches)], add_special_tokens=False), n)
    opts = EncodeOptions(add_special_tokens=False)
    nat_stats = measure(lambda i: native.encode_batch(batches[(i + 2) % len(batches)], opts), n)
    section.rows.append(["tokenizers `encode_batch` (its own thread pool)", fmt_time(hf_stats.p50), "1.0x"])
    section.rows.append(["native `encode_batch`", fmt_time(nat_stats.p50), _ratio(hf_stats.p50, nat_stats.p50)])
    return section


def _grpc(server: BenchServer, baseline: dict, quick: bool, peer: VllmRs | None) -> Section:
    section = Section(
        "Tokenize through gRPC over a Unix socket (round trip from a Python client, same texts)",
        ["prompt", "in-process tokenizers p50", "gRPC p50", "gRPC p99", "gRPC vs in-process", "vllm-rs HTTP p50", "vllm-rs p99"],
    )
    stub = pb_grpc.PreprocessorStub(grpc.insecure_channel(server.uds, options=_BIG))
    for label, (hf_p50, texts) in baseline.items():
        n = 20 if quick else (300 if label != "200 KB" else 60)
        stats = measure(lambda i: stub.Tokenize(pb.TokenizeRequest(model="qwen3", texts=[texts[i % len(texts)]], add_special_tokens=False)), n)
        peer_cells = ["n/a", "n/a"]
        if peer is not None:
            peer_stats = measure(lambda i: peer.tokenize(texts[(i + 1) % len(texts)]), n)
            peer_cells = [fmt_time(peer_stats.p50), fmt_time(peer_stats.p99)]
        section.rows.append([label, fmt_time(hf_p50), fmt_time(stats.p50), fmt_time(stats.p99),
                             _ratio(hf_p50, stats.p50), *peer_cells])
    section.notes.append("Target: the gRPC round trip faster than in-process `tokenizers` for prompts of 12 KB and up.")
    if peer is None:
        section.notes.append("vllm-rs did not start here, so its column is empty.")
    else:
        section.notes.append("vllm-rs: vLLM 0.33.0's Rust render server, POST /v1/completions/render over loopback HTTP, same texts.")
    return section


def _client_loop(address: str, texts: list[str], seconds: float, out) -> None:  # noqa: ANN001
    stub = pb_grpc.PreprocessorStub(grpc.insecure_channel(address, options=_BIG))
    done = tokens = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        r = stub.Tokenize(pb.TokenizeRequest(model="qwen3", texts=[texts[done % len(texts)]], add_special_tokens=False))
        tokens += len(r.encodings[0].token_ids)
        done += 1
    out.put((done, tokens))


def _throughput(server: BenchServer, baseline: dict, quick: bool) -> Section:
    section = Section("Throughput, 12 KB prompts, client processes each one request at a time (UDS)",
                      ["clients", "requests/s", "tokens/s"])
    seconds = 2.0 if quick else 8.0
    texts = baseline["12 KB"][1]
    ctx = multiprocessing.get_context("spawn")
    for clients in (1, 2):
        queue = ctx.Queue()
        procs = [ctx.Process(target=_client_loop, args=(server.uds, texts, seconds, queue)) for _ in range(clients)]
        for p in procs:
            p.start()
        results = [queue.get() for _ in procs]
        for p in procs:
            p.join()
        requests = sum(r[0] for r in results)
        tokens = sum(r[1] for r in results)
        section.rows.append([str(clients), f"{requests / seconds:,.0f}", f"{tokens / seconds:,.0f}"])
    section.notes.append("This machine has 2 cores shared by the server and the clients.")
    return section


def run(quick: bool) -> list[Section]:
    model_dir = materialize_embedded()
    native = NativeTokenizer.from_dir(model_dir)
    hf = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    pool = _word_pool()
    sections = []
    in_process, baseline = _in_process(native, hf, pool, quick)
    sections.append(in_process)
    sections.append(_batch(native, hf, pool, quick))
    with BenchServer() as server, VllmRs.start_or_none() as peer:
        sections.append(_grpc(server, baseline, quick, peer))
        sections.append(_throughput(server, baseline, quick))
    return sections
