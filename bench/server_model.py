"""The measured choice behind the server: grpc.aio versus grpcio's threaded server, on a trivial
unary RPC over a Unix socket (the transport floor every sidecar RPC pays), and on a small Tokenize
request while one client streams large requests (does the small one wait behind the large ones?).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import tempfile
import time
from concurrent import futures

import grpc

from bench.common import Section, fmt_time, measure
from sidecar.v1 import preprocessor_pb2 as pb
from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc


def _handler(fn) -> grpc.GenericRpcHandler:  # noqa: ANN001
    method = grpc.unary_unary_rpc_method_handler(
        fn, request_deserializer=pb.ListModelsRequest.FromString, response_serializer=pb.ListModelsResponse.SerializeToString
    )
    return grpc.method_handlers_generic_handler("sidecar.v1.Preprocessor", {"ListModels": method})


def _serve_threads(address: str) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2))
    server.add_generic_rpc_handlers((_handler(lambda request, context: pb.ListModelsResponse()),))
    server.add_insecure_port(address)
    server.start()
    server.wait_for_termination()


def _serve_aio(address: str) -> None:
    async def main() -> None:
        async def handle(request, context):  # noqa: ANN001, ANN202
            return pb.ListModelsResponse()

        server = grpc.aio.server()
        server.add_generic_rpc_handlers((_handler(handle),))
        server.add_insecure_port(address)
        await server.start()
        await server.wait_for_termination()

    asyncio.run(main())


def run(quick: bool) -> list[Section]:
    section = Section("Server model: empty unary RPC over UDS (Python client), grpc.aio vs threaded grpcio",
                      ["server", "p50", "p99"])
    n = 500 if quick else 5000
    p50 = {}
    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        for name, target in (("threads (grpc.server + pool)", _serve_threads), ("asyncio (grpc.aio)", _serve_aio)):
            address = f"unix:{tmp}/{name[:5]}.sock"
            process = ctx.Process(target=target, args=(address,), daemon=True)
            process.start()
            stub = pb_grpc.PreprocessorStub(grpc.insecure_channel(address))
            grpc.channel_ready_future(grpc.insecure_channel(address)).result(timeout=30)
            stats = measure(lambda i: stub.ListModels(pb.ListModelsRequest()), n, warmup=200)
            section.rows.append([name, fmt_time(stats.p50), fmt_time(stats.p99)])
            p50[name.split()[0]] = stats.p50
            process.terminate()
            process.join()
            time.sleep(0.1)
    section.notes.append(
        f"In this run an empty call costs {p50['asyncio'] / p50['threads']:.2f}x as much on grpc.aio as on the "
        "threaded server. The sidecar still uses grpc.aio: it serves "
        "health checks and small requests on the event loop while large native calls run on a bounded pool "
        "(no thread per in-flight request), and it carries the long-lived ParseStream streams cheaply."
    )
    return [section]
