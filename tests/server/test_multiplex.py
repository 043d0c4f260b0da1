"""The Multiplex stream against the real server: every request of `tests/data/multiplex/requests.json`
(and a large variant of each Tokenize, which runs on the worker pool) gets exactly the answer its
unary RPC gives, response or status code and message, whether the requests share one message or
come one per message; and the stream's own rules: errors per id, cancel, the in-flight limit naming
its flag, duplicate ids, deadlines, malformed framing, a client that goes away mid-stream, and
UNAVAILABLE while the server drains.
"""

from __future__ import annotations

import asyncio
import json
import queue
import random
import signal
import time
from pathlib import Path
from typing import Iterator

import grpc
import pytest
from google.protobuf import json_format

from sidecar.v1 import preprocessor_pb2 as pb
from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc
from tests.conftest import REPO, SHARED_MODELS, LiveServer, start_server, stop_server

pytestmark = pytest.mark.e2e

CASES = json.loads((REPO / "tests/data/multiplex/requests.json").read_text())["cases"]
#: Low enough for the limit test to reach with one message, above what the other tests send at once.
MAX_INFLIGHT = 160
METHOD = "/sidecar.v1.Preprocessor/Multiplex"
REQUEST_TYPES = {"tokenize": pb.TokenizeRequest, "detokenize": pb.DetokenizeRequest, "render": pb.RenderRequest}
#: Above the server's inline bound (16 KiB): such a request runs on the worker pool by itself.
LARGE_REPEAT = 2000
#: A text over the inline bound, so it runs on the worker pool (tens of ms).
SLOW_TEXT = "many words " * 200_000
OK = pb.MultiplexResult.DESCRIPTOR.fields_by_name["error"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    # Per-item limits low enough for the `repeat` cases to go over, above what the other tests send.
    args = ["--multiplex-max-inflight", str(MAX_INFLIGHT), "--max-message-mb", "16", "--max-text-chars", "2500000",
            "--max-token-ids", "100000", "--max-kwargs-bytes", "4096"]
    if (SHARED_MODELS / "SOURCES.md").is_file():
        args += ["--model", "qwen3=" + str(SHARED_MODELS / "qwen3"), "--model", "gpt2=" + str(SHARED_MODELS / "gpt2")]
    live = start_server(tmp_path_factory.mktemp("multiplex"), *args)
    yield live
    stop_server(live)


@pytest.fixture(scope="module")
def channel(server: LiveServer) -> Iterator[grpc.Channel]:
    options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
    with grpc.insecure_channel(server.uds, options=options) as ch:
        yield ch


@pytest.fixture(scope="module")
def models(channel: grpc.Channel) -> list[str]:
    return [m.name for m in pb_grpc.PreprocessorStub(channel).ListModels(pb.ListModelsRequest(), timeout=30).models]


class Stream:
    """One Multiplex call driven message by message (raw bytes both ways, so tests can send
    anything)."""

    def __init__(self, channel: grpc.Channel, timeout: float = 120) -> None:
        self._outbox: queue.Queue[bytes | None] = queue.Queue()
        self.call = channel.stream_stream(METHOD)(iter(self._outbox.get, None), timeout=timeout)
        self._results: list[pb.MultiplexResult] = []

    def send(self, calls: list[pb.MultiplexCall] = (), cancel: list[int] = ()) -> None:
        self._outbox.put(pb.MultiplexRequest(calls=calls, cancel=cancel).SerializeToString())

    def send_raw(self, message: bytes) -> None:
        self._outbox.put(message)

    def receive(self, count: int) -> list[pb.MultiplexResult]:
        """The next `count` results (a server message may hold several)."""
        while len(self._results) < count:
            response = pb.MultiplexResponse.FromString(next(self.call))
            assert response.results, "a server message with no result"
            self._results.extend(response.results)
        taken, self._results = self._results[:count], self._results[count:]
        return taken

    def close(self) -> list[pb.MultiplexResult]:
        """Half-closes; the results still to come, then the stream's end (raises on a non-OK status)."""
        self._outbox.put(None)
        for message in self.call:
            self._results.extend(pb.MultiplexResponse.FromString(message).results)
        rest, self._results = self._results, []
        return rest


def repeated(case: dict) -> dict:
    """The case's request with its texts, id sequences or kwargs repeated `repeat` times (see the data's provenance)."""
    request, n = dict(case["request"]), case.get("repeat", 1)
    if "texts" in request:
        request["texts"] = [t * n for t in request["texts"]]
    if "sequences" in request:
        request["sequences"] = [{**s, "tokenIds": s["tokenIds"] * n} for s in request["sequences"]]
    if "chatTemplateKwargsJson" in request:
        request["chatTemplateKwargsJson"] *= n
    return request


def requests_for(models: list[str]) -> list[tuple[str, str, object]]:
    """(name, kind, request) for every case and model, plus the large variant of each Tokenize."""
    out = []
    for case in CASES:
        for model in ([case["request"]["model"]] if "model" in case["request"] else models):
            request = json_format.ParseDict({**repeated(case), "model": model}, REQUEST_TYPES[case["kind"]]())
            out.append((f"{case['name']} [{model}]", case["kind"], request))
            if case["kind"] == "tokenize" and any(request.texts) and "repeat" not in case:
                large = pb.TokenizeRequest()
                large.CopyFrom(request)
                large.texts[:] = [t * LARGE_REPEAT for t in request.texts]
                out.append((f"{case['name']} (large) [{model}]", "tokenize", large))
    return out


def call(request_id: int, kind: str, request: object, timeout_us: int = 0) -> pb.MultiplexCall:
    return pb.MultiplexCall(id=request_id, timeout_us=timeout_us, **{kind: request})


def unary_answer(channel: grpc.Channel, kind: str, request: object) -> tuple:
    stub = pb_grpc.PreprocessorStub(channel)
    method = {"tokenize": stub.Tokenize, "detokenize": stub.Detokenize, "render": stub.Render}[kind]
    try:
        return ("ok", method(request, timeout=60))
    except grpc.RpcError as e:
        return ("error", e.code().value[0], e.details())


def stream_answer(kind: str, result: pb.MultiplexResult) -> tuple:
    which = result.WhichOneof("result")
    if which == "error":
        return ("error", result.error.code, result.error.message)
    assert which == kind, f"a {which} response to a {kind} request"
    return ("ok", getattr(result, kind))


def test_each_result_equals_the_unary_answer(channel: grpc.Channel, models: list[str]) -> None:
    requests = requests_for(models)
    assert len(requests) < MAX_INFLIGHT
    expected = {i: unary_answer(channel, kind, request) for i, (_, kind, request) in enumerate(requests, 1)}
    assert {a[0] for a in expected.values()} == {"ok", "error"}
    # The cases over a per-item limit are refused naming the flag their name names.
    over_limit = [(name.split(" [")[0].split()[-1], a) for (name, _, _), a in zip(requests, expected.values()) if "--max-" in name]
    assert over_limit, "no case over a per-item limit"
    for flag, answer in over_limit:
        assert answer[:2] == ("error", grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]) and flag in answer[2], (flag, answer)
    stream = Stream(channel)
    # All at once in one message, then one per message: every result once, each equal to unary.
    stream.send([call(i, kind, request) for i, (_, kind, request) in enumerate(requests, 1)])
    together = {r.id: r for r in stream.receive(len(requests))}
    offset = len(requests)
    for i, (_, kind, request) in enumerate(requests, 1):
        stream.send([call(offset + i, kind, request)])
    alone = {r.id - offset: r for r in stream.receive(len(requests))}
    assert stream.close() == []
    assert sorted(together) == sorted(alone) == list(range(1, len(requests) + 1))
    for i, (name, kind, _) in enumerate(requests, 1):
        assert stream_answer(kind, together[i]) == expected[i], name
        assert stream_answer(kind, alone[i]) == expected[i], name


