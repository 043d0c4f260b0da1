"""A Multiplex client that sends and never reads: the stream's reader stops running messages while
any earlier answer waits to be written (gRPC's flow control holds the writer), instead of holding
every answer in memory (125 MB after 30 MB sent, before; then up to a message's worth, 66 MB), and
answers past --max-unsent-mb, counted across streams, refuse new requests each on its own."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from sidecar.rpc import Call, Gate, StreamCounts

multiplex = pytest.importorskip("sidecar.native.multiplex")

from sidecar.servicers.multiplex import _Stream  # noqa: E402


class Table:
    """A stand-in multiplexer: answers each message with 600 bytes, recording what it ran and the
    microseconds it was told had passed since the message arrived."""

    def __init__(self) -> None:
        self.ran: list[bytes] = []
        self.elapsed_us: list[int] = []

    def hold(self) -> None:
        pass

    def release(self) -> None:
        pass

    def run(self, message: bytes, elapsed_us: int, pending: object = (), refuse_code: int = 0,
            refuse_message: str = "") -> object:
        self.ran.append(message)
        self.elapsed_us.append(elapsed_us)
        self.refused = getattr(self, "refused", []) + [(refuse_code, refuse_message)]
        return multiplex.Batch((b"x" * 600,), (), (), [], (0, 0, 0, 0))


async def three_messages():  # noqa: ANN201
    """A client's three small messages, m0 to m2."""
    for i in range(3):
        yield b"m%d" % i


def stream_on(table: Table, gate: Gate | None = None, call: Call | None = None) -> _Stream:
    """A stream of a stand-in servicer over `table`; every message is small (runs inline)."""
    config = SimpleNamespace(max_message_bytes=1000, inline_bytes=1 << 20)
    servicer = SimpleNamespace(runtime=SimpleNamespace(config=config), gate=gate or Gate(), table=lambda: table,
                               record=lambda batch, counts: None)
    return _Stream(servicer, call or Call("Multiplex", "t", None), StreamCounts())


def test_the_reader_waits_while_answers_wait_to_be_written() -> None:
    async def scenario() -> None:
        table = Table()
        stream = stream_on(table)

        reader = asyncio.create_task(stream.read(three_messages()))
        for _ in range(50):
            await asyncio.sleep(0)
        # The first message's answer waits to be written: the second is not run.
        assert table.ran == [b"m0"] and not reader.done()
        answers = stream.messages(reader)
        assert await anext(answers) == b"x" * 600
        for _ in range(50):
            await asyncio.sleep(0)
        assert table.ran == [b"m0"], "the answer is still being written (the writer waits at its yield)"
        # Written: the reader goes on, one message per answer written.
        assert [await anext(answers), await anext(answers)] == [b"x" * 600, b"x" * 600]
        assert table.ran == [b"m0", b"m1", b"m2"]
        await reader

    asyncio.run(scenario())


def test_a_wait_for_the_client_to_read_counts_toward_a_small_messages_deadline() -> None:
    """The second message arrives while the first's answer waits to be written and runs only after
    the client reads it, 200 ms later: its requests are told so (a `timeout_us` that ran out meanwhile
    is DEADLINE_EXCEEDED), also when the message is small enough to run on the event loop."""
    async def scenario() -> None:
        table = Table()
        stream = stream_on(table)

        reader = asyncio.create_task(stream.read(three_messages()))
        await asyncio.sleep(0.2)
        answers = stream.messages(reader)
        for _ in range(3):
            await anext(answers)
        await reader
        assert table.ran == [b"m0", b"m1", b"m2"]
        assert table.elapsed_us[1] >= 200_000, table.elapsed_us

    asyncio.run(scenario())


