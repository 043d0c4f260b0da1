"""The per-call wrappers (`sidecar.rpc`) driven with a stand-in context: a stream gets the same
request id, log line, metrics and status mapping as a unary call, and a bug that escapes it is
recorded and answered INTERNAL."""

from __future__ import annotations

import asyncio
import io
import json
from typing import AsyncIterator

import grpc
import pytest
from prometheus_client import REGISTRY

from sidecar import logs, rpc
from sidecar.errors import CUT_AT_DRAIN_END, InvalidArgument
from sidecar.rpc import Call, StreamCounts, raw_unary, stream, unary


class Aborted(Exception):
    """What `context.abort` raises (grpc raises its own AbortError)."""


class FakeContext:
    def __init__(self, metadata: tuple = (), peer: str = "ipv4:127.0.0.1:1") -> None:
        self._metadata = metadata
        self._peer = peer
        self.trailing: tuple = ()
        self.aborted: tuple[grpc.StatusCode, str] | None = None

    def invocation_metadata(self) -> tuple:
        return self._metadata

    def peer(self) -> str:
        return self._peer

    def time_remaining(self) -> float | None:
        return None

    def set_trailing_metadata(self, metadata: tuple) -> None:
        self.trailing = metadata

    def add_done_callback(self, callback) -> None:  # noqa: ANN001
        self.done_callbacks = [*getattr(self, "done_callbacks", []), callback]

    def end(self) -> None:
        """What gRPC does once the call's status is sent: runs the done callbacks."""
        for callback in getattr(self, "done_callbacks", []):
            callback(self)

    async def abort(self, code: grpc.StatusCode, message: str) -> None:
        self.aborted = (code, message)
        raise Aborted(message)


async def _messages(*items: bytes) -> AsyncIterator[bytes]:
    for item in items:
        yield item


def _echo(fail_on: bytes | None = None, error: Exception | None = None):  # noqa: ANN202
    """A stream handler answering every message, opening on b"open", failing a request on b"bad",
    and raising `error` on `fail_on`."""

    async def handler(requests, context, call: Call, counts: StreamCounts) -> AsyncIterator[bytes]:  # noqa: ANN001
        assert call.request_id and call.rpc
        async for message in requests:
            if message == fail_on:
                raise error
            counts.opened += message == b"open"
            counts.errors += message == b"bad"
            yield message.upper()

    return handler


def _run(rpc: str, handler, context: FakeContext, *messages: bytes) -> list[bytes]:  # noqa: ANN001
    async def drain() -> list[bytes]:
        return [answer async for answer in stream(rpc, handler)(_messages(*messages), context)]

    return asyncio.run(drain())


