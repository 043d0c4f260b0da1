"""Builds and runs the gRPC server: servicers, health, reflection, listeners, graceful drain."""

from __future__ import annotations

import asyncio
import gc
import signal
import socket
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from router_adapter import KvRouter, ModelOptions
from router_adapter.hashing import BlockHasher
from sidecar import metrics
from sidecar.backend import RendererSettings
from sidecar.factory import get_backend, get_hasher
from sidecar.config import ServerConfig
from sidecar.errors import FailedPrecondition
from sidecar.logs import get_logger
from sidecar.registry import ModelRegistry, embedded_spec
from sidecar.rpc import stream, unary
from sidecar.runtime import Offloader, Runtime
from sidecar.servicers.detokenize import DetokenizeServicer
from sidecar.servicers.kv_router import KvRouterServicer, register_metrics
from sidecar.servicers.models import ModelsServicer
from sidecar.servicers.parse_stream import ParseStreamServicer
from sidecar.servicers.render import RenderServicer
from sidecar.servicers.tokenize import TokenizeServicer
from sidecar.v1 import kv_router_pb2 as kv
from sidecar.v1 import preprocessor_pb2 as pb

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Preprocessor"].full_name
KV_SERVICE_NAME = kv.DESCRIPTOR.services_by_name["KvRouter"].full_name

_log = get_logger("sidecar.server")


def load_registry(config: ServerConfig) -> ModelRegistry:
    """Loads every `--model`, or the embedded default when there is none."""
    settings = RendererSettings(cache_bytes=config.render_cache_mb << 20, fuel=config.template_fuel)
    registry = ModelRegistry(get_backend(config.backend), settings)
    for spec in config.models or [embedded_spec()]:
        model = registry.load(spec)
        _log.info(
            "model_loaded", model=model.name, source=model.source, fingerprint=model.fingerprint,
            encoder=model.tokenizer.encoder, backend=model.backend, vocab_size=model.tokenizer.vocab_size,
        )
    metrics.MODELS.set(len(registry))
    return registry


def unary_handler(rpc: str, handler, request_cls, response_cls) -> grpc.RpcMethodHandler:  # noqa: ANN001
    """A unary method wrapped by `sidecar.rpc.unary` (request id, logs, metrics, status mapping)."""
    return grpc.unary_unary_rpc_method_handler(
        unary(rpc, handler),
        request_deserializer=request_cls.FromString,
        response_serializer=response_cls.SerializeToString,
    )


def preprocessor_handler(runtime: Runtime) -> grpc.GenericRpcHandler:
    """The `sidecar.v1.Preprocessor` service, one servicer object per RPC."""
    tokenize = TokenizeServicer(runtime)
    detokenize = DetokenizeServicer(runtime)
    render = RenderServicer(runtime)
    models = ModelsServicer(runtime)
    parse = ParseStreamServicer(runtime)

    return grpc.method_handlers_generic_handler(
        SERVICE_NAME,
        {
            "Tokenize": unary_handler("Tokenize", tokenize.Tokenize, pb.TokenizeRequest, pb.TokenizeResponse),
            "Detokenize": unary_handler("Detokenize", detokenize.Detokenize, pb.DetokenizeRequest, pb.DetokenizeResponse),
            "Render": unary_handler("Render", render.Render, pb.RenderRequest, pb.RenderResponse),
            "ListModels": unary_handler("ListModels", models.ListModels, pb.ListModelsRequest, pb.ListModelsResponse),
            # Raw bytes both ways: the parse multiplexer reads and writes the wire format itself.
            "ParseStream": grpc.stream_stream_rpc_method_handler(stream("ParseStream", parse.ParseStream)),
        },
    )


def build_kv_router(config: ServerConfig, hasher: BlockHasher) -> KvRouter | None:
    """The router adapter for `--kv-events` sources, or None without any."""
    if config.kv is None or not config.kv.sources:
        return None

    kv_config = config.kv
    models = {
        source.model: ModelOptions(block_size=kv_config.block_size, engine_spec=kv_config.engine_specs.get(source.model))
        for source in kv_config.sources
    }
    return KvRouter(
        kv_config.sources, block_size=kv_config.block_size, models=models, max_blocks=kv_config.max_blocks,
        silence_timeout_s=kv_config.silence_timeout_s or None, hasher=hasher,
    )