def test_requests_with_nothing_or_garbage_get_their_own_error(channel: grpc.Channel, models: list[str]) -> None:
    good = pb.TokenizeRequest(model=models[0], texts=["still here"])
    # MultiplexCall{id: 2, tokenize: <bytes that are no TokenizeRequest>} written by hand.
    garbage = bytes([0x08, 2, 0x1A, 2, 0xFF, 0xFF])
    message = pb.MultiplexRequest(calls=[pb.MultiplexCall(id=1), call(3, "tokenize", good)]).SerializeToString()
    stream = Stream(channel)
    stream.send_raw(message + bytes([0x0A, len(garbage)]) + garbage)
    results = {r.id: r for r in stream.receive(3)}
    assert stream.close() == []
    assert results[1].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "none of tokenize, detokenize, render" in results[1].error.message
    assert results[2].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "tokenize: not a valid TokenizeRequest" in results[2].error.message
    assert stream_answer("tokenize", results[3]) == unary_answer(channel, "tokenize", good)


def test_malformed_framing_ends_the_stream(channel: grpc.Channel) -> None:
    stream = Stream(channel)
    stream.send_raw(b"\x0a\xff")  # a length running past the message
    with pytest.raises(grpc.RpcError) as ended:
        stream.close()
    assert ended.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "MultiplexRequest" in ended.value.details()


