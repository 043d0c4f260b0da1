"""The real server as a subprocess, on a temp Unix socket and on loopback TCP: every RPC, bad input,
health, reflection, metrics, limits, deadlines, isolation of large requests, and graceful drain.
"""

from __future__ import annotations

import concurrent.futures
import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Iterator

import grpc
import pytest
import tokenizers
from grpc_health.v1 import health_pb2, health_pb2_grpc

from sidecar.v1 import preprocessor_pb2 as pb
from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc
from tests.conftest import REPO, SHARED_MODELS, LiveServer, start_server, stop_server

pytestmark = pytest.mark.e2e


_BIG = [("grpc.max_receive_message_length", 256 << 20), ("grpc.max_send_message_length", 256 << 20)]


def stub(address: str) -> pb_grpc.PreprocessorStub:
    return pb_grpc.PreprocessorStub(grpc.insecure_channel(address, options=_BIG))


@pytest.fixture(scope="module", params=["tcp", "uds"])
def client(request: pytest.FixtureRequest, live_server: LiveServer) -> pb_grpc.PreprocessorStub:
    return stub(live_server.tcp if request.param == "tcp" else live_server.uds)


def qwen3_reference(live_server: LiveServer) -> tokenizers.Tokenizer:
    source = next(m for m in stub(live_server.tcp).ListModels(pb.ListModelsRequest()).models if m.name == "qwen3").source
    directory = Path(source) if not source.startswith("embedded:") else None
    if directory is None:
        from sidecar.registry import materialize_embedded

        directory = materialize_embedded()
    return tokenizers.Tokenizer.from_file(str(directory / "tokenizer.json"))


TEXTS = ["Hello, world!", "", "中文 and emoji 😀👨‍👩‍👧", "  spaces\n\nnewlines\t", "<|im_start|>user\nhi<|im_end|>"]


def test_tokenize_matches_hugging_face(client: pb_grpc.PreprocessorStub, live_server: LiveServer) -> None:
    hf = qwen3_reference(live_server)
    response = client.Tokenize(pb.TokenizeRequest(model="qwen3", texts=TEXTS, return_offsets=True, return_tokens=True))
    assert len(response.encodings) == len(TEXTS)
    for text, e in zip(TEXTS, response.encodings):
        ref = hf.encode(text)
        assert list(e.token_ids) == ref.ids
        assert list(e.tokens) == ref.tokens
        assert list(e.offsets) == [x for pair in ref.offsets for x in pair]
        assert not e.truncated
    assert response.fingerprint.startswith("sha256:")


def test_tokenize_options(client: pb_grpc.PreprocessorStub, live_server: LiveServer) -> None:
    hf = qwen3_reference(live_server)
    text = "one two three four five six seven"
    full = hf.encode(text, add_special_tokens=False).ids
    right = client.Tokenize(pb.TokenizeRequest(model="qwen3", texts=[text], max_length=3, add_special_tokens=False))
    assert list(right.encodings[0].token_ids) == full[:3] and right.encodings[0].truncated
    left = client.Tokenize(pb.TokenizeRequest(model="qwen3", texts=[text], max_length=3,
                                              truncation_side=pb.TRUNCATION_SIDE_LEFT))
    assert list(left.encodings[0].token_ids) == full[-3:] and left.encodings[0].truncated
    assert client.Tokenize(pb.TokenizeRequest(model="qwen3")).encodings == []
    empty = client.Tokenize(pb.TokenizeRequest(model="qwen3", texts=[""]))
    assert list(empty.encodings[0].token_ids) == []


def test_detokenize(client: pb_grpc.PreprocessorStub, live_server: LiveServer) -> None:
    hf = qwen3_reference(live_server)
    ids = hf.encode("<|im_start|>assistant\nHi 😀<|im_end|>").ids
    response = client.Detokenize(pb.DetokenizeRequest(model="qwen3", sequences=[pb.TokenIds(token_ids=ids), pb.TokenIds()]))
    assert list(response.texts) == [hf.decode(ids, skip_special_tokens=True), ""]
    keep = client.Detokenize(pb.DetokenizeRequest(model="qwen3", sequences=[pb.TokenIds(token_ids=ids)],
                                                  skip_special_tokens=False))
    assert keep.texts[0] == hf.decode(ids, skip_special_tokens=False)
    assert client.Detokenize(pb.DetokenizeRequest(model="qwen3")).texts == []


