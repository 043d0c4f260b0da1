"""Builds and runs the gRPC server: servicers, health, reflection, listeners, graceful drain."""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from router_adapter import KvRouter, ModelOptions
from router_adapter.router import IndexFactory
from router_adapter.hashing import BlockHasher
from sidecar import metrics, tracing
from sidecar.backend import EncodeOptions, RendererSettings
from sidecar.group import DRAINING, HEARTBEAT_SECONDS, SERVING, GroupState
from sidecar.factory import get_backend, get_hasher, get_index_factory
from sidecar.config import ServerConfig
from sidecar.errors import CUT_AT_DRAIN_END, CUT_BY_SECOND_SIGNAL, CUT_BY_STOP, FailedPrecondition
from sidecar.listeners import UnixSocket, bind_tcp
from sidecar.logs import get_logger
from sidecar.registry import ModelRegistry, embedded_spec
from sidecar.reload import Reloader
from sidecar.rpc import Gate, raw_unary, stream, unary
from sidecar.runtime import Offloader, Runtime, fix_malloc_mmap_threshold
from sidecar.servicers.admin import AdminServicer
from sidecar.servicers.detokenize import DetokenizeServicer
from sidecar.servicers.kv_router import KvRouterServicer, register_metrics
from sidecar.servicers.models import ModelsServicer
from sidecar.servicers.multiplex import MultiplexServicer
from sidecar.servicers.native_table import NativeTable
from sidecar.servicers.parse_stream import ParseStreamServicer
from sidecar.servicers.parsers import ParsersServicer
from sidecar.servicers.render import RenderServicer
from sidecar.servicers.tokenize import TokenizeServicer
from sidecar.v1 import admin_pb2 as admin_pb
from sidecar.v1 import kv_router_pb2 as kv
from sidecar.v1 import preprocessor_pb2 as pb

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Preprocessor"].full_name
KV_SERVICE_NAME = kv.DESCRIPTOR.services_by_name["KvRouter"].full_name
ADMIN_SERVICE_NAME = admin_pb.DESCRIPTOR.services_by_name["Admin"].full_name
#: Health of this process alone, even under `--processes N` (where every other name answers for the
#: group): a client spreading calls over the processes probes each with it, so one restarting
#: sibling does not make the live ones look down.
PROCESS_HEALTH_NAME = "sidecar.process"

_log = get_logger("sidecar.server")


def load_registry(config: ServerConfig) -> ModelRegistry:
    """Loads every `--model`, or the embedded default when there is none."""
    settings = RendererSettings(
        cache_bytes=config.render_cache_mb << 20, fuel=config.template_fuel, max_word_chars=config.max_word_chars
    )
    registry = ModelRegistry(get_backend(config.backend), settings)
    for spec in config.models or [embedded_spec()]:
        model = registry.load(spec)
        _log.info(
            "model_loaded", model=model.name, source=model.source, fingerprint=model.fingerprint,
            encoder=model.tokenizer.encoder, backend=model.backend, vocab_size=model.tokenizer.vocab_size,
        )
    metrics.MODELS.set(len(registry))
    return registry


def warm_encoders(registry: ModelRegistry) -> None:
    """Encodes a word with every model on this thread (the event loop's, before it serves): the fast
    encoder gives each thread a 16 MiB cache per model on its first encode, and filling fresh pages
    cost that first request 40-70 ms on the loop (measured on Qwen3 on this VM)."""
    for model in registry:
        model.tokenizer.encode_batch(["warm up"], EncodeOptions())


def unary_handler(rpc: str, handler, request_cls, gate: Gate) -> grpc.RpcMethodHandler:  # noqa: ANN001
    """A unary method wrapped by `sidecar.rpc.unary` (request id, logs, metrics, status mapping); the
    wrapper decodes the body and encodes the response, so gRPC passes bytes."""
    return grpc.unary_unary_rpc_method_handler(unary(rpc, handler, request_cls, gate))