def test_cancel_answers_a_waiting_request_and_the_stream_goes_on(channel: grpc.Channel, models: list[str]) -> None:
    slow = pb.TokenizeRequest(model=models[0], texts=[SLOW_TEXT])
    small = pb.TokenizeRequest(model=models[0], texts=["after the cancel"])
    stream = Stream(channel)
    stream.send([call(1, "tokenize", slow)], cancel=[1, 99])  # 99: never sent, ignored
    (cancelled,) = stream.receive(1)
    assert (cancelled.id, cancelled.error.code) == (1, grpc.StatusCode.CANCELLED.value[0])
    stream.send([call(1, "tokenize", small)])  # the id is free again
    (again,) = stream.receive(1)
    assert stream_answer("tokenize", again) == unary_answer(channel, "tokenize", small)
    assert stream.close() == []


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, in clock ticks of 1/100 s


def test_a_cancelled_request_stops_its_native_work(server: LiveServer, channel: grpc.Channel,
                                                   models: list[str]) -> None:
    """The cancel reaches the worker running the request (its cancel flag), not only its waiter:
    measured in the server's CPU, as tests/server/test_bounded_work.py does for unary calls."""
    pid = server.process.pid
    # Long but legitimate: four texts of 2.4 M characters with offsets (the slow, exact path). One
    # text alone finished within the 0.5 s of CPU the test waits for on a CI machine; four give
    # seconds of work, and the flag is read before each text and each chunk of one.
    text = ("The quick brown fox jumps over the lazy dog, again and again. " * 40_000)[:2_400_000]
    stream = Stream(channel)
    sent_at = _cpu_seconds(pid)
    stream.send([call(5, "tokenize", pb.TokenizeRequest(model=models[0], texts=[text] * 4, return_offsets=True))])
    give_up = time.monotonic() + 60
    while _cpu_seconds(pid) - sent_at < 0.5 and time.monotonic() < give_up:
        time.sleep(0.02)
    busy = _cpu_seconds(pid) - sent_at
    stream.send(cancel=[5])
    (cancelled,) = stream.receive(1)
    assert (cancelled.id, cancelled.error.code) == (5, grpc.StatusCode.CANCELLED.value[0]), (busy, cancelled)
    time.sleep(0.3)  # the flag is read at the worker's next check
    idle_from = _cpu_seconds(pid)
    time.sleep(1.0)
    after_cancel = _cpu_seconds(pid) - idle_from
    print(f"CPU before cancelling: {busy:.2f} s; in the second after cancelling: {after_cancel:.2f} s")
    assert busy >= 0.5, f"the request was not running when it was cancelled ({busy:.2f} s CPU)"
    assert after_cancel < 0.15, f"the server burned {after_cancel:.2f} s of CPU after the request was cancelled"
    assert stream.close() == []


def test_duplicate_ids_are_refused_under_that_id(channel: grpc.Channel, models: list[str]) -> None:
    # Six texts: one alone finished before the next message came in one CI run (the test needs 6
    # still running then).
    slow = pb.TokenizeRequest(model=models[0], texts=[SLOW_TEXT] * 6)
    small = pb.TokenizeRequest(model=models[0], texts=["first"])
    stream = Stream(channel)
    stream.send([call(5, "tokenize", small), call(5, "tokenize", small), call(6, "tokenize", slow)])
    first, duplicate = stream.receive(2)
    assert first.id == duplicate.id == 5
    assert first.WhichOneof("result") == "tokenize"
    assert duplicate.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "id: request 5 is already waiting" in duplicate.error.message
    # 6 is still running: a new request 6 is a duplicate too, the running one is then cancelled.
    stream.send([call(6, "tokenize", small)], cancel=[6])
    refused, cancelled = stream.receive(2)
    assert refused.id == cancelled.id == 6
    assert refused.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert cancelled.error.code == grpc.StatusCode.CANCELLED.value[0]
    assert stream.close() == []


def test_inflight_limit_refuses_each_request_past_it(channel: grpc.Channel, models: list[str]) -> None:
    slow = pb.TokenizeRequest(model=models[0], texts=[SLOW_TEXT])
    small = pb.TokenizeRequest(model=models[0], texts=["limit"])
    stream = Stream(channel)
    # Three wait on the worker pool (a few hundred ms each) while the next message arrives.
    stream.send([call(i, "tokenize", slow) for i in range(1000, 1003)])
    stream.send([call(i, "tokenize", small) for i in range(MAX_INFLIGHT)])
    results = stream.receive(MAX_INFLIGHT + 3)
    assert stream.close() == []
    refused = sorted(r.id for r in results if r.WhichOneof("result") == "error")
    assert refused == [MAX_INFLIGHT - 3, MAX_INFLIGHT - 2, MAX_INFLIGHT - 1]
    error = next(r.error for r in results if r.id == MAX_INFLIGHT - 3)
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert f"--multiplex-max-inflight {MAX_INFLIGHT}" in error.message


