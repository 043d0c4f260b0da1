"""The worker pool's queue bound, in process on the embedded model: a full lane refuses new unary
work with RESOURCE_EXHAUSTED naming `--max-queue`, but a stream's own messages are admitted (a
stream hands the pool one message at a time; refused, its whole stream would end, every request
open on it lost, because of other clients' calls)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from sidecar.config import ServerConfig
from sidecar.errors import ResourceExhausted
from sidecar.factory import get_hasher
from sidecar.rpc import Call, StreamCounts
from sidecar.runtime import Offloader, Runtime
from sidecar.server import load_registry
from sidecar.v1 import preprocessor_pb2 as pb

pytest.importorskip("sidecar.native.multiplex")


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    """One worker, and a lane that holds one call: the worker's."""
    config = ServerConfig(backend="native", port=None, metrics_port=None, workers=1, max_queue=1)
    offloader = Offloader.for_config(config)
    yield Runtime(config, load_registry(config), offloader, get_hasher("native"))
    offloader.shutdown()


async def occupy_the_worker(runtime: Runtime) -> tuple[threading.Event, asyncio.Task]:
    """A large call that holds the only worker (and so fills the lane) until the event is set."""
    gate = threading.Event()
    blocker = asyncio.create_task(runtime.offloader.run(lambda: gate.wait(30), runtime.config.inline_bytes + 1, "test"))
    await asyncio.sleep(0)
    return gate, blocker


def test_a_full_queue_refuses_unary_work_but_not_a_streams_next_message(runtime: Runtime) -> None:
    from sidecar.servicers.parse_stream import ParseStreamServicer

    config, offloader = runtime.config, runtime.offloader
    model = next(iter(runtime.registry)).name
    large = config.inline_bytes + 1
    opening = pb.ParseStreamRequest(open=pb.OpenRequest(request_id="r", model=model, reasoning_parser="none",
                                                        tool_parser="none")).SerializeToString()
    big_step = pb.ParseStreamRequest(step=pb.Step(items=[pb.StepTokens(request_id="r", token_ids=[1000] * 10_000)]))
    big_step = big_step.SerializeToString()
    assert len(big_step) > config.inline_bytes

    async def scenario() -> pb.ParseStreamResponse:
        gate, blocker = await occupy_the_worker(runtime)  # with it the lane holds --max-queue calls
        with pytest.raises(ResourceExhausted, match=r"--max-queue 1"):
            await offloader.run(lambda: None, large, "test")

        messages: asyncio.Queue[bytes | None] = asyncio.Queue()

        async def requests():  # noqa: ANN202
            while (message := await messages.get()) is not None:
                yield message

        answers = ParseStreamServicer(runtime).ParseStream(requests(), None, Call("ParseStream", "test", None),
                                                           StreamCounts())
        await messages.put(opening)
        await anext(answers)
        await messages.put(big_step)
        step = asyncio.create_task(anext(answers))
        await asyncio.sleep(0.05)  # waiting behind the blocker, not refused
        gate.set()
        await blocker
        answer = pb.ParseStreamResponse.FromString(await asyncio.wait_for(step, 30))
        await messages.put(None)
        await answers.aclose()
        return answer

    (delta,) = asyncio.run(scenario()).deltas
    assert delta.request_id == "r" and not delta.HasField("error") and delta.content, delta


def test_a_full_queue_does_not_end_a_multiplex_stream(runtime: Runtime) -> None:
    """A Multiplex message over the inline bound (many small calls) goes to the pool as one hop;
    with the queue full it waits its turn instead of ending the stream."""
    from sidecar.rpc import Gate
    from sidecar.servicers.multiplex import MultiplexServicer

    model = next(iter(runtime.registry)).name
    calls = [pb.MultiplexCall(id=i, tokenize=pb.TokenizeRequest(model=model, texts=["word " * 100])) for i in range(40)]
    message = pb.MultiplexRequest(calls=calls).SerializeToString()
    assert len(message) > runtime.config.inline_bytes

    async def scenario() -> list[pb.MultiplexResult]:
        gate, blocker = await occupy_the_worker(runtime)  # the lane full

        async def requests():  # noqa: ANN202
            yield message
            await asyncio.sleep(30)  # the stream stays open

        answers = MultiplexServicer(runtime, Gate()).Multiplex(requests(), None, Call("Multiplex", "test", None),
                                                              StreamCounts())
        first = asyncio.create_task(anext(answers))
        await asyncio.sleep(0.05)
        gate.set()
        await blocker
        results = list(pb.MultiplexResponse.FromString(await asyncio.wait_for(first, 30)).results)
        while len(results) < len(calls):
            results += pb.MultiplexResponse.FromString(await asyncio.wait_for(anext(answers), 30)).results
        await answers.aclose()
        return results

    results = asyncio.run(scenario())
    assert sorted(r.id for r in results) == list(range(40))
    assert all(r.WhichOneof("result") == "tokenize" for r in results), [r.error for r in results if r.error.code][:1]
