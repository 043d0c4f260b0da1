"""Streams with the real server: answers a client does not read count against --max-unsent-mb (many
unread ParseStream streams grew the server by 1.45 GB), a stream whose call goes away under it is
logged as its client saw it (it was logged OK), and a draining server ends an idle ParseStream at
once and refuses its new opens (it was held open until the end of the drain)."""

from __future__ import annotations

import queue
import signal
import threading
import time
from pathlib import Path
from typing import Iterator

import grpc
import pytest

from sidecar.v1 import preprocessor_pb2 as pb
from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc
from tests.conftest import LiveServer, start_server, stop_server

pytestmark = pytest.mark.e2e

#: A Qwen3 token of 75 bytes of text: a step of STEP_IDS of it answers 15-23 MB.
LONG_TOKEN = 89180
STEP_IDS = 200_000
UNSENT_MB = 16
STREAMS = 16


def rss_mb(pid: int) -> float:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def open_message(request_id: str, **fields: object) -> pb.ParseStreamRequest:
    return pb.ParseStreamRequest(open=pb.OpenRequest(request_id=request_id, model="qwen3", tool_parser="none",
                                                     reasoning_parser="none", **fields))


def step_message(request_id: str, ids: list[int], finished: bool = False) -> pb.ParseStreamRequest:
    return pb.ParseStreamRequest(step=pb.Step(items=[pb.StepTokens(request_id=request_id, token_ids=ids,
                                                                   finished=finished)]))


def tokenize_ms(target: str) -> float:
    with grpc.insecure_channel(target) as channel:
        started = time.perf_counter()
        pb_grpc.PreprocessorStub(channel).Tokenize(pb.TokenizeRequest(model="qwen3", texts=["hello"]), timeout=10)
        return (time.perf_counter() - started) * 1e3


@pytest.fixture
def server(tmp_path: Path) -> Iterator[LiveServer]:
    server = start_server(tmp_path, "--max-unsent-mb", str(UNSENT_MB), "--max-message-mb", "32",
                          "--drain-seconds", "600", "--drain-notice-seconds", "0")
    try:
        yield server
    finally:
        stop_server(server)


def test_unread_parse_streams_are_bounded_by_max_unsent_and_others_are_served(server: LiveServer) -> None:
    """STREAMS streams on one connection each send 4 steps answering ~15 MB and read nothing: a
    stream holds only its answer being written (its next message waits), and the answers count
    against --max-unsent-mb: past it, the steps of the other streams end their requests with
    RESOURCE_EXHAUSTED naming the flag. Before, each stream held 4 answers, all counted nowhere."""
    before = rss_mb(server.process.pid)
    channel = grpc.insecure_channel(server.tcp, options=[("grpc.max_receive_message_length", -1)])
    release = threading.Event()

    def messages() -> Iterator[pb.ParseStreamRequest]:
        yield open_message("a")
        for _ in range(4):
            yield step_message("a", [LONG_TOKEN] * STEP_IDS)
        release.wait(120)

    stub = pb_grpc.PreprocessorStub(channel)
    calls = [stub.ParseStream(messages(), timeout=120) for _ in range(STREAMS)]
    try:
        time.sleep(6)
        grown = rss_mb(server.process.pid) - before
        assert tokenize_ms(server.uds) < 1000
        # One answer per stream before, 60-90 MB each (the answer, gRPC's copy, what the step
        # built): 478 MB for 8 streams. Now one answer in all (47 MB measured, 158 MB at the peak).
        assert grown < 300, f"the server grew {grown:.0f} MB"
        errors = []
        for call in calls:
            for _ in range(5):  # every message gets its answer
                errors += [d.error.message for d in next(call).deltas if d.error.code]
        busy = [e for e in errors if "--max-unsent-mb" in e]
        assert busy, errors
        assert f"(--max-unsent-mb {UNSENT_MB})" in busy[0] and "the request is ended" in busy[0]
    finally:
        release.set()
        for call in calls:
            call.cancel()
        channel.close()