def test_a_message_of_more_calls_than_may_wait_ends_the_stream(channel: grpc.Channel) -> None:
    """Every call is answered, a refused one with about 170 bytes: 4 MB of empty 2-byte calls made
    336 MB of answers the server held. A message may carry no more calls than may wait."""
    stream = Stream(channel)
    stream.send_raw(b"\x0a\x00" * (MAX_INFLIGHT + 1))
    with pytest.raises(grpc.RpcError) as ended:
        stream.close()
    assert ended.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert f"{MAX_INFLIGHT + 1} calls in one message" in ended.value.details()
    assert f"--multiplex-max-inflight {MAX_INFLIGHT}" in ended.value.details()


def test_deadline_per_request(channel: grpc.Channel, models: list[str]) -> None:
    slow = pb.TokenizeRequest(model=models[0], texts=[SLOW_TEXT])
    small = pb.TokenizeRequest(model=models[0], texts=["no deadline"])
    stream = Stream(channel)
    # 1 µs: over before the worker pool can start it, whichever notices first (the timer or the call).
    stream.send([call(1, "tokenize", slow, timeout_us=1), call(2, "tokenize", small)])
    results = {r.id: r for r in stream.receive(2)}
    assert stream.close() == []
    assert results[1].error.code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
    assert results[2].WhichOneof("result") == "tokenize"


def test_client_gone_mid_stream_leaves_the_server_serving(server: LiveServer, channel: grpc.Channel,
                                                          models: list[str]) -> None:
    slow = pb.TokenizeRequest(model=models[0], texts=[SLOW_TEXT])
    small = pb.TokenizeRequest(model=models[0], texts=["still serving"])
    stream = Stream(channel)
    stream.send([call(i, "tokenize", slow) for i in range(1, 4)] + [call(9, "tokenize", small)])
    (answered,) = stream.receive(1)
    assert answered.id == 9
    stream.call.cancel()
    assert server.process.poll() is None
    fresh = Stream(channel)
    fresh.send([call(1, "tokenize", small)])
    (result,) = fresh.receive(1)
    assert stream_answer("tokenize", result) == unary_answer(channel, "tokenize", small)
    assert fresh.close() == []
    lines = [e for e in server.log_lines() if e.get("event") == "rpc" and e.get("rpc") == "Multiplex"]
    assert any(e["code"] == "CANCELLED" for e in lines), lines


async def _cancel_mid_message(target: str, model: str, rng: random.Random) -> None:
    """One big message (run on the worker pool, as are its large requests), then the client goes."""
    options = [("grpc.max_send_message_length", 64 << 20), ("grpc.max_receive_message_length", 64 << 20)]
    async with grpc.aio.insecure_channel(target, options=options) as ch:
        stream = ch.stream_stream(METHOD)()
        calls = [call(i, "tokenize", pb.TokenizeRequest(model=model, texts=["x y " * rng.choice([10, 3000, 60_000])]))
                 for i in range(rng.randrange(1, 40))]
        await stream.write(pb.MultiplexRequest(calls=calls).SerializeToString())
        await asyncio.sleep(rng.uniform(0.001, 0.05))
        stream.cancel()


def test_clients_cancelling_big_messages_do_not_hurt_the_server(server: LiveServer, channel: grpc.Channel,
                                                                models: list[str]) -> None:
    rng = random.Random(11)

    async def rounds() -> None:
        for _ in range(16):
            await _cancel_mid_message(server.tcp, models[0], rng)

    asyncio.run(rounds())
    assert server.process.poll() is None, "the server died while clients cancelled big messages"
    small = pb.TokenizeRequest(model=models[0], texts=["still here"])
    stream = Stream(channel)
    stream.send([call(1, "tokenize", small)])
    assert stream_answer("tokenize", stream.receive(1)[0]) == unary_answer(channel, "tokenize", small)
    assert stream.close() == []
    assert not [e for e in server.log_lines() if e.get("event") in ("rpc_crashed", "multiplex_request_crashed")]


def test_draining_ends_an_idle_stream_unavailable(tmp_path: Path) -> None:
    """A stream with nothing in flight ends as the drain starts, without waiting for the client's
    next message (it held the drain for all of --drain-seconds and then was cut with no reason);
    requests of a stream that still has some in flight are answered UNAVAILABLE each (the native
    tests hold that)."""
    server = start_server(tmp_path, "--drain-seconds", "600", "--drain-notice-seconds", "1")
    try:
        with grpc.insecure_channel(server.uds) as ch:
            request = pb.TokenizeRequest(model="qwen3", texts=["before"])
            stream = Stream(ch)
            stream.send([call(1, "tokenize", request)])
            assert stream.receive(1)[0].WhichOneof("result") == "tokenize"
            server.process.send_signal(signal.SIGTERM)
            with pytest.raises(grpc.RpcError) as ended:
                next(stream.call)
            assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "draining" in ended.value.details()
        # Long before the drain's 600 s: nothing held it.
        assert server.process.wait(30) == 0
    finally:
        stop_server(server)