def test_list_models_and_fingerprints(client: pb_grpc.PreprocessorStub) -> None:
    models = {m.name: m for m in client.ListModels(pb.ListModelsRequest()).models}
    qwen = models["qwen3"]
    assert qwen.vocab_size == 151669
    assert qwen.encoder == "fastokens" and qwen.backend == "native" and qwen.tokenizer_format == "tokenizer.json"
    assert qwen.eos_token == "<|im_end|>"
    assert 151645 in qwen.stop_token_ids
    assert "default" in qwen.chat_templates
    assert {t.content for t in qwen.special_tokens} >= {"<|im_start|>", "<|im_end|>", "<|endoftext|>"}
    tok = client.Tokenize(pb.TokenizeRequest(model="qwen3", texts=["x"]))
    detok = client.Detokenize(pb.DetokenizeRequest(model="qwen3", sequences=[pb.TokenIds(token_ids=[87])]))
    assert tok.fingerprint == detok.fingerprint == qwen.fingerprint
    if "gpt2" in models:
        assert models["gpt2"].fingerprint != qwen.fingerprint


def test_block_hashing_spec_is_validated(client: pb_grpc.PreprocessorStub) -> None:
    with pytest.raises(grpc.RpcError) as e:
        client.Tokenize(pb.TokenizeRequest(model="qwen3", texts=["x"], block_hashing=pb.BlockHashing(block_size=16)))
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "block_hashing" in e.value.details()


