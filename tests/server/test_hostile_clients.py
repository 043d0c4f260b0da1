"""Clients that cancel, disconnect or misbehave on purpose must not take the server down.

The first case is a crash reported against the server: a ParseStream step large enough to run on
the worker pool, cancelled by the client while it runs, freed the stream's native state under the
worker (SIGSEGV). It is replayed here many times with different sizes and delays.
"""

from __future__ import annotations

import asyncio
import json
import random

import grpc
import pytest

from sidecar.v1 import preprocessor_pb2 as pb
from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc
from tests.conftest import LiveServer, start_server, stop_server

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    live = start_server(tmp_path_factory.mktemp("hostile"))
    yield live
    stop_server(live)


async def _cancel_mid_step(target: str, rng: random.Random) -> None:
    async with grpc.aio.insecure_channel(target, options=[("grpc.max_send_message_length", 64 << 20)]) as channel:
        call = channel.stream_stream(
            "/sidecar.v1.Preprocessor/ParseStream",
            request_serializer=pb.ParseStreamRequest.SerializeToString,
            response_deserializer=pb.ParseStreamResponse.FromString,
        )()
        await call.write(pb.ParseStreamRequest(open=pb.OpenRequest(
            request_id="r", model="qwen3", tool_parser="none", reasoning_parser="none")))
        opened = await call.read()
        assert not opened.deltas, opened
        ids = [rng.randrange(0, 150_000) for _ in range(rng.choice([30_000, 120_000, 400_000, 1_000_000]))]
        await call.write(pb.ParseStreamRequest(step=pb.Step(items=[pb.StepTokens(request_id="r", token_ids=ids)])))
        await asyncio.sleep(rng.uniform(0.001, 0.05))
        call.cancel()


def test_cancelling_large_parse_steps_does_not_crash(server: LiveServer) -> None:
    rng = random.Random(7)

    async def rounds() -> None:
        for _ in range(24):
            await _cancel_mid_step(server.tcp, rng)

    asyncio.run(rounds())
    assert server.process.poll() is None, "the server died while clients cancelled large steps"
    stub = pb_grpc.PreprocessorStub(grpc.insecure_channel(server.uds))
    assert stub.Tokenize(pb.TokenizeRequest(model="qwen3", texts=["still here"]), timeout=30).encodings[0].token_ids
    assert not [e for e in server.log_lines() if e.get("event") == "rpc_crashed"]


def test_a_stream_holding_back_too_much_in_all_fails_the_request_that_passes_the_bound(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Each request may hold 1 MiB of undecided output (--parse-max-held-kb), and a stream 4096
    requests: 4 GiB a client could make one stream hold. --parse-max-stream-held-mb bounds the sum;
    here 1 MiB, and three requests holding 200 KB of an unterminated tool call each (about 400 KB
    counted each: the JSON call reader keeps its raw text beside what it has read)."""
    live = start_server(tmp_path_factory.mktemp("stream-held"), "--parse-max-stream-held-mb", "1")
    try:
        stub = pb_grpc.PreprocessorStub(grpc.insecure_channel(live.uds))
        text = '<tool_call>{"note": "' + "word " * 40_000
        ids = list(stub.Tokenize(pb.TokenizeRequest(model="qwen3", texts=[text]), timeout=30).encodings[0].token_ids)

        def requests():  # noqa: ANN202
            for name in "abc":
                yield pb.ParseStreamRequest(open=pb.OpenRequest(request_id=name, model="qwen3", tool_parser="hermes",
                                                                reasoning_parser="none"))
            for name in "abc":
                yield pb.ParseStreamRequest(step=pb.Step(items=[pb.StepTokens(request_id=name, token_ids=ids)]))
            yield pb.ParseStreamRequest(step=pb.Step(items=[pb.StepTokens(request_id="a", token_ids=[], finished=True)]))

        deltas = [d for answer in stub.ParseStream(requests(), timeout=60) for d in answer.deltas]
        failed = [d for d in deltas if d.HasField("error")]
        assert [d.request_id for d in failed] == ["c"], deltas
        assert failed[0].error.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
        assert "--parse-max-stream-held-mb" in failed[0].error.message
        # "a" finished: what it held comes out as content.
        assert "".join(d.content for d in deltas if d.request_id == "a") == text
        assert live.process.poll() is None
    finally:
        stop_server(live)


def test_long_client_values_get_their_status_and_bounded_log_lines(server: LiveServer) -> None:
    """Messages and the `rpc` log line repeated client strings whole: a 20 KB model name made the
    status pass gRPC's 16 KiB metadata limit (the client got RESOURCE_EXHAUSTED "Stream removed"
    instead of NOT_FOUND), and a 30 MB one wrote 180 MB of log (the name twice a line)."""
    stub = pb_grpc.PreprocessorStub(grpc.insecure_channel(server.uds))
    hi = '[{"role": "user", "content": "Hi"}]'
    tools = json.dumps([{"type": "x" * 20_000, "function": {"name": "f"}}])
    calls = [
        (stub.Tokenize, pb.TokenizeRequest(model="m" * 20_000, texts=["x"]), "NOT_FOUND", "model: unknown model 'mmm"),
        (stub.Tokenize, pb.TokenizeRequest(model="m" * 5_000_000, texts=["x"]), "NOT_FOUND", "model: unknown model"),
        (stub.Render, pb.RenderRequest(model="qwen3", messages_json=hi, chat_template="t" * 20_000), "NOT_FOUND",
         "chat_template: this model has no template named"),
        (stub.Render, pb.RenderRequest(model="qwen3", messages_json=hi, tools_json=tools), "INVALID_ARGUMENT",
         "tools[0].type: expected"),
    ]
    for method, request, code, start in calls:
        with pytest.raises(grpc.RpcError) as refused:
            method(request, timeout=60)
        assert (refused.value.code().name, refused.value.details()[:len(start)]) == (code, start)
        assert len(refused.value.details()) < 1000
    opened = pb.ParseStreamRequest(open=pb.OpenRequest(request_id="r", model="m" * 5_000_000))
    [answer] = stub.ParseStream(iter([opened]), timeout=60)
    assert answer.deltas[0].error.code == grpc.StatusCode.NOT_FOUND.value[0]
    assert len(answer.deltas[0].error.message) < 1000
    echoing = [line for line in server.log_path.read_text().splitlines() if "mmmmmmmmmm" in line or "tttttttttt" in line]
    assert len(echoing) == 4  # three rpc lines and parse_open_failed
    assert max(len(line) for line in echoing) < 2000
    assert {'"model":"' + "m" * 200 + '... (5000000 characters)"' in line for line in echoing} == {True, False}