def kv_router_handler(runtime: Runtime, router) -> grpc.GenericRpcHandler:  # noqa: ANN001
    """The `sidecar.v1.KvRouter` service (FAILED_PRECONDITION everywhere without KV-event sources)."""
    servicer = KvRouterServicer(runtime, router)

    return grpc.method_handlers_generic_handler(
        KV_SERVICE_NAME,
        {
            "Score": unary_handler("Score", servicer.Score, kv.ScoreRequest, kv.ScoreResponse),
            "KvStatus": unary_handler("KvStatus", servicer.KvStatus, kv.KvStatusRequest, kv.KvStatusResponse),
        },
    )


def prepare_unix_socket(path: str) -> None:
    """Removes a socket file left by a server that died without cleaning up; refuses to take over
    a live server's socket or to delete anything that is not a socket."""
    target = Path(path)
    if not target.exists():
        return
    if not stat.S_ISSOCK(target.stat().st_mode):
        raise FailedPrecondition(f"--uds: {path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        target.unlink()  # stale: nobody listens
        return
    except OSError:
        return
    finally:
        probe.close()
    raise FailedPrecondition(f"--uds: another server is already listening on {path}")


def _bind(server: grpc.aio.Server, address: str) -> int:
    try:
        return server.add_insecure_port(address)
    except RuntimeError:
        raise FailedPrecondition(f"cannot listen on {address}: address in use or not permitted") from None


@dataclass
class RunningServer:
    """A started server and what it listens on."""

    server: grpc.aio.Server
    health: health.aio.HealthServicer
    runtime: Runtime
    addresses: list[str]
    metrics_port: int | None
    kv_router: KvRouter | None = None

    async def drain(self, grace: float) -> None:
        """Stops taking new RPCs, lets in-flight ones finish for `grace` seconds, then stops."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace)
        self.runtime.offloader.shutdown()
        if self.kv_router is not None:
            self.kv_router.stop()


async def start(config: ServerConfig, registry: ModelRegistry | None = None) -> RunningServer:
    """Loads models (unless given) and starts listening."""
    registry = registry or load_registry(config)
    hasher = get_hasher(config.backend)
    runtime = Runtime(config, registry, Offloader(config.workers, config.max_queue, config.inline_bytes), hasher)
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", config.max_message_bytes),
            ("grpc.max_send_message_length", config.max_message_bytes),
            ("grpc.so_reuseport", 0),
        ]
    )
    kv_router = build_kv_router(config, hasher)
    server.add_generic_rpc_handlers((preprocessor_handler(runtime), kv_router_handler(runtime, kv_router)))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    serving = health_pb2.HealthCheckResponse.SERVING
    for name in ["", SERVICE_NAME, KV_SERVICE_NAME, *(m.name for m in registry)]:
        await health_servicer.set(name, serving)
    if config.reflection:
        from grpc_reflection.v1alpha import reflection

        reflection.enable_server_reflection(
            (SERVICE_NAME, KV_SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
    addresses = []
    if config.port is not None:
        addresses.append(f"{config.host}:{_bind(server, f'{config.host}:{config.port}')}")
    if config.uds:
        prepare_unix_socket(config.uds)
        _bind(server, f"unix:{config.uds}")
        addresses.append(f"unix:{config.uds}")
    if not addresses:
        raise ValueError("no listener: give --port and/or --uds")
    await server.start()
    if kv_router is not None:
        kv_router.start()
        register_metrics(kv_router)
        _log.info("kv_events_subscribed", sources=[s.worker + "=" + s.endpoint for s in kv_router.subscriber.sources],
                  models=sorted(kv_router.indexes))
    metrics_port = metrics.serve_http(config.metrics_port) if config.metrics_port is not None else None
    return RunningServer(server, health_servicer, runtime, addresses, metrics_port, kv_router)


async def serve(config: ServerConfig) -> None:
    """Runs until SIGTERM/SIGINT, then drains."""
    running = await start(config)
    # Modules, descriptors and loaded models live as long as the process; moving them out of the
    # collector's generations keeps each full collection under traffic from rescanning them.
    gc.collect()
    gc.freeze()
    models = [m.name for m in running.runtime.registry]
    _log.info(
        "listening", addresses=running.addresses, metrics_port=running.metrics_port, backend=config.backend,
        hasher=running.runtime.hasher.name, models=models,
    )
    metrics_note = f", metrics on :{running.metrics_port}/metrics" if running.metrics_port else ""
    print(f"sidecar: serving {', '.join(models)} on {', '.join(running.addresses)}{metrics_note}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    _log.info("draining", grace_seconds=config.drain_seconds)
    await running.drain(config.drain_seconds)
    if config.uds:
        Path(config.uds).unlink(missing_ok=True)
    _log.info("stopped")
