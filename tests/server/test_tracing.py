"""Distributed tracing: with `--otlp-endpoint` the server continues the caller's W3C `traceparent`
into a SERVER span per call, with its stages as child spans, exported over OTLP/gRPC (here to a tiny
collector in the test process); without it, no span is ever made."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from sidecar.v1 import preprocessor_pb2 as pb
from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc
from tests.conftest import start_server, stop_server

trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2",
                                    reason="the tracing extra is installed by make setup")
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc  # noqa: E402


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """An OTLP/gRPC trace receiver that keeps every span it is sent."""

    def __init__(self) -> None:
        self.spans: list = []
        self.lock = threading.Lock()

    def Export(self, request, context):  # noqa: ANN001, ANN201, N802 - the generated servicer's method
        with self.lock:
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    self.spans.extend(scope.spans)
        return trace_service.ExportTraceServiceResponse()


@pytest.fixture
def collector():  # noqa: ANN201
    receiver = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(receiver, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    receiver.endpoint = f"http://127.0.0.1:{port}"
    yield receiver
    server.stop(0)


#: The stages of a small (on the loop) and a large (on the worker pool) Tokenize, per backend: the
#: native core decodes the body and encodes the response inside its one call, so a traced call takes
#: the same native path as an untraced one (the Python decode of a 40 MB body held the loop for half
#: a second); the reference backend's Python path decodes the body first, each stage pooled (and so
#: queued) when large, and serializes the response with the work.
STAGES = {
    "native": (["native"], ["native", "queue"]),
    "reference": (["decode", "native"], ["decode", "native", "queue", "queue"]),
}


@pytest.mark.e2e
@pytest.mark.parametrize("backend", sorted(STAGES))
def test_traceparent_is_continued_with_stage_spans(tmp_path: Path, collector: Collector, backend: str) -> None:
    trace_id, parent_id = os.urandom(16), os.urandom(8)
    traceparent = f"00-{trace_id.hex()}-{parent_id.hex()}-01"
    small_stages, pooled_stages = STAGES[backend]
    server = start_server(tmp_path, "--otlp-endpoint", collector.endpoint, "--backend", backend)
    try:
        stub = pb_grpc.PreprocessorStub(grpc.insecure_channel(server.uds))
        small = pb.TokenizeRequest(model="qwen3", texts=["Hello world"])
        large = pb.TokenizeRequest(model="qwen3", texts=["Hello world " * 4000])  # > 16 KB: the worker pool
        stub.Tokenize(small, timeout=30, metadata=(("traceparent", traceparent), ("x-request-id", "traced-1")))
        stub.Tokenize(large, timeout=30, metadata=(("traceparent", traceparent),))
        stub.Tokenize(small, timeout=30)  # no traceparent: a trace of its own
        with pytest.raises(grpc.RpcError):
            stub.Tokenize(pb.TokenizeRequest(model="nope"), timeout=30, metadata=(("traceparent", traceparent),))
        server.process.send_signal(signal.SIGTERM)  # the exporter flushes on the way out
        assert server.process.wait(60) == 0
    finally:
        stop_server(server)

    spans = list(collector.spans)
    calls = [s for s in spans if s.name == "Tokenize" and s.trace_id == trace_id]
    assert len(calls) == 3, [(s.name, s.trace_id.hex()) for s in spans]
    assert all(s.parent_span_id == parent_id and s.kind == s.SPAN_KIND_SERVER for s in calls)
    first = next(s for s in calls if attribute(s, "sidecar.request_id") == "traced-1")
    assert sorted(c.name for c in children(spans, first)) == small_stages
    pooled = [s for s in calls if "queue" in stage_names(spans, s)]
    assert len(pooled) == 1 and sorted(c.name for c in children(spans, pooled[0])) == pooled_stages
    for call in calls:
        for child in children(spans, call):
            assert call.start_time_unix_nano <= child.start_time_unix_nano <= child.end_time_unix_nano
            assert child.end_time_unix_nano <= call.end_time_unix_nano
    failed = [s for s in calls if attribute(s, "rpc.grpc.status_code") == grpc.StatusCode.NOT_FOUND.value[0]]
    assert len(failed) == 1 and failed[0].status.code == failed[0].status.STATUS_CODE_ERROR
    untraced = [s for s in spans if s.name == "Tokenize" and s.trace_id != trace_id]
    assert len(untraced) == 1 and not untraced[0].parent_span_id


def children(spans: list, parent) -> list:  # noqa: ANN001
    return [s for s in spans if s.trace_id == parent.trace_id and s.parent_span_id == parent.span_id]


def stage_names(spans: list, parent) -> set[str]:  # noqa: ANN001
    return {s.name for s in children(spans, parent)}


def attribute(span, key: str):  # noqa: ANN001, ANN201
    for kv in span.attributes:
        if kv.key == key:
            value = kv.value
            return getattr(value, value.WhichOneof("value"))
    return None


def test_no_span_is_made_when_tracing_is_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from sidecar import tracing
    from sidecar.rpc import stream, unary
    from tests.server.test_rpc import FakeContext, _messages

    assert not tracing.enabled()

    def no_spans(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("a span was made with tracing off")

    monkeypatch.setattr(tracing, "CallTrace", no_spans)
    monkeypatch.setattr(tracing, "record_stage", no_spans)

    async def ok(request, context, call):  # noqa: ANN001, ANN202
        return request

    async def echo(requests, context, call, counts):  # noqa: ANN001, ANN202
        async for message in requests:
            yield message

    async def run() -> None:
        metadata = (("traceparent", f"00-{'1' * 32}-{'2' * 16}-01"),)
        assert await unary("UntracedA", ok, pb.ListModelsRequest)(b"", FakeContext(metadata)) == b""
        answers = [a async for a in stream("UntracedB", echo)(_messages(b"x"), FakeContext(metadata))]
        assert answers == [b"x"]

    asyncio.run(run())
