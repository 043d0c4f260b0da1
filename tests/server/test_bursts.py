"""A burst of calls on one connection (a router flushing its queue after a restart): gRPC holds the
calls the server's event loop has not taken yet, and refuses new ones past a bound with CANCELLED,
which a router cannot tell from its own cancellation. The bound is `--max-pending-calls`; gRPC's own
default (3,000) refused about half of a burst of 6,000 small calls."""

from __future__ import annotations

import asyncio
import collections
from pathlib import Path

import grpc
import pytest

from sidecar.v1 import preprocessor_pb2 as pb
from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc
from tests.conftest import start_server, stop_server

pytestmark = pytest.mark.e2e

REQUEST = pb.DetokenizeRequest(model="qwen3", sequences=[pb.TokenIds(token_ids=[1000, 2000])])


async def _burst(target: str, calls: int) -> collections.Counter:
    """Outcome (status code name) -> count, of `calls` Detokenize calls sent at once on one channel."""
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.PreprocessorStub(channel)
        expected = await stub.Detokenize(REQUEST)  # connected before the burst
        results = await asyncio.gather(*[stub.Detokenize(REQUEST, timeout=120) for _ in range(calls)],
                                       return_exceptions=True)
    outcomes: collections.Counter = collections.Counter()
    for r in results:
        if isinstance(r, grpc.aio.AioRpcError):
            outcomes[r.code().name] += 1
        else:
            assert r == expected
            outcomes["OK"] += 1
    return outcomes


def _burst_on_server(tmp_path: Path, calls: int, *args: str) -> collections.Counter:
    server = start_server(tmp_path, *args)
    try:
        outcomes = asyncio.run(_burst(server.uds, calls))
        assert asyncio.run(_burst(server.uds, 1)) == {"OK": 1}  # still serving
        return outcomes
    finally:
        assert stop_server(server) == 0


def test_a_burst_on_one_connection_is_answered_in_full(tmp_path: Path) -> None:
    assert _burst_on_server(tmp_path, 6000) == {"OK": 6000}


def test_the_bound_on_calls_not_taken_yet_is_the_flag(tmp_path: Path) -> None:
    outcomes = _burst_on_server(tmp_path, 1000, "--max-pending-calls", "8")
    assert set(outcomes) == {"OK", "CANCELLED"} and sum(outcomes.values()) == 1000, outcomes
