"""Builds and runs the gRPC server: servicers, health, reflection, listeners, graceful drain."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from sidecar import metrics
from sidecar.backend import get_backend
from sidecar.config import ServerConfig
from sidecar.logs import get_logger
from sidecar.registry import ModelRegistry, embedded_spec
from sidecar.rpc import unary
from sidecar.runtime import Offloader, Runtime
from sidecar.servicers.detokenize import DetokenizeServicer
from sidecar.servicers.models import ModelsServicer
from sidecar.servicers.parse_stream import ParseStreamServicer
from sidecar.servicers.render import RenderServicer
from sidecar.servicers.tokenize import TokenizeServicer
from sidecar.v1 import preprocessor_pb2 as pb

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Preprocessor"].full_name

_log = get_logger("sidecar.server")


def load_registry(config: ServerConfig) -> ModelRegistry:
    """Loads every `--model`, or the embedded default when there is none."""
    registry = ModelRegistry(get_backend(config.backend))
    for spec in config.models or [embedded_spec()]:
        model = registry.load(spec)
        _log.info(
            "model_loaded", model=model.name, source=model.source, fingerprint=model.fingerprint,
            encoder=model.tokenizer.encoder, backend=model.backend, vocab_size=model.tokenizer.vocab_size,
        )
    metrics.MODELS.set(len(registry))
    return registry


def preprocessor_handler(runtime: Runtime) -> grpc.GenericRpcHandler:
    """The `sidecar.v1.Preprocessor` service, one servicer object per RPC."""
    tokenize = TokenizeServicer(runtime)
    detokenize = DetokenizeServicer(runtime)
    render = RenderServicer(runtime)
    models = ModelsServicer(runtime)
    parse = ParseStreamServicer(runtime)

    def unary_handler(rpc, handler, request_cls, response_cls):  # noqa: ANN001, ANN202
        return grpc.unary_unary_rpc_method_handler(
            unary(rpc, handler),
            request_deserializer=request_cls.FromString,
            response_serializer=response_cls.SerializeToString,
        )

    return grpc.method_handlers_generic_handler(
        SERVICE_NAME,
        {
            "Tokenize": unary_handler("Tokenize", tokenize.Tokenize, pb.TokenizeRequest, pb.TokenizeResponse),
            "Detokenize": unary_handler("Detokenize", detokenize.Detokenize, pb.DetokenizeRequest, pb.DetokenizeResponse),
            "Render": unary_handler("Render", render.Render, pb.RenderRequest, pb.RenderResponse),
            "ListModels": unary_handler("ListModels", models.ListModels, pb.ListModelsRequest, pb.ListModelsResponse),
            # Raw bytes both ways: the parse multiplexer reads and writes the wire format itself.
            "ParseStream": grpc.stream_stream_rpc_method_handler(parse.ParseStream),
        },
    )


@dataclass
class RunningServer:
    """A started server and what it listens on."""

    server: grpc.aio.Server
    health: health.aio.HealthServicer
    runtime: Runtime
    addresses: list[str]
    metrics_port: int | None

    async def drain(self, grace: float) -> None:
        """Stops taking new RPCs, lets in-flight ones finish for `grace` seconds, then stops."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)
        self.runtime.offloader.shutdown()


async def start(config: ServerConfig, registry: ModelRegistry | None = None) -> RunningServer:
    """Loads models (unless given) and starts listening."""
    registry = registry or load_registry(config)
    runtime = Runtime(config, registry, Offloader(config.workers, config.max_queue, config.inline_bytes))
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", config.max_message_bytes),
            ("grpc.max_send_message_length", config.max_message_bytes),
            ("grpc.so_reuseport", 0),
        ]
    )
    server.add_generic_rpc_handlers((preprocessor_handler(runtime),))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    serving = health_pb2.HealthCheckResponse.SERVING
    for name in ["", SERVICE_NAME, *(m.name for m in registry)]:
        await health_servicer.set(name, serving)
    if config.reflection:
        from grpc_reflection.v1alpha import reflection

        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    addresses = []
    if config.port is not None:
        bound = server.add_insecure_port(f"{config.host}:{config.port}")
        addresses.append(f"{config.host}:{bound}")
    if config.uds:
        server.add_insecure_port(f"unix:{config.uds}")
        addresses.append(f"unix:{config.uds}")
    if not addresses:
        raise ValueError("no listener: give --port and/or --uds")
    await server.start()
    metrics_port = metrics.serve_http(config.metrics_port) if config.metrics_port is not None else None
    return RunningServer(server, health_servicer, runtime, addresses, metrics_port)


async def serve(config: ServerConfig) -> None:
    """Runs until SIGTERM/SIGINT, then drains."""
    running = await start(config)
    _log.info(
        "listening", addresses=running.addresses, metrics_port=running.metrics_port, backend=config.backend,
        models=[m.name for m in running.runtime.registry],
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    _log.info("draining", grace_seconds=config.drain_seconds)
    await running.drain(config.drain_seconds)
    _log.info("stopped")
