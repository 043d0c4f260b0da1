"""KvRouter.Score from its raw request body, in process: the handler path the server runs
(`ScoreRaw`: the token ids split off natively, the rest decoded, the id buffer scored) beside the
protobuf path (the body decoded whole, `Score`: the ids as a list, then a uint32 array, then
scored), same index, same request, same run. Index as in bench.kv_index's Score section.

    python -m bench.kv_score_rpc [--quick]
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import sys
import time

from bench.common import Section, Stats, fmt_time
from bench.kv_index import BS, PROMPT, _fill_for_score, _native, _tokens


def run(quick: bool) -> list[Section]:
    if _native() is None:
        return [Section("KV Score RPC", ["note"], [["native library not built: run `make native`"]])]
    from router_adapter import KvRouter, ModelOptions
    from sidecar.config import ServerConfig
    from sidecar.factory import get_hasher, get_index_factory
    from sidecar.rpc import Call, decode_request
    from sidecar.runtime import Offloader, Runtime
    from sidecar.server import load_registry
    from sidecar.servicers.kv_router import KvRouterServicer
    from sidecar.v1 import kv_router_pb2 as kv
    from sidecar.v1 import preprocessor_pb2 as pb

    total, workers = (200_000, 64) if quick else (4_000_000, 64)
    rounds, per_round = 2, 100
    config = ServerConfig(backend="native", port=None, metrics_port=None)
    offloader = Offloader.for_config(config)
    runtime = Runtime(config, load_registry(config), offloader, get_hasher("native"))
    router = KvRouter([], models={"m": ModelOptions(block_size=BS)}, hasher=runtime.hasher,
                      index_factory=get_index_factory("native"))
    prompt = _tokens(random.Random(3), PROMPT)
    _fill_for_score(router.indexes["m"], prompt, workers, total, None, native=True)
    servicer = KvRouterServicer(runtime, router)
    body = kv.ScoreRequest(model="m", token_ids=pb.TokenIds(token_ids=prompt)).SerializeToString()

    async def new_path() -> bytes:
        return await servicer.ScoreRaw(body, None, Call("Score", "b", None))

    async def old_path() -> bytes:
        # What the server ran before: the unary wrapper's decode, Score, the response's encoding.
        request = decode_request("Score", kv.ScoreRequest, body)
        return (await servicer.Score(request, None, Call("Score", "b", None))).SerializeToString()

    async def latency(fn) -> Stats:  # noqa: ANN001
        for _ in range(5):
            await fn()
        gc.collect()
        samples = []
        for _ in range(per_round):
            t = time.perf_counter()
            await fn()
            samples.append(time.perf_counter() - t)
        return Stats(samples)

    async def measure() -> list[list[str]]:
        assert await new_path() == await old_path(), "the two paths answer differently"
        rows = []
        # Interleaved rounds, so that load from other processes falls on both alike.
        results = {"raw body, ids split natively (ScoreRaw)": [], "decoded body, ids as a list (Score)": []}
        for _ in range(rounds):
            for samples, fn in zip(results.values(), (new_path, old_path)):
                samples.extend((await latency(fn)).samples)
        for label, samples in results.items():
            stats = Stats(samples)
            rows.append([label, fmt_time(stats.p50), fmt_time(stats.p99)])
        return rows

    try:
        rows = asyncio.run(measure())
    finally:
        router.stop()
        offloader.shutdown()
    section = Section(f"KvRouter.Score RPC handler, {PROMPT}-token request ({len(body):,}-byte body), "
                      f"{workers} workers, {total:,} entries", ["path", "p50", "p99"], rows)
    section.notes += [
        f"{rounds * per_round} calls per row in {rounds} interleaved rounds, in process (no gRPC transport): from the "
        "request body to the response bytes, the body above the inline bound so both paths run their work on "
        "a pool worker (the hop is included). Both answers are equal (asserted).",
        f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs.",
    ]
    return [section]


if __name__ == "__main__":
    for s in run("--quick" in sys.argv):
        print(s.markdown())
