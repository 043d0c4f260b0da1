"""KvRouter.Score from its raw request body, in process: the handler path the server runs
(`ScoreRaw`: the token ids split off natively, the rest decoded, the id buffer scored and the
response written natively) beside the same split with the response built in Python from the
index's `Score` (what `ScoreRaw` ran before the native response), and the protobuf path (the body decoded whole, `Score`: the ids as a list, then a uint32 array, then
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
    from sidecar.native.kv_index import split_score
    from sidecar.servicers.kv_router import KvRouterServicer, _response
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

    async def python_response_path() -> bytes:
        # ScoreRaw before the native response: the same split, the score as Python objects, the
        # ScoreResponse built and serialized by protobuf.
        def work() -> bytes:
            rest, ids, _ = split_score(body)
            request = kv.ScoreRequest.FromString(rest)
            index = router.index(request.model)
            score = index.score(ids, request.lora_name, request.cache_salt, ())
            return _response(router, index, score, len(ids), "").SerializeToString()

        return await runtime.offloader.run(work, len(body), "Score")

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
        paths = (new_path, python_response_path, old_path)
        answers = [kv.ScoreResponse.FromString(await fn()) for fn in paths]
        assert answers[0] == answers[1] == answers[2], "the paths answer differently"
        rows = []
        # Interleaved rounds, so that load from other processes falls on all alike.
        results = {
            "raw body, ids split natively, response written natively (ScoreRaw)": [],
            "raw body, ids split natively, response built in Python (ScoreRaw before)": [],
            "decoded body, ids as a list (Score)": [],
        }
        for _ in range(rounds):
            for samples, fn in zip(results.values(), paths):
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
        "a pool worker (the hop is included). The answers parse to equal messages (asserted).",
        f"load average during the run: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs.",
    ]
    return [section]


if __name__ == "__main__":
    for s in run("--quick" in sys.argv):
        print(s.markdown())