@pytest.mark.parametrize(
    "call,code,fragment",
    [
        (lambda s: s.Tokenize(pb.TokenizeRequest(model="nope", texts=["x"])), grpc.StatusCode.NOT_FOUND, "model: unknown model 'nope'"),
        (lambda s: s.Tokenize(pb.TokenizeRequest(texts=["x"])), grpc.StatusCode.NOT_FOUND, "model: unknown model ''"),
        (lambda s: s.Detokenize(pb.DetokenizeRequest(model="nope")), grpc.StatusCode.NOT_FOUND, "model"),
        (
            lambda s: s.Detokenize(pb.DetokenizeRequest(model="qwen3", sequences=[pb.TokenIds(token_ids=[1]), pb.TokenIds(token_ids=[1, 2, 999999])])),
            grpc.StatusCode.INVALID_ARGUMENT,
            "sequences[1]: token_ids[2]: id 999999 is not in the vocabulary (size 151669)",
        ),
        (
            lambda s: s.Tokenize(pb.TokenizeRequest(model="qwen3", texts=["x"], truncation_side=7)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "truncation_side",
        ),
    ],
)
def test_bad_input_gets_a_clear_status(client: pb_grpc.PreprocessorStub, call, code, fragment) -> None:  # noqa: ANN001
    with pytest.raises(grpc.RpcError) as e:
        call(client)
    assert e.value.code() == code
    assert fragment in e.value.details()
    # ... and the server goes on.
    assert client.Tokenize(pb.TokenizeRequest(model="qwen3", texts=["still fine"])).encodings


def test_health_per_model(live_server: LiveServer) -> None:
    health = health_pb2_grpc.HealthStub(grpc.insecure_channel(live_server.uds))
    for service in ["", "sidecar.v1.Preprocessor", "qwen3"]:
        assert health.Check(health_pb2.HealthCheckRequest(service=service)).status == health_pb2.HealthCheckResponse.SERVING
    with pytest.raises(grpc.RpcError) as e:
        health.Check(health_pb2.HealthCheckRequest(service="no-such-model"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND


def test_request_id_is_echoed_and_logged(live_server: LiveServer) -> None:
    s = stub(live_server.tcp)
    _, call = s.Tokenize.with_call(pb.TokenizeRequest(model="qwen3", texts=["x"]), metadata=(("x-request-id", "req-abc-123"),))
    assert ("x-request-id", "req-abc-123") in tuple(call.trailing_metadata())
    _, call = s.Tokenize.with_call(pb.TokenizeRequest(model="qwen3", texts=["x"]))
    generated = dict(call.trailing_metadata())["x-request-id"]
    assert len(generated) == 16
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        ids = {line.get("request_id") for line in live_server.log_lines() if line.get("event") == "rpc"}
        if {"req-abc-123", generated} <= ids:
            break
        time.sleep(0.05)
    assert {"req-abc-123", generated} <= ids


def test_metrics_count_requests_and_errors(live_server: LiveServer) -> None:
    s = stub(live_server.tcp)
    s.Tokenize(pb.TokenizeRequest(model="qwen3", texts=["x"]))
    with pytest.raises(grpc.RpcError):
        s.Tokenize(pb.TokenizeRequest(model="nope", texts=["x"]))
    body = urllib.request.urlopen(f"http://127.0.0.1:{live_server.metrics_port}/metrics", timeout=5).read().decode()
    assert 'sidecar_requests_total{code="OK",rpc="Tokenize"}' in body
    assert 'sidecar_errors_total{code="NOT_FOUND",rpc="Tokenize"}' in body
    assert 'sidecar_request_seconds_bucket{le="0.001",rpc="Tokenize"}' in body
    assert 'sidecar_stage_seconds_count{rpc="Tokenize",stage="native"}' in body
    assert "sidecar_models_loaded" in body


def big_batch(n_texts: int, size: int) -> list[str]:
    words = ["alpha", "beta", "gamma", "delta", "中文", "😀", "x1", "123", "end."]
    return [" ".join(words[(i * 7 + k) % len(words)] + str(k % 97) for k in range(size // 6)) for i in range(n_texts)]


def test_large_request_does_not_stall_small_ones(live_server: LiveServer) -> None:
    """While a ~20 MB batch (millions of tokens) is encoded on the worker pool, health checks and small
    requests keep completing: they all finish before the large one does."""
    big = stub(live_server.uds)
    small = stub(live_server.uds)
    health = health_pb2_grpc.HealthStub(grpc.insecure_channel(live_server.uds))
    texts = big_batch(48, 400_000)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(big.Tokenize, pb.TokenizeRequest(model="qwen3", texts=texts), timeout=120)
        time.sleep(0.2)  # let the large request reach the server (not an assertion)
        done_small = 0
        for _ in range(30):
            assert health.Check(health_pb2.HealthCheckRequest(service="qwen3")).status == health_pb2.HealthCheckResponse.SERVING
            assert small.Tokenize(pb.TokenizeRequest(model="qwen3", texts=["small"])).encodings
            done_small += 1
        assert not future.done(), "the large request finished before 30 small round trips: make it larger"
        response = future.result()
    assert done_small == 30
    assert len(response.encodings) == 48 and all(len(e.token_ids) > 10_000 for e in response.encodings)


def test_deadline_is_honoured_and_server_recovers(live_server: LiveServer) -> None:
    s = stub(live_server.uds)
    with pytest.raises(grpc.RpcError) as e:
        s.Tokenize(pb.TokenizeRequest(model="qwen3", texts=big_batch(64, 300_000)), timeout=0.05)
    assert e.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert s.Tokenize(pb.TokenizeRequest(model="qwen3", texts=["after"]), timeout=10).encodings


@pytest.fixture(scope="module")
def reference_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """Reference backend, reflection on, a 2 MiB message limit."""
    server = start_server(tmp_path_factory.mktemp("reference"), "--backend", "reference", "--reflection",
                          "--max-message-mb", "2")
    yield server
    stop_server(server)


def test_reference_backend_server_agrees(reference_server: LiveServer, live_server: LiveServer) -> None:
    native, reference = stub(live_server.tcp), stub(reference_server.uds)
    request = pb.TokenizeRequest(model="qwen3", texts=TEXTS, return_offsets=True, return_tokens=True, max_length=4)
    assert native.Tokenize(request).encodings == reference.Tokenize(request).encodings
    ref_model = reference.ListModels(pb.ListModelsRequest()).models[0]
    assert (ref_model.backend, ref_model.encoder) == ("reference", "tokenizers-python")
    ids = native.Tokenize(pb.TokenizeRequest(model="qwen3", texts=TEXTS)).encodings
    detok = pb.DetokenizeRequest(model="qwen3", sequences=[pb.TokenIds(token_ids=e.token_ids) for e in ids])
    assert native.Detokenize(detok).texts == reference.Detokenize(detok).texts
    with pytest.raises(grpc.RpcError) as e:
        reference.Detokenize(pb.DetokenizeRequest(model="qwen3", sequences=[pb.TokenIds(token_ids=[5, 10**6])]))
    assert e.value.details() == "sequences[0]: token_ids[1]: id 1000000 is not in the vocabulary (size 151669)"


def test_message_size_limit(reference_server: LiveServer) -> None:
    s = stub(reference_server.uds)
    with pytest.raises(grpc.RpcError) as e:
        s.Tokenize(pb.TokenizeRequest(model="qwen3", texts=["x" * (3 * 1024 * 1024)]))
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def requests_total(server: LiveServer, rpc: str, code: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    body = urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}/metrics", timeout=5).read().decode()
    return sum(s.value for f in text_string_to_metric_families(body) for s in f.samples
               if s.name == "sidecar_requests_total" and s.labels == {"rpc": rpc, "code": code})


@pytest.mark.parametrize("backend", ["native", "reference"])
def test_a_response_over_the_message_limit_is_refused_as_such(backend: str, reference_server: LiveServer,
                                                                tmp_path: Path) -> None:
    """A request within --max-message-mb whose response is not: gRPC refused to send it (the client
    got RESOURCE_EXHAUSTED "Sent message larger than max") while the server logged and counted the
    call OK. The server refuses it itself now, naming the flag and the sizes, and counts it so."""
    server = reference_server if backend == "reference" else start_server(tmp_path, "--max-message-mb", "2")
    try:
        # 800 KB of text, about 400,000 tokens: with offsets and token strings several MB of response.
        request = pb.TokenizeRequest(model="qwen3", texts=["x " * 400_000], return_offsets=True, return_tokens=True)
        with pytest.raises(grpc.RpcError) as e:
            stub(server.uds).Tokenize(request, metadata=(("x-request-id", f"oversize-{backend}"),), timeout=60)
        assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert e.value.details().startswith("Tokenize: the response is "), e.value.details()
        assert f"over the server's message limit of {2 << 20} bytes (--max-message-mb)" in e.value.details()
        assert requests_total(server, "Tokenize", "RESOURCE_EXHAUSTED") >= 1
        (line,) = [line for line in server.log_lines() if line.get("request_id") == f"oversize-{backend}"]
        assert (line["code"], line["error"]) == ("RESOURCE_EXHAUSTED", e.value.details())
    finally:
        if server is not reference_server:
            stop_server(server)


def test_reflection_behind_a_flag(reference_server: LiveServer, live_server: LiveServer) -> None:
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    def services(address: str) -> list[str]:
        r = reflection_pb2_grpc.ServerReflectionStub(grpc.insecure_channel(address))
        replies = r.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]))
        return [s.name for reply in replies for s in reply.list_services_response.service]

    assert {"sidecar.v1.Preprocessor", "grpc.health.v1.Health"} <= set(services(reference_server.uds))
    with pytest.raises(grpc.RpcError) as e:
        services(live_server.uds)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_cli_client(live_server: LiveServer) -> None:
    def cli(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "sidecar", *args, "--target", live_server.uds], check=True,
                              capture_output=True, text=True, cwd=REPO).stdout

    out = json.loads(cli("tokenize", "--json", "--model", "qwen3", "Hello world"))
    assert out["encodings"][0]["token_ids"] == [9707, 1879]
    assert cli("detokenize", "--model", "qwen3", "9707,1879").strip() == "Hello world"
    assert "qwen3" in cli("models")
    failed = subprocess.run([sys.executable, "-m", "sidecar", "tokenize", "--model", "nope", "x", "--target", live_server.uds],
                            capture_output=True, text=True, cwd=REPO)
    assert failed.returncode == 1 and "NOT_FOUND" in failed.stderr


def test_sigterm_drains_in_flight_requests(tmp_path: Path) -> None:
    args = ["--model", f"gpt2={SHARED_MODELS / 'gpt2'}"] if (SHARED_MODELS / "gpt2").is_dir() else []
    server = start_server(tmp_path, *args)
    model = "gpt2" if args else "qwen3"
    s = stub(server.uds)
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            future = pool.submit(s.Tokenize, pb.TokenizeRequest(model=model, texts=big_batch(48, 400_000)), timeout=120)
            time.sleep(0.3)  # let the request reach the server (not an assertion)
            server.process.send_signal(signal.SIGTERM)
            response = future.result()
        assert len(response.encodings) == 48
        assert server.process.wait(30) == 0
        events = [line["event"] for line in server.log_lines()]
        assert events.index("draining") < events.index("stopped")
    finally:
        stop_server(server)