def test_an_idle_stream_ends_when_the_server_drains() -> None:
    """A stream whose requests are all answered, waiting for the client's next message, ends with
    UNAVAILABLE as soon as the server starts draining (it held a graceful shutdown for all of
    --drain-seconds, then was cut without the documented status)."""
    from sidecar.errors import Unavailable

    async def scenario() -> None:
        table, gate = Table(), Gate()
        stream = stream_on(table, gate)
        more = asyncio.Event()

        async def requests():  # noqa: ANN202
            yield b"m0"
            await more.wait()  # the client sends nothing more
            yield b"m1"

        reader = asyncio.create_task(stream.read(requests()))
        forget = gate.on_close(stream.wake)
        answers = stream.messages(reader)
        assert await anext(answers) == b"x" * 600
        ended = asyncio.create_task(anext(answers))
        await asyncio.sleep(0.05)
        assert not ended.done(), "an open stream with its client still there ends only when the server drains"
        gate.close()
        with pytest.raises(Unavailable, match="draining"):
            await asyncio.wait_for(ended, 5)
        forget()
        reader.cancel()
        assert table.ran == [b"m0"]

    asyncio.run(scenario())


def unsent_call(gate: Gate, peer: str = "ipv4:10.0.0.1:1") -> Call:
    from sidecar.rpc import StreamUnsent

    return Call("Multiplex", "t", None, unsent=StreamUnsent(gate, peer))


def test_results_count_as_unsent_and_new_requests_are_refused_past_the_bound() -> None:
    """Results waiting to be written count against --max-unsent-mb with every other stream's and
    unary call's; while the bound is passed, a message's requests are answered RESOURCE_EXHAUSTED
    naming the flag by the native table (not run), each on its own."""
    async def scenario() -> None:
        gate = Gate(max_unsent_bytes=1000)
        gate.hold("ipv4:10.0.0.2:1", 4500)  # another client's unread answers: past the total bound
        table = Table()
        stream = stream_on(table, gate, unsent_call(gate))
        reader = asyncio.create_task(stream.read(three_messages()))
        for _ in range(50):
            await asyncio.sleep(0)
        assert table.ran == [b"m0"] and table.refused[0][0] == 8  # RESOURCE_EXHAUSTED
        assert "4 x --max-unsent-mb" in table.refused[0][1]
        assert gate.unsent == 5100  # its answer (a small one is always held) counts
        gate.release("ipv4:10.0.0.2:1", 4500)
        answers = stream.messages(reader)
        for _ in range(3):
            assert await anext(answers) == b"x" * 600
        await reader
        assert [code for code, _ in table.refused] == [8, 0, 0]

    asyncio.run(scenario())


def test_results_computed_past_the_bound_are_dropped_and_answered_each_on_its_own() -> None:
    """Results of a message run while other streams filled the bound are not held: each request in
    them gets RESOURCE_EXHAUSTED (how the bound holds whatever the number of streams)."""
    from sidecar.servicers.multiplex import result_ids
    from sidecar.v1 import preprocessor_pb2 as pb

    big = pb.MultiplexResponse(results=[
        pb.MultiplexResult(id=7, tokenize=pb.TokenizeResponse(encodings=[pb.Encoding(token_ids=list(range(3000)))])),
        pb.MultiplexResult(id=300, error=pb.Status(code=3, message="bad")),
        pb.MultiplexResult(id=0, detokenize=pb.DetokenizeResponse(texts=["x"])),
    ]).SerializeToString()
    assert result_ids([big, big]) == [7, 300, 0, 7, 300, 0]

    class BigTable(Table):
        def run(self, *args: object, **kwargs: object) -> object:
            super().run(*args, **kwargs)
            return multiplex.Batch((big,), (), (), [(0, 0, 1), (1, 3, 1), (1, 0, 1)], (0, 0, 0, 0))

    async def scenario() -> None:
        gate = Gate(max_unsent_bytes=len(big) // 8)
        gate.hold("ipv4:10.0.0.2:1", 100)  # under the bound when the message is read
        stream = stream_on(BigTable(), gate, unsent_call(gate))
        reader = asyncio.create_task(stream.read(three_messages()))
        answer = pb.MultiplexResponse.FromString(await anext(stream.messages(reader)))
        assert [(r.id, r.error.code) for r in answer.results] == [(7, 8), (300, 8), (0, 8)]
        assert "--max-unsent-mb" in answer.results[0].error.message
        reader.cancel()

    asyncio.run(scenario())