def preprocessor_handler(runtime: Runtime, gate: Gate) -> grpc.GenericRpcHandler:
    """The `sidecar.v1.Preprocessor` service, one servicer object per RPC."""
    native = NativeTable(runtime)
    native.get()  # built now, not by the first call (None on a backend other than native)
    tokenize = TokenizeServicer(runtime, native)
    detokenize = DetokenizeServicer(runtime, native)
    render = RenderServicer(runtime, native)
    models = ModelsServicer(runtime)
    parse = ParseStreamServicer(runtime, gate)
    parsers = ParsersServicer(runtime)
    multiplex = MultiplexServicer(runtime, gate, native)
    # Raw bytes both ways: the native core reads the request and writes the response (traced or
    # not: the Python decode and encode of a 40 MB call would hold the event loop for half a second).
    tokenize_handler = grpc.unary_unary_rpc_method_handler(raw_unary("Tokenize", tokenize.TokenizeRaw, gate))
    detokenize_handler = grpc.unary_unary_rpc_method_handler(raw_unary("Detokenize", detokenize.DetokenizeRaw, gate))
    render_handler = grpc.unary_unary_rpc_method_handler(raw_unary("Render", render.RenderRaw, gate))

    return grpc.method_handlers_generic_handler(
        SERVICE_NAME,
        {
            "Tokenize": tokenize_handler,
            "Detokenize": detokenize_handler,
            "Render": render_handler,
            "ListModels": unary_handler("ListModels", models.ListModels, pb.ListModelsRequest, gate),
            "ListParsers": unary_handler("ListParsers", parsers.ListParsers, pb.ListParsersRequest, gate),
            # Raw bytes both ways: the parse multiplexer reads and writes the wire format itself.
            "ParseStream": grpc.stream_stream_rpc_method_handler(stream("ParseStream", parse.ParseStream, gate)),
            "Multiplex": grpc.stream_stream_rpc_method_handler(stream("Multiplex", multiplex.Multiplex, gate)),
        },
    )


def admin_handler(reloader: Reloader, gate: Gate, in_group: bool = False) -> grpc.GenericRpcHandler:
    """The `sidecar.v1.Admin` service (`--enable-admin`). In a process of `--processes N`, a reload
    also asks the parent for a SIGHUP to every process, so that none keeps serving the old files."""
    servicer = AdminServicer(reloader, (lambda: os.kill(os.getppid(), signal.SIGHUP)) if in_group else None)
    return grpc.method_handlers_generic_handler(
        ADMIN_SERVICE_NAME,
        {"ReloadModels": unary_handler("ReloadModels", servicer.ReloadModels, admin_pb.ReloadModelsRequest, gate)},
    )


def build_kv_router(config: ServerConfig, hasher: BlockHasher, index_factory: IndexFactory) -> KvRouter | None:
    """The router adapter for `--kv-events` sources and `--kv-nats`, or None without either."""
    if config.kv is None or not (config.kv.sources or config.kv.nats):
        return None
    kv_config = config.kv
    names = [source.model for source in kv_config.sources] + list(kv_config.nats_models if kv_config.nats else ())
    models = {
        name: ModelOptions(block_size=kv_config.block_size, engine_spec=kv_config.engine_specs.get(name),
                           group_idx=kv_config.groups.get(name, 0), lookahead=kv_config.lookahead_of(name))
        for name in names
    }
    router = KvRouter(
        kv_config.sources, block_size=kv_config.block_size, models=models, max_blocks=kv_config.max_blocks,
        silence_timeout_s=kv_config.silence_timeout_s or None, hasher=hasher, index_factory=index_factory,
        replay_history=kv_config.replay_history, max_message_bytes=kv_config.max_message_bytes,
    )
    if kv_config.nats is not None:
        from router_adapter.nats_feed import NatsFeed

        router.attach_feed(NatsFeed(router, kv_config.nats))
    return router


def kv_router_handler(runtime: Runtime, router, gate: Gate) -> grpc.GenericRpcHandler:  # noqa: ANN001
    """The `sidecar.v1.KvRouter` service (FAILED_PRECONDITION everywhere without KV-event sources)."""
    servicer = KvRouterServicer(runtime, router)
    # Raw bytes in, traced or not: a request's token ids are read natively (see `ScoreRaw`).
    score_handler = grpc.unary_unary_rpc_method_handler(raw_unary("Score", servicer.ScoreRaw, gate))

    return grpc.method_handlers_generic_handler(
        KV_SERVICE_NAME,
        {
            "Score": score_handler,
            "KvStatus": unary_handler("KvStatus", servicer.KvStatus, kv.KvStatusRequest, gate),
        },
    )


#: At most how long a stopping server waits for the calls gRPC cancelled to end (a few loop turns).
SETTLE_SECONDS = 1.0
#: How often a group health Watch looks at the siblings' states.
GROUP_WATCH_SECONDS = 0.25