@pytest.fixture
def log_lines(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    buffer = io.StringIO()
    logs.configure("info", stream=buffer)
    # Loggers cache their output on first use: a fresh one writes to this test's buffer.
    monkeypatch.setattr(rpc, "_log", logs.get_logger("sidecar.rpc"))
    yield lambda: [json.loads(line) for line in buffer.getvalue().splitlines()]
    logs.configure("info")


def _sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_stream_echoes_the_callers_request_id_and_logs_one_line_with_counts(log_lines) -> None:  # noqa: ANN001
    context = FakeContext((("x-request-id", "stream-7"),))
    answers = _run("StreamA", _echo(), context, b"open", b"bad", b"step")
    assert answers == [b"OPEN", b"BAD", b"STEP"]
    assert context.trailing == (("x-request-id", "stream-7"),) and context.aborted is None
    lines = [line for line in log_lines() if line["event"] == "rpc"]
    assert len(lines) == 1
    line = lines[0]
    assert (line["rpc"], line["request_id"], line["code"]) == ("StreamA", "stream-7", "OK")
    assert (line["messages"], line["opened"], line["errors"]) == (3, 1, 1)


def test_stream_generates_a_request_id_when_none_is_given() -> None:
    context = FakeContext()
    _run("StreamB", _echo(), context, b"x")
    (key, value), = context.trailing
    assert key == "x-request-id" and len(value) == 16 and int(value, 16) >= 0


@pytest.mark.parametrize("given", ["a\tb", "a\x1b[31mred", "a\nb", "café", "\udcff\udcfe", "x" * 127 + "é"])
def test_a_request_id_gRPC_cannot_send_back_is_replaced(given: str) -> None:
    """gRPC takes these ids in but refuses them in trailers: the finished call failed INTERNAL
    ("Invalid metadata") while its log line and metrics said OK. A printable ASCII id is kept
    (first 128 characters); any other is replaced by a fresh one."""
    context = FakeContext((("x-request-id", given),))
    _run("StreamD", _echo(), context, b"x")
    (key, value), = context.trailing
    assert key == "x-request-id" and len(value) == 16 and int(value, 16) >= 0
    long = FakeContext((("x-request-id", "r" * 200),))
    _run("StreamD", _echo(), long, b"x")
    assert long.trailing == (("x-request-id", "r" * 128),)


def test_stream_metrics_are_the_unary_ones() -> None:
    before = _sample("sidecar_requests_total", rpc="StreamC", code="OK")
    latency = _sample("sidecar_request_seconds_count", rpc="StreamC")
    _run("StreamC", _echo(), FakeContext(), b"x", b"y")
    assert _sample("sidecar_requests_total", rpc="StreamC", code="OK") == before + 1
    assert _sample("sidecar_request_seconds_count", rpc="StreamC") == latency + 1
    assert _sample("sidecar_inflight_requests", rpc="StreamC") == 0
    # The same families a unary call reports.
    async def ok(request, context, call):  # noqa: ANN001, ANN202
        return b"ok"

    assert asyncio.run(unary("UnaryC", ok)(object(), FakeContext())) == b"ok"
    assert _sample("sidecar_requests_total", rpc="UnaryC", code="OK") == 1
    assert _sample("sidecar_request_seconds_count", rpc="UnaryC") == 1


def test_an_expected_error_ends_the_stream_with_its_status(log_lines) -> None:  # noqa: ANN001
    context = FakeContext()
    with pytest.raises(Aborted):
        _run("StreamD", _echo(b"boom", InvalidArgument("message: malformed")), context, b"open", b"boom", b"never")
    assert context.aborted == (grpc.StatusCode.INVALID_ARGUMENT, "message: malformed")
    assert _sample("sidecar_errors_total", rpc="StreamD", code="INVALID_ARGUMENT") == 1
    line = next(line for line in log_lines() if line["event"] == "rpc")
    assert (line["code"], line["messages"], line["opened"], line["error"]) == ("INVALID_ARGUMENT", 1, 1, "message: malformed")
    assert not [line for line in log_lines() if line["event"] == "rpc_crashed"]


def test_an_unexpected_exception_is_recorded_and_answered_internal(log_lines) -> None:  # noqa: ANN001
    context = FakeContext((("x-request-id", "bug-1"),))
    with pytest.raises(Aborted):
        _run("StreamE", _echo(b"boom", ZeroDivisionError("division by zero")), context, b"a", b"boom")
    assert context.aborted == (grpc.StatusCode.INTERNAL, "internal error: ZeroDivisionError")
    assert _sample("sidecar_requests_total", rpc="StreamE", code="INTERNAL") == 1
    assert _sample("sidecar_requests_total", rpc="StreamE", code="OK") == 0
    assert _sample("sidecar_errors_total", rpc="StreamE", code="INTERNAL") == 1
    assert _sample("sidecar_inflight_requests", rpc="StreamE") == 0
    crashed = [line for line in log_lines() if line["event"] == "rpc_crashed"]
    assert len(crashed) == 1 and "ZeroDivisionError" in crashed[0]["exception"]
    assert crashed[0]["request_id"] == "bug-1"
    line = next(line for line in log_lines() if line["event"] == "rpc")
    assert (line["code"], line["request_id"]) == ("INTERNAL", "bug-1")


def test_a_stream_the_client_abandons_is_recorded_as_cancelled(log_lines) -> None:  # noqa: ANN001
    async def abandon() -> None:
        answers = stream("StreamF", _echo())(_messages(b"a", b"b", b"c"), FakeContext())
        assert await answers.__anext__() == b"A"
        await answers.aclose()  # what grpc does when the client goes away

    asyncio.run(abandon())
    assert _sample("sidecar_requests_total", rpc="StreamF", code="CANCELLED") == 1
    assert _sample("sidecar_inflight_requests", rpc="StreamF") == 0
    line = next(line for line in log_lines() if line["event"] == "rpc")
    assert (line["code"], line["messages"]) == ("CANCELLED", 1)


def test_a_stream_the_server_stops_is_recorded_with_the_status_its_client_gets(log_lines) -> None:  # noqa: ANN001
    """At the end of the drain gRPC cancels what is still running and the client gets UNAVAILABLE,
    but a stream's request iterator just ends, as a client's half-close does: the stream was logged
    and counted OK (and gRPC was asked to send an OK status on a cancelled call)."""
    gate = rpc.Gate()

    async def requests() -> AsyncIterator[bytes]:
        yield b"open"
        gate.stop(CUT_AT_DRAIN_END)  # the drain is over: the server stops, and gRPC ends the requests

    async def run() -> list[bytes]:
        return [answer async for answer in stream("StreamStopped", _echo(), gate)(requests(), context)]

    context = FakeContext()
    assert asyncio.run(run()) == [b"OPEN"]
    assert context.aborted is None  # no status to send on a call gRPC cancelled
    assert _sample("sidecar_requests_total", rpc="StreamStopped", code="UNAVAILABLE") == 1
    assert _sample("sidecar_requests_total", rpc="StreamStopped", code="OK") == 0
    (line,) = [line for line in log_lines() if line["event"] == "rpc"]
    assert (line["code"], line["messages"], line["opened"]) == ("UNAVAILABLE", 1, 1)
    assert "the server stopped" in line["error"] and "--drain-seconds" in line["error"]


@pytest.mark.parametrize("stopped", [False, True])
def test_a_cancelled_unary_call_is_cut_off_when_the_server_stopped_it(log_lines, stopped: bool) -> None:  # noqa: ANN001
    """gRPC cancels a unary call both when its client goes away and when the server stops; in the
    second case its client gets UNAVAILABLE, and the call is recorded so."""
    gate = rpc.Gate()
    name = f"UnaryCut{int(stopped)}"

    async def slow(body, context, call):  # noqa: ANN001, ANN202
        await asyncio.sleep(60)

    async def run() -> None:
        task = asyncio.create_task(raw_unary(name, slow, gate)(b"", FakeContext()))
        await asyncio.sleep(0)
        if stopped:
            gate.stop()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    code = "UNAVAILABLE" if stopped else "CANCELLED"
    assert _sample("sidecar_requests_total", rpc=name, code=code) == 1
    (line,) = [line for line in log_lines() if line["event"] == "rpc"]
    assert line["code"] == code


def test_unary_maps_a_bug_to_internal_too(log_lines) -> None:  # noqa: ANN001
    async def broken(request, context, call):  # noqa: ANN001, ANN202
        raise KeyError("x")

    context = FakeContext()
    with pytest.raises(Aborted):
        asyncio.run(unary("UnaryG", broken)(object(), context))
    assert context.aborted == (grpc.StatusCode.INTERNAL, "internal error: KeyError")
    assert [line["event"] for line in log_lines()] == ["rpc_crashed", "rpc"]


def test_an_undecodable_body_is_invalid_argument_counted_and_logged_once(log_lines) -> None:  # noqa: ANN001
    from sidecar.v1 import preprocessor_pb2 as pb

    async def never(request, context, call):  # noqa: ANN001, ANN202
        raise AssertionError("the handler ran on a body that does not decode")

    context = FakeContext((("x-request-id", "bad-body-1"),))
    # Field 2 (texts) as a string holding a lone surrogate in UTF-8 form: not valid UTF-8.
    body = bytes([0x12, 3, 0xED, 0xA0, 0x80])
    with pytest.raises(Aborted):
        asyncio.run(unary("UnaryH", never, pb.TokenizeRequest)(body, context))
    code, message = context.aborted
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message.startswith("TokenizeRequest: ")
    assert _sample("sidecar_malformed_requests_total", rpc="UnaryH") == 1
    assert _sample("sidecar_errors_total", rpc="UnaryH", code="INVALID_ARGUMENT") == 1
    lines = log_lines()
    assert [line["event"] for line in lines] == ["rpc"]
    assert (lines[0]["request_id"], lines[0]["code"], lines[0]["error"]) == ("bad-body-1", "INVALID_ARGUMENT", message)
    assert context.trailing == (("x-request-id", "bad-body-1"),)


def test_a_body_too_large_for_a_small_rpc_is_refused_before_it_is_parsed() -> None:
    """The decoded-message wrapper (ListModels, ListParsers, KvStatus, ReloadModels) parses on the
    event loop: a 63 MB body of unknown fields held it for 84 ms."""
    from sidecar.v1 import preprocessor_pb2 as pb

    async def listed(request, context, call):  # noqa: ANN001, ANN202
        return pb.ListModelsResponse()

    wrapped = unary("UnaryK", listed, pb.ListModelsRequest)
    unknown_fields = b"\xf8\x07\x01" * (rpc.MAX_SMALL_BODY_BYTES // 3)  # field 127, varint 1: skipped
    assert asyncio.run(wrapped(unknown_fields, FakeContext())) == b""
    context = FakeContext()
    with pytest.raises(Aborted):
        asyncio.run(wrapped(unknown_fields + b"\xf8\x07\x01", context))
    code, message = context.aborted
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert message.startswith("ListModelsRequest: a 65538-byte body, more than the 65536 bytes")


def test_a_decoded_request_reaches_the_handler_and_the_response_is_encoded() -> None:
    from sidecar.v1 import preprocessor_pb2 as pb

    async def handler(request, context, call):  # noqa: ANN001, ANN202
        return pb.DetokenizeResponse(texts=[request.model])

    body = pb.DetokenizeRequest(model="qwen3").SerializeToString()
    answer = asyncio.run(unary("UnaryI", handler, pb.DetokenizeRequest)(body, FakeContext()))
    assert pb.DetokenizeResponse.FromString(answer).texts == ["qwen3"]


def test_a_closed_gate_refuses_new_calls_with_unavailable() -> None:
    gate = rpc.Gate()
    gate.open = False

    async def never(request, context, call):  # noqa: ANN001, ANN202
        raise AssertionError("a draining server ran a new call")

    context = FakeContext()
    with pytest.raises(Aborted):
        asyncio.run(unary("UnaryJ", never, gate=gate)(b"", context))
    assert context.aborted[0] == grpc.StatusCode.UNAVAILABLE and gate.inflight == 1  # until the status is sent
    context.end()
    assert gate.inflight == 0


@pytest.mark.parametrize("decoded", [False, True])
def test_a_response_larger_than_grpc_sends_is_resource_exhausted_logged_and_counted(log_lines,  # noqa: ANN001
                                                                                  decoded: bool) -> None:
    """gRPC refuses a response over --max-message-mb itself ("Sent message larger than max"), after
    the wrapper had logged and counted the call OK: the wrapper checks the size first, and the call
    is the RESOURCE_EXHAUSTED its client gets, naming the flag and both sizes."""
    from sidecar.v1 import preprocessor_pb2 as pb

    rpc_name = f"UnaryOversize{int(decoded)}"
    gate = rpc.Gate(max_response_bytes=10)

    async def raw(body, context, call):  # noqa: ANN001, ANN202
        return body

    async def message(request, context, call):  # noqa: ANN001, ANN202
        return pb.ListModelsResponse(models=[pb.ModelInfo(name=request.model)])

    wrapped = unary(rpc_name, message, pb.DetokenizeRequest, gate=gate) if decoded else raw_unary(rpc_name, raw, gate)
    fits = pb.DetokenizeRequest(model="abcdef").SerializeToString() if decoded else b"x" * 10
    over = pb.DetokenizeRequest(model="abcdefg").SerializeToString() if decoded else b"x" * 11
    assert len(asyncio.run(wrapped(fits, FakeContext()))) == 10
    context = FakeContext()
    with pytest.raises(Aborted):
        asyncio.run(wrapped(over, context))
    assert context.aborted == (grpc.StatusCode.RESOURCE_EXHAUSTED,
                               f"{rpc_name}: the response is 11 bytes, over the server's message limit of 10 bytes "
                               "(--max-message-mb); ask for less")
    assert gate.unsent == 0
    assert _sample("sidecar_requests_total", rpc=rpc_name, code="RESOURCE_EXHAUSTED") == 1
    assert _sample("sidecar_requests_total", rpc=rpc_name, code="OK") == 1
    assert [line["code"] for line in log_lines() if line["event"] == "rpc"] == ["OK", "RESOURCE_EXHAUSTED"]


def test_responses_clients_do_not_read_are_bounded_per_connection() -> None:
    """A unary response counts as unsent until its call ends (a client with an HTTP/2 window of 0
    never lets it end). A connection past the bound gets its new unary calls refused naming the
    flag, other connections do not (one client that stopped reading shut everyone out), until the
    total passes UNSENT_TOTAL_FACTOR times the bound; calls are admitted again once responses are
    taken."""
    gate = rpc.Gate(max_unsent_bytes=100)

    async def big(body, context, call):  # noqa: ANN001, ANN202
        return b"x" * 150

    def call(peer: str) -> FakeContext:
        context = FakeContext(peer=peer)
        try:
            assert asyncio.run(raw_unary("UnaryK", big, gate=gate)(b"", context)) == b"x" * 150
        except Aborted:
            pass
        return context

    stalled = call("ipv4:10.0.0.1:5000")
    assert gate.unsent == 150 and stalled.aborted is None
    refused = call("ipv4:10.0.0.1:5000")
    assert refused.aborted[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "on this connection" in refused.aborted[1] and "--max-unsent-mb" in refused.aborted[1]
    others = [call(f"ipv4:10.0.0.2:{port}") for port in range(2)]  # 450 bytes in all now
    assert all(c.aborted is None for c in others) and gate.unsent == 450
    shut = call("ipv4:10.0.0.3:1")
    assert shut.aborted[0] == grpc.StatusCode.RESOURCE_EXHAUSTED and "4 x --max-unsent-mb" in shut.aborted[1]
    for context in [stalled, refused, *others, shut]:
        context.end()
    assert gate.unsent == 0 and gate.inflight == 0 and not gate._unsent_by_peer
    assert call("ipv4:10.0.0.1:5000").aborted is None


def test_unary_calls_admitted_together_are_held_to_the_unsent_bound() -> None:
    """Calls that start together each pass the admission check (nothing is held yet); the check
    is made again once each response exists, so a connection whose client does not read holds
    what sequential calls would (the bound plus one response), however many calls ran at once."""
    gate = rpc.Gate(max_unsent_bytes=100)
    release = asyncio.Event()

    async def big(body, context, call):  # noqa: ANN001, ANN202
        await release.wait()
        return b"x" * 60

    async def main() -> list[FakeContext]:
        contexts = [FakeContext(peer="ipv4:10.0.0.1:5000") for _ in range(8)]

        async def one(context: FakeContext) -> None:
            try:
                await raw_unary("UnaryK", big, gate=gate)(b"", context)
            except Aborted:
                pass

        calls = [asyncio.create_task(one(c)) for c in contexts]
        await asyncio.sleep(0)  # every call is admitted before any response exists
        release.set()
        await asyncio.gather(*calls)
        return contexts

    contexts = asyncio.run(main())
    refused = [c for c in contexts if c.aborted is not None]
    assert len(refused) == 6, [c.aborted for c in contexts]  # 60 + 60 held, then over the 100
    assert all(c.aborted[0] == grpc.StatusCode.RESOURCE_EXHAUSTED and "--max-unsent-mb" in c.aborted[1]
               for c in refused)
    assert gate.unsent == 120  # the bound (100) plus at most one response
    for context in contexts:
        context.end()
    assert gate.unsent == 0 and gate.inflight == 0


def test_loop_tallies_reach_the_histogram_as_observe_would() -> None:
    from prometheus_client import CollectorRegistry, Histogram

    from sidecar.metrics import LoopHistogram

    bounds = (0.001, 0.01, 0.1)
    values = [0.0, 0.001, 0.0011, 0.01, 0.05, 0.1, 0.2, 7.0]
    direct = Histogram("direct_seconds", "d", buckets=bounds, registry=CollectorRegistry())
    tallied_child = Histogram("tallied_seconds", "t", buckets=bounds, registry=CollectorRegistry())
    tally = LoopHistogram(tallied_child)
    for value in values:
        direct.observe(value)
        tally.observe(value)
    tally.flush()
    tally.flush()  # a second collection hands nothing over twice
    samples = lambda h: [(s.name.split("_", 1)[1], s.labels, s.value) for s in h.collect()[0].samples  # noqa: E731
                         if not s.name.endswith("_created")]
    assert samples(tallied_child) == samples(direct)


def test_a_stream_answer_counts_as_unsent_until_written() -> None:
    """Each answer counts against --max-unsent-mb (per connection and in all) while gRPC writes it,
    which lasts as long as its client does not read: answers of streams whose clients never read
    grew the server without bound (1.45 GB for 16 ParseStream streams), bounding only unary ones."""
    gate = rpc.Gate(max_unsent_bytes=100)
    peer = "ipv4:10.0.0.9:1"

    async def scenario() -> None:
        answers = stream("StreamU", _echo(), gate)(_messages(b"a" * 70, b"b" * 40), FakeContext(peer=peer))
        assert await anext(answers) == b"A" * 70
        # gRPC is writing the first answer (the generator waits at its yield): held.
        assert gate.unsent == 70 and gate._unsent_by_peer == {peer: 70}
        assert gate.unsent_refusal(peer, 40) is not None and gate.unsent_refusal("ipv4:10.0.0.8:1", 40) is None
        assert await anext(answers) == b"B" * 40  # the first was written: released
        assert gate.unsent == 40
        await answers.aclose()  # the client went away mid-write: dropped with the stream
        assert gate.unsent == 0 and not gate._unsent_by_peer

    asyncio.run(scenario())


def test_the_unsent_bound_refuses_work_that_would_pass_it_but_never_a_lone_answer() -> None:
    gate = rpc.Gate(max_unsent_bytes=100)
    assert gate.unsent_refusal("p", 10_000) is None  # nothing held: one answer alone always goes
    gate.hold("p", 60)
    assert gate.unsent_refusal("p", 30) is None
    assert "--max-unsent-mb" in gate.unsent_refusal("p", 50)
    for other in range(6):
        gate.hold(f"q{other}", 60)
    assert "4 x --max-unsent-mb" in gate.unsent_refusal("r", 50)
    gate.release("p", 60)
    assert gate.unsent == 360 and "p" not in gate._unsent_by_peer


@pytest.mark.parametrize("gone", [False, True])
def test_a_stream_whose_call_goes_away_under_it_is_recorded_cancelled(log_lines, gone: bool) -> None:  # noqa: ANN001
    """gRPC ends a stream's request iterator the same way when its client half-closes and when the
    call is gone (cancelled, its connection dropped, a message over --max-message-mb), then cancels
    the handler's task a moment later: such streams were logged and counted OK."""
    name = f"StreamGone{int(gone)}"

    async def run() -> None:
        answers = stream(name, _echo())(_messages(b"open"), FakeContext())

        async def consume() -> list[bytes]:
            return [answer async for answer in answers]

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.001)  # the requests have ended
        if gone:
            task.cancel()  # what gRPC does when its poller reports the call closed (0.04-0.08 ms)
        try:
            assert await task == [b"OPEN"]
        except asyncio.CancelledError:
            assert gone

    asyncio.run(run())
    code = "CANCELLED" if gone else "OK"
    assert _sample("sidecar_requests_total", rpc=name, code=code) == 1
    (line,) = [line for line in log_lines() if line["event"] == "rpc"]
    assert (line["code"], line["messages"], line["opened"]) == (code, 1, 1)
    if gone:
        assert "client cancelled" in line["error"] and "--max-message-mb" in line["error"]
