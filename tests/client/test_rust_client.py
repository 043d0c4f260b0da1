"""The Rust client crate (`router_adapter/rust`) against the real server.

Its interop driver (`sidecar-interop`) calls every RPC of the three services (Admin: the server runs
with `--enable-admin`) and the health service through the crate's typed API, with an error of each
kind, a ParseStream carrying several requests at once, calls carrying `x-request-id` (whose echo it
checks), and a server restart (health-aware reconnect), and the Preprocessor cases plus many
concurrent calls once more through a client built with `multiplex(true)` (Tokenize, Detokenize and
Render on a pool of Multiplex streams); it checks each outcome itself and prints every request and
response as protobuf bytes. Each request is then replayed here with the Python
client against the same server: both clients must get the same response, or the same status code
and message (DEADLINE_EXCEEDED: the code, since each client words its own).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Iterator

import grpc
import pytest
import zmq
from grpc_health.v1 import health_pb2

from tests.conftest import IN_CI, REPO, LiveServer, start_server, stop_server  # noqa: E402
from tests.kv.publisher import FakeEnginePublisher, stored, wait_until  # noqa: E402
from router_adapter import _reference  # noqa: E402
from router_adapter.spec import HashSpec  # noqa: E402
from sidecar.v1 import admin_pb2 as admin  # noqa: E402
from sidecar.v1 import kv_router_pb2 as kv  # noqa: E402
from sidecar.v1 import preprocessor_pb2 as pb  # noqa: E402

pytestmark = pytest.mark.e2e

BINARY = Path(os.environ.get("SIDECAR_INTEROP_BIN", REPO / "router_adapter/rust/target/release/sidecar-interop"))
#: The limits the driver's RESOURCE_EXHAUSTED cases rely on, and the Admin service its
#: ReloadModels cases call.
MAIN_ARGS = ("--max-message-mb", "1", "--parse-max-requests", "4", "--enable-admin")
KV_TEXT = "A router asks which worker already holds this prompt's prefix. " * 12
BLOCK_SIZE = 16
#: The Rust client's default `multiplex_max_request_bytes`: larger requests take the unary path.
MULTIPLEX_MAX_REQUEST_BYTES = 256 << 10

#: method -> (full gRPC path, request class, response class)
METHODS = {
    "Tokenize": ("/sidecar.v1.Preprocessor/Tokenize", pb.TokenizeRequest, pb.TokenizeResponse),
    "Detokenize": ("/sidecar.v1.Preprocessor/Detokenize", pb.DetokenizeRequest, pb.DetokenizeResponse),
    "Render": ("/sidecar.v1.Preprocessor/Render", pb.RenderRequest, pb.RenderResponse),
    "ListModels": ("/sidecar.v1.Preprocessor/ListModels", pb.ListModelsRequest, pb.ListModelsResponse),
    "ListParsers": ("/sidecar.v1.Preprocessor/ListParsers", pb.ListParsersRequest, pb.ListParsersResponse),
    "ParseStream": ("/sidecar.v1.Preprocessor/ParseStream", pb.ParseStreamRequest, pb.ParseStreamResponse),
    "Score": ("/sidecar.v1.KvRouter/Score", kv.ScoreRequest, kv.ScoreResponse),
    "KvStatus": ("/sidecar.v1.KvRouter/KvStatus", kv.KvStatusRequest, kv.KvStatusResponse),
    "ReloadModels": ("/sidecar.v1.Admin/ReloadModels", admin.ReloadModelsRequest, admin.ReloadModelsResponse),
    "Check": ("/grpc.health.v1.Health/Check", health_pb2.HealthCheckRequest, health_pb2.HealthCheckResponse),
}


def interop_binary() -> Path:
    if BINARY.is_file():
        return BINARY
    message = f"{BINARY} is not built: run `make rust-client` (make test does)"
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def kv_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server with one KV-event source that has published the blocks of KV_TEXT."""
    ctx = zmq.Context()
    engine = FakeEnginePublisher(ctx)
    live = start_server(tmp_path_factory.mktemp("kv"), "--kv-events", f"worker-a={engine.endpoint},model=qwen3",
                        "--kv-block-size", str(BLOCK_SIZE))
    try:
        engine.wait_for_subscriber(30)
        channel = grpc.insecure_channel(live.tcp)
        ids = list(_unary(channel, "Tokenize")(pb.TokenizeRequest(model="qwen3", texts=[KV_TEXT]), timeout=30).encodings[0].token_ids)
        n = len(ids) // BLOCK_SIZE
        hashes = _reference.block_hashes(ids, HashSpec("vllm_sha256", BLOCK_SIZE))
        engine.publish([stored(hashes[:n], ids[: n * BLOCK_SIZE], BLOCK_SIZE)])
        score = _unary(channel, "Score")
        wait_until(lambda: [w.blocks for w in score(kv.ScoreRequest(model="qwen3", text=KV_TEXT), timeout=30).workers] == [n],
                   what="the published blocks in the index")
        channel.close()
        yield live
    finally:
        stop_server(live)
        engine.close()
        ctx.term()


def _unary(channel: grpc.Channel, method: str):  # noqa: ANN202
    path, request_class, response_class = METHODS[method]
    return channel.unary_unary(path, request_serializer=request_class.SerializeToString,
                               response_deserializer=response_class.FromString)