def rpc_line(server: LiveServer, request_id: str, timeout: float = 10) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [e for e in server.log_lines() if e.get("event") == "rpc" and e.get("request_id") == request_id]
        if lines:
            (line,) = lines
            return line
        time.sleep(0.05)
    raise AssertionError(f"no rpc line for {request_id}")


def test_a_stream_cancelled_or_refused_by_grpc_is_logged_so(server: LiveServer) -> None:
    """A client's cancel of an idle stream, and gRPC's own refusal of a message larger than
    --max-message-mb, end the request iterator as a half-close does: they were logged OK."""
    with grpc.insecure_channel(server.uds) as channel:
        stub = pb_grpc.PreprocessorStub(channel)
        feed: queue.Queue = queue.Queue()
        call = stub.ParseStream(iter(feed.get, None), metadata=(("x-request-id", "cancelled-idle"),), timeout=60)
        feed.put(open_message("r"))
        assert next(call).deltas == []
        call.cancel()
        feed.put(None)
        line = rpc_line(server, "cancelled-idle")
        assert (line["code"], line["opened"]) == ("CANCELLED", 1)

        big = [open_message("a"), open_message("b", tools_json="x" * (33 << 20))]
        with pytest.raises(grpc.RpcError) as refused:
            list(stub.ParseStream(iter(big), metadata=(("x-request-id", "too-big"),), timeout=60))
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert rpc_line(server, "too-big")["code"] == "CANCELLED"

        # A half-close is still OK.
        assert len(list(stub.ParseStream(iter([open_message("c")]), metadata=(("x-request-id", "closed"),)))) == 1
        assert rpc_line(server, "closed")["code"] == "OK"


def test_draining_ends_an_idle_parse_stream_and_refuses_new_opens(server: LiveServer) -> None:
    """As a Multiplex stream: an idle stream ends UNAVAILABLE as the drain starts; a stream with a
    request running answers new opens UNAVAILABLE, each on its own, lets the running request finish,
    then ends. Before, both were held open (and took new opens) until the end of the drain."""
    channel = grpc.insecure_channel(server.uds)
    stub = pb_grpc.PreprocessorStub(channel)
    idle_feed: queue.Queue = queue.Queue()
    busy_feed: queue.Queue = queue.Queue()
    idle = stub.ParseStream(iter(idle_feed.get, None), metadata=(("x-request-id", "drain-idle"),), timeout=120)
    busy = stub.ParseStream(iter(busy_feed.get, None), metadata=(("x-request-id", "drain-busy"),), timeout=120)
    try:
        idle_feed.put(open_message("done"))
        idle_feed.put(step_message("done", [9707], finished=True))
        assert next(idle).deltas == [] and next(idle).deltas[0].finished
        busy_feed.put(open_message("running"))
        assert next(busy).deltas == []
        server.process.send_signal(signal.SIGTERM)
        with pytest.raises(grpc.RpcError) as ended:
            next(idle)
        assert ended.value.code() == grpc.StatusCode.UNAVAILABLE and "draining" in ended.value.details()

        busy_feed.put(open_message("new"))
        (refused,) = next(busy).deltas
        assert (refused.request_id, refused.finished, refused.error.code) == ("new", True, 14)
        assert "draining" in refused.error.message
        busy_feed.put(step_message("running", [9707], finished=True))
        (last,) = next(busy).deltas
        assert (last.request_id, last.finished, last.error.code) == ("running", True, 0)
        with pytest.raises(grpc.RpcError) as ended:
            next(busy)
        assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
        assert server.process.wait(30) == 0  # long before the drain's 600 s
    finally:
        idle_feed.put(None)
        busy_feed.put(None)
        channel.close()
    assert rpc_line(server, "drain-idle")["code"] == "UNAVAILABLE"
    line = rpc_line(server, "drain-busy")
    assert (line["code"], line["opened"], line["errors"]) == ("UNAVAILABLE", 1, 1)
