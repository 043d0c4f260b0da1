"""The floor of the Python front: a grpc.aio server that answers sidecar.v1.Preprocessor calls with
canned bytes and does no work at all (no protobuf parsing either way, no native call, no
metrics, no log line). Whatever the sidecar costs above this, its own code adds; what this costs,
grpc.aio costs every unary call.

    python -m bench.floor_server --uds PATH --replies FILE

FILE is JSON `{"Tokenize": HEX, "Render": HEX, ...}`: the serialized response each method sends
(the benchmark takes them from the real server's answers to its small requests, so the client
decodes the same bytes). Other methods answer an empty message. It serves grpc.health.v1 too, so
any client's readiness check works; it prints `listening` once it does.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

SERVICE = "sidecar.v1.Preprocessor"
METHODS = ("Render", "Tokenize", "Detokenize", "ListModels")


def handler(replies: dict[str, bytes]) -> grpc.GenericRpcHandler:
    def canned(reply: bytes):  # noqa: ANN202
        async def answer(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            return reply

        # No (de)serializer: grpc.aio passes the request bytes through and sends the reply as is.
        return grpc.unary_unary_rpc_method_handler(answer)

    return grpc.method_handlers_generic_handler(SERVICE, {m: canned(replies.get(m, b"")) for m in METHODS})


async def serve(uds: str, replies: dict[str, bytes]) -> None:
    # The same options as the sidecar's server, so only the handler differs.
    server = grpc.aio.server(options=[
        ("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20), ("grpc.so_reuseport", 0),
    ])
    server.add_generic_rpc_handlers((handler(replies),))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    server.add_insecure_port(f"unix:{uds}")
    await server.start()
    print("listening", flush=True)
    await server.wait_for_termination()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--uds", required=True)
    parser.add_argument("--replies", help="JSON file: method -> hex of the serialized response")
    args = parser.parse_args()
    replies = {}
    if args.replies:
        with open(args.replies) as f:
            replies = {method: bytes.fromhex(data) for method, data in json.load(f).items()}
    asyncio.run(serve(args.uds, replies))


if __name__ == "__main__":
    main()