def run_driver(tmp_path: Path, kv_target: str) -> tuple[list[dict], LiveServer, list[dict]]:
    """Runs the driver against a fresh main server, restarting it when the driver asks; returns the
    records, the server now running, and the log lines of the first server (the restart overwrites
    its log)."""
    server = start_server(tmp_path, *MAIN_ARGS)
    first_log: list[dict] = []
    cmd = [str(interop_binary()), "--target", server.uds, "--kv-target", kv_target, "--kv-text", KV_TEXT, "--reconnect"]
    driver = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watchdog = threading.Timer(180, driver.kill)
    watchdog.start()
    records = []
    try:
        for line in driver.stdout:
            record = json.loads(line)
            if record.get("event") == "stop-server":
                stop_server(server)
                first_log = server.log_lines()
            elif record.get("event") == "start-server":
                server = start_server(tmp_path, *MAIN_ARGS)
            else:
                records.append(record)
                continue
            driver.stdin.write("done\n")
            driver.stdin.flush()
        stderr = driver.stderr.read()
        assert driver.wait() == 0, f"sidecar-interop failed:\n{stderr}"
    except BaseException:
        stop_server(server)
        raise
    finally:
        watchdog.cancel()
        driver.kill()
    return records, server, first_log


def python_outcome(channel: grpc.Channel, record: dict) -> tuple[str, object]:
    """What the Python client gets for the record's request(s)."""
    path, request_class, response_class = METHODS[record["method"]]
    try:
        if record["method"] == "ParseStream":
            call = channel.stream_stream(path, request_serializer=request_class.SerializeToString,
                                         response_deserializer=response_class.FromString)
            requests = [request_class.FromString(bytes.fromhex(h)) for h in record["requests"]]
            return "OK", _comparable_stream(list(call(iter(requests), timeout=60)))
        timeout = record["timeout_ms"] / 1000 if record["timeout_ms"] is not None else 60
        response = _unary(channel, record["method"])(request_class.FromString(bytes.fromhex(record["request"])), timeout=timeout)
        return "OK", _comparable(response)
    except grpc.RpcError as error:
        return error.code().name, error.details()


def rust_outcome(record: dict) -> tuple[str, object]:
    _, _, response_class = METHODS[record["method"]]
    if record["method"] == "ParseStream":
        return "OK", _comparable_stream([response_class.FromString(bytes.fromhex(h)) for h in record["responses"]])
    if "response" in record:
        return "OK", _comparable(response_class.FromString(bytes.fromhex(record["response"])))
    return record["error"]["code"], record["error"]["message"]


def _comparable(response: object) -> object:
    if isinstance(response, kv.KvStatusResponse):
        for model in response.models:
            model.events_per_second = 0  # a rate over the last 10 s: moves between the two calls
    if isinstance(response, admin.ReloadModelsResponse):
        for model in response.models:
            model.seconds = 0  # how long the fingerprint took
    return response


def _comparable_stream(responses: list[pb.ParseStreamResponse]) -> list[pb.ParseStreamResponse]:
    for response in responses:
        for call in (c for d in response.deltas for c in d.tool_calls if c.id):
            assert call.id.startswith("call_"), call.id
            call.id = "call_(random)"  # a fresh random id per call, in both clients
    return responses


def test_rust_client_matches_python_client(tmp_path: Path, kv_server: LiveServer) -> None:
    records, server, first_log = run_driver(tmp_path, kv_server.tcp)
    channels = {"main": grpc.insecure_channel(server.uds), "kv": grpc.insecure_channel(kv_server.tcp)}
    try:
        compared = 0
        for record in records:
            rust = rust_outcome(record)
            assert rust[0] == record.get("expected", "OK"), record["case"]
            if not record["compare"]:
                continue
            python = python_outcome(channels[record["target"]], record)
            if rust[0] == "DEADLINE_EXCEEDED":
                assert python[0] == rust[0], record["case"]
            else:
                assert python == rust, record["case"]
            compared += 1
    finally:
        for channel in channels.values():
            channel.close()
        stop_server(server)
    assert {r["method"] for r in records} == set(METHODS)
    codes = {rust_outcome(r)[0] for r in records}
    assert {"OK", "INVALID_ARGUMENT", "NOT_FOUND", "FAILED_PRECONDITION", "RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED",
            "UNAVAILABLE"} <= codes
    assert compared == sum(r["compare"] for r in records) >= 25
    # The request ids the driver sent came back (in the trailers of a success and of an error, with
    # Multiplex on too), and are the ids the server logged those calls under; a call without one got
    # the server's own.
    tagged = [r for r in records if "request_id_sent" in r]
    sent = {r["request_id_sent"] for r in tagged if r["request_id_sent"]}
    assert sent == {"interop-ok-1", "interop-error-2", "interop-mux-3"}, tagged
    for record in tagged:
        assert record["request_id_echoed"] == (record["request_id_sent"] or record["request_id_echoed"]), record
        assert record["request_id_echoed"], record
    logged = {e["request_id"]: e for e in first_log if e.get("event") == "rpc" and e.get("request_id") in sent}
    assert set(logged) == sent, sorted(logged)
    assert logged["interop-error-2"]["code"] == "NOT_FOUND" and logged["interop-ok-1"]["code"] == "OK"
    # The multiplexed client's Tokenize, Detokenize and Render calls really travelled on Multiplex
    # streams (requests over its 256 KiB bound go unary by design), and were compared above.
    multiplexed = [r for r in records if r.get("carrier") == "multiplex" and r["method"] in ("Tokenize", "Detokenize", "Render")
                   and len(r["request"]) // 2 <= MULTIPLEX_MAX_REQUEST_BYTES]
    carried = sum(e.get("opened", 0) for e in first_log if e.get("event") == "rpc" and e.get("rpc") == "Multiplex")
    assert len(multiplexed) >= 60 and carried == len(multiplexed), (len(multiplexed), carried)