class GroupHealthServicer(health.aio.HealthServicer):
    """Health of one of `--processes N` servers, answered for the group: SERVING only while every
    process is (see sidecar.group), so a probe of any one sees a sibling that is down or draining;
    `PROCESS_HEALTH_NAME` alone answers for this process."""

    def __init__(self, group: GroupState) -> None:
        super().__init__()
        self._group = group
        #: Set (and replaced) at every change a watcher may need to see: this process's statuses,
        #: or the group's. One poller per process reads the siblings' states for every watcher
        #: (a poll per stream cost 58% of a core with 16,000 streams). Made on the loop.
        self._changed: asyncio.Event | None = None

    async def Check(self, request: health_pb2.HealthCheckRequest, context) -> health_pb2.HealthCheckResponse:  # noqa: ANN001
        response = await super().Check(request, context)
        return health_pb2.HealthCheckResponse(status=self._for_group(request.service, response.status))

    async def Watch(self, request: health_pb2.HealthCheckRequest, context) -> None:  # noqa: ANN001
        """The group's status as it changes (gRPC's client-side health checking watches; the base
        class answered this process's alone, SERVING while a sibling was down)."""
        if self._changed is None:
            self._changed = asyncio.Event()
            asyncio.get_running_loop().create_task(self._poll_group())
        last = None
        while True:
            changed = self._changed  # taken before reading: a change meanwhile has set it
            status = self._for_group(request.service, self._server_status.get(
                request.service, health_pb2.HealthCheckResponse.SERVICE_UNKNOWN))
            if status != last:
                await context.write(health_pb2.HealthCheckResponse(status=status))
                last = status
            await changed.wait()

    async def _set(self, service: str, status: int) -> None:
        await super()._set(service, status)
        self._announce()

    def _announce(self) -> None:
        if self._changed is not None:
            changed, self._changed = self._changed, asyncio.Event()
            changed.set()

    async def _poll_group(self) -> None:
        serving = self._group.all_serving()
        while True:
            await asyncio.sleep(GROUP_WATCH_SECONDS)
            now = self._group.all_serving()
            if now != serving:
                serving = now
                self._announce()

    def _for_group(self, service: str, status: int) -> int:
        """This process's `status` for `service`, NOT_SERVING while a sibling is not serving."""
        if service != PROCESS_HEALTH_NAME and status == health_pb2.HealthCheckResponse.SERVING \
                and not self._group.all_serving():
            return health_pb2.HealthCheckResponse.NOT_SERVING
        return status


@dataclass
class RunningServer:
    """A started server, what it listens on, and how it stops."""

    server: grpc.aio.Server
    health: health.aio.HealthServicer
    runtime: Runtime
    addresses: list[str]
    #: (host, port) of /metrics, or None without it.
    metrics_address: tuple[str, int] | None
    gate: Gate
    reloader: Reloader
    unix_socket: UnixSocket | None = None
    kv_router: KvRouter | None = None
    #: With `--processes N`: the shared slots and this process's index in them.
    group: GroupState | None = None
    process_index: int | None = None

    def announce_state(self, state: int) -> None:
        """Writes this process's state (and /metrics port) into its group slot, if it has one."""
        if self.group is not None and self.process_index is not None:
            self.group.set_metrics_port(self.process_index, self.metrics_port or 0)
            self.group.set_state(self.process_index, state)

    async def heartbeat(self) -> None:
        """Raises this process's heartbeat count in its group slot every `HEARTBEAT_SECONDS` for as
        long as the event loop turns: the parent kills a serving process whose count stops (a hung
        or stopped loop answers nothing, while its slot still says SERVING; sidecar.processes)."""
        if self.group is None or self.process_index is None:
            return
        beats = 0
        while True:
            beats += 1
            self.group.set_heartbeats(self.process_index, beats)
            await asyncio.sleep(HEARTBEAT_SECONDS)

    @property
    def metrics_port(self) -> int | None:
        return self.metrics_address[1] if self.metrics_address else None

    async def drain(self, grace: float, notice: float = 0.0, hurry: Callable[[], bool] = lambda: False) -> int:
        """Health turns NOT_SERVING and new calls are refused (UNAVAILABLE) while health keeps
        answering; calls in flight get up to `grace` seconds to finish (health stays up at least
        `notice` seconds, so clients polling it see the drain; `hurry()` true cuts it short), then the
        listeners close and what is left is cancelled. Returns the calls cancelled."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        self.gate.close()
        self.announce_state(DRAINING)
        await self.health.enter_graceful_shutdown()
        notice = min(notice, grace)
        cut = CUT_AT_DRAIN_END
        while True:
            if hurry():
                cut = CUT_BY_SECOND_SIGNAL  # what is cut off is told so, not "the end of --drain-seconds"
                break
            elapsed = loop.time() - started
            if elapsed >= grace or (self.gate.inflight == 0 and elapsed >= notice):
                break
            await asyncio.sleep(0.02)
        cancelled = self.gate.inflight
        await self.close(cut)
        return cancelled

    async def close(self, cut: tuple[grpc.StatusCode, str] = CUT_BY_STOP) -> None:
        """Stops everything the server started and removes its socket file; idempotent. Native calls
        still running on worker threads are abandoned (they cannot be interrupted from here). `cut`:
        how the calls still running are recorded (why the server stops)."""
        self.gate.stop(cut)  # what gRPC cancels now is logged and counted as cut off
        await self.server.stop(0)
        await self._let_cancelled_calls_end()
        self.runtime.offloader.shutdown()
        if self.kv_router is not None:
            self.kv_router.stop()
            self.kv_router = None
        if self.unix_socket is not None:
            self.unix_socket.remove()
        tracing.shutdown()

    async def _let_cancelled_calls_end(self) -> None:
        """Gives the calls gRPC just cancelled the few loop turns their tasks take to end (boundedly):
        one still pending when `asyncio.run` returns is cancelled there, and gRPC prints a bare
        CancelledError traceback for it."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_SECONDS
        while self.gate.inflight and loop.time() < deadline:
            await asyncio.sleep(0.001)
        await asyncio.sleep(0)  # gRPC's task around the call ends one turn after the call's own


