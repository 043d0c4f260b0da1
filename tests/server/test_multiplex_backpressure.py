"""A Multiplex client that sends and never reads: the stream's reader stops running messages while
more than a message's worth of answers waits to be written (gRPC's flow control holds the writer),
instead of holding every answer in memory (125 MB after 30 MB sent, before)."""

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

    def run(self, message: bytes, elapsed_us: int, *args: object) -> object:
        self.ran.append(message)
        self.elapsed_us.append(elapsed_us)
        return multiplex.Batch((b"x" * 600,), (), (), [], (0, 0, 0, 0))


async def three_messages():  # noqa: ANN201
    """A client's three small messages, m0 to m2."""
    for i in range(3):
        yield b"m%d" % i


def stream_on(table: Table, gate: Gate | None = None) -> _Stream:
    """A stream of a stand-in servicer over `table`; every message is small (runs inline)."""
    config = SimpleNamespace(max_message_bytes=1000, inline_bytes=1 << 20)
    servicer = SimpleNamespace(runtime=SimpleNamespace(config=config), gate=gate or Gate(), table=lambda: table,
                               record=lambda batch, counts: None)
    return _Stream(servicer, Call("Multiplex", "t", None), StreamCounts())


def test_the_reader_waits_while_answers_wait_to_be_written() -> None:
    async def scenario() -> None:
        table = Table()
        stream = stream_on(table)

        reader = asyncio.create_task(stream.read(three_messages()))
        for _ in range(50):
            await asyncio.sleep(0)
        # 1,200 bytes of answers wait after two messages: the third is not run.
        assert table.ran == [b"m0", b"m1"] and not reader.done()
        answers = stream.messages(reader)
        assert [await anext(answers), await anext(answers)] == [b"x" * 600, b"x" * 600]
        # Written: the reader goes on, and the third answer comes.
        assert await anext(answers) == b"x" * 600
        assert table.ran == [b"m0", b"m1", b"m2"]
        await reader

    asyncio.run(scenario())


def test_a_wait_for_the_client_to_read_counts_toward_a_small_messages_deadline() -> None:
    """The third message arrives while two answers wait to be written and runs only after the
    client reads them, 200 ms later: its requests are told so (a `timeout_us` that ran out meanwhile
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
        assert table.elapsed_us[2] >= 200_000, table.elapsed_us

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