async def start(config: ServerConfig, registry: ModelRegistry | None = None) -> RunningServer:
    """Loads models (unless given) and starts listening. A failure after a listener was bound stops
    the server and removes the socket file before it propagates."""
    if config.otlp_endpoint and not tracing.enabled():
        tracing.configure(config.otlp_endpoint)  # before the wrappers are built: they capture it
    fix_malloc_mmap_threshold()
    registry = registry or load_registry(config)
    warm_encoders(registry)
    hasher = get_hasher(config.backend)
    offloader = Offloader.for_config(config, release_memory=getattr(registry.backend, "release_memory", None))
    runtime = Runtime(config, registry, offloader, hasher)
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", config.max_message_bytes),
            ("grpc.max_send_message_length", config.max_message_bytes),
            ("grpc.so_reuseport", 1 if config.reuse_port else 0),
            # Both of gRPC's bounds on calls not taken yet (the soft one applies to calls waiting
            # longer than 30 s): one flag, so a burst waits its turn instead of being refused.
            ("grpc.server.max_pending_requests", config.max_pending_calls),
            ("grpc.server.max_pending_requests_hard_limit", config.max_pending_calls),
            ("grpc.max_allowed_incoming_connections", config.listener_connection_limit()),
            ("grpc.max_connection_idle_ms", int(config.max_connection_idle_s * 1000)),
        ]
    )
    gate = Gate(config.max_unsent_bytes, config.max_message_bytes)
    reloader = Reloader(registry)
    kv_router = build_kv_router(config, hasher, get_index_factory(config.backend))
    handlers = [preprocessor_handler(runtime, gate), kv_router_handler(runtime, kv_router, gate)]
    if config.enable_admin:
        handlers.append(admin_handler(reloader, gate, in_group=config.group_state is not None))
    server.add_generic_rpc_handlers(handlers)
    group = GroupState.open(config.group_state) if config.group_state else None
    health_servicer = GroupHealthServicer(group) if group is not None else health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    services = [SERVICE_NAME, KV_SERVICE_NAME, *([ADMIN_SERVICE_NAME] if config.enable_admin else [])]
    for name in ["", PROCESS_HEALTH_NAME, *services, *(m.name for m in registry)]:
        await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    if config.reflection:
        from grpc_reflection.v1alpha import reflection

        reflection.enable_server_reflection((*services, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    running = RunningServer(server, health_servicer, runtime, [], None, gate, reloader, kv_router=kv_router,
                            group=group, process_index=config.process_index)
    try:
        await _listen(running, config)
    except BaseException:
        await running.close()
        raise
    return running


async def _listen(running: RunningServer, config: ServerConfig) -> None:
    """Binds the listeners, starts serving, the KV-event subscribers and /metrics."""
    if config.port is not None:
        running.addresses.append(bind_tcp(running.server, config))
    if config.uds:
        running.unix_socket = UnixSocket(config.uds, config.uds_mode)
        running.addresses.append(running.unix_socket.bind(running.server))
    if not running.addresses:
        raise ValueError("no listener: give --port and/or --uds")
    await running.server.start()
    kv_router = running.kv_router
    if kv_router is not None:
        kv_router.start()
        register_metrics(kv_router)
        _log.info("kv_events_subscribed", sources=[s.worker + "=" + s.endpoint for s in kv_router.subscriber.sources],
                  models=sorted(kv_router.indexes), nats=config.kv.nats.nats_url if config.kv.nats else None)
    if config.metrics_port is not None:
        try:
            running.metrics_address = metrics.serve_http(config.metrics_port, config.metrics_host)
        except OSError as e:
            raise FailedPrecondition(
                f"--metrics-host/--metrics-port {config.metrics_host}:{config.metrics_port}: {e.strerror}"
            ) from None


class _Signals:
    """SIGTERM and SIGINT ask for a drain (a second one cuts it short); SIGHUP asks for a reload.
    Installed before anything is loaded or bound, so no signal finds the default action (which
    would kill the process and leave the socket file behind)."""

    def __init__(self) -> None:
        self.stop = asyncio.Event()
        self.stops = 0
        self.hangups: asyncio.Queue[None] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_stop)
        loop.add_signal_handler(signal.SIGHUP, self.hangups.put_nowait, None)

    def _on_stop(self) -> None:
        self.stops += 1
        self.stop.set()

    def remove(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(sig)


async def _reload_on_hangups(running: RunningServer, signals: _Signals) -> None:
    """Reloads changed model directories on every SIGHUP (one at a time); results go to the log."""
    while True:
        await signals.hangups.get()
        _log.info("reload_requested", signal="SIGHUP")
        try:
            results = await running.reloader.reload()
        except Exception:  # noqa: BLE001 - a reload must never end the server
            _log.exception("reload_crashed")
            continue
        _log.info("reload_done", **{r.model: r.outcome for r in results})


async def serve(config: ServerConfig) -> None:
    """Runs until SIGTERM/SIGINT, then drains for at most `drain_seconds`; SIGHUP reloads models.
    The socket file is removed on every way out (a failed start, an exception, a signal)."""
    signals = _Signals()
    running: RunningServer | None = None
    try:
        running = await start(config)
        # Modules, descriptors and loaded models live as long as the process; moving them out of the
        # collector's generations keeps each full collection under traffic from rescanning them.
        gc.collect()
        gc.freeze()
        # The slot says SERVING before the log says `listening`, so whoever reads the log (an
        # operator, a test that then stops the process) finds the parent already watching it.
        running.announce_state(SERVING)
        _announce(running, config)
        reloads = asyncio.create_task(_reload_on_hangups(running, signals))
        heartbeat = asyncio.create_task(running.heartbeat())
        await signals.stop.wait()
        reloads.cancel()
        _log.info("draining", grace_seconds=config.drain_seconds, inflight=running.gate.inflight)
        cancelled = await running.drain(config.drain_seconds, config.drain_notice_seconds, lambda: signals.stops > 1)
        heartbeat.cancel()
        _log.info("stopped", cancelled=cancelled)
    finally:
        signals.remove()
        if running is not None:
            await running.close()


def _announce(running: RunningServer, config: ServerConfig) -> None:
    models = [m.name for m in running.runtime.registry]
    metrics_address = f"{running.metrics_address[0]}:{running.metrics_address[1]}" if running.metrics_address else None
    # One of `--processes N`: its own endpoint is a private one the parent adds up, and the port
    # to scrape is the parent's (`metrics_listening`); named apart so nobody scrapes one process.
    prefix = "process_" if config.group_state is not None else ""
    _log.info(
        "listening", addresses=running.addresses, **{f"{prefix}metrics_port": running.metrics_port,
                                                     f"{prefix}metrics_address": metrics_address},
        backend=config.backend, hasher=running.runtime.hasher.name, models=models, tls=config.tls_cert is not None,
        mutual_tls=config.tls_client_ca is not None, admin=config.enable_admin, tracing=tracing.enabled(),
    )
    metrics_note = f", metrics on {metrics_address}/metrics" if metrics_address and not prefix else ""
    print(f"sidecar: serving {', '.join(models)} on {', '.join(running.addresses)}{metrics_note}", file=sys.stderr,
          flush=True)


def exit_unless_threads_finish(code: int, wait_s: float = 0.2) -> int:
    """Returns `code` when only daemon threads are left; otherwise flushes and ends the process now.

    A native call cannot be interrupted from Python, and the interpreter joins the native pool's
    worker threads at exit: a 40 MB Tokenize still running after the drain would keep the process
    alive for its whole duration. The drain already gave calls their time; what is left is abandoned.
    """
    deadline = time.monotonic() + wait_s
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
    held = [t.name for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon and t.is_alive()]
    if not held:
        return code
    _log.info("exit_abandoning_threads", threads=held)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
