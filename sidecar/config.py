"""Server settings, from command-line flags (see `sidecar serve --help`)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from router_adapter import HashSpec, Source
from router_adapter.spec import MAX_LOOKAHEAD
from router_adapter.nats_feed import FeedOptions
from router_adapter.subscriber import DEFAULT_MAX_MESSAGE_BYTES
from sidecar.flags import MAX_PORT
from sidecar.registry import ModelSpec

#: The largest `--kv-max-blocks` (well inside the native index's u64 count).
MAX_KV_BLOCKS = 1 << 62


@dataclass(frozen=True)
class KvConfig:
    """The router adapter: KV-event sources and how their indexes key blocks (`--kv-*` flags).
    Checked once here, where the flags enter: a bad value raises ValueError (an `InvalidSpec` for a
    hash spec) naming it, before anything is started."""

    #: `--kv-events WORKER=ENDPOINT[,replay=ENDPOINT][,model=NAME][,topic=T]`, parsed.
    sources: tuple[Source, ...] = ()
    #: Tokens per block; None = learned from the first event of each model.
    block_size: int | None = None
    #: Model name -> engine HashSpec (`--kv-engine-hash`): that model's index matches engine hashes.
    engine_specs: dict[str, HashSpec] = field(default_factory=dict)
    #: Model name -> the engine's KV-cache group whose blocks its index keeps (`--kv-group`; 0 when absent).
    groups: dict[str, int] = field(default_factory=dict)
    #: `--kv-lookahead N`: content mode's lookahead for every content-mode model without its own
    #: (vLLM >= 0.33 with an EAGLE/EAGLE3/MTP drafter); None = each index learns it from its first store.
    lookahead: int | None = None
    #: `--kv-lookahead MODEL=N`: one model's (content mode only: `--kv-engine-hash` takes lookahead=).
    lookaheads: dict[str, int] = field(default_factory=dict)
    #: Bound on indexed blocks per model (all workers and media); 0 keeps none (every store is
    #: evicted as it is applied, in both index kinds: every score is 0).
    max_blocks: int = 4_000_000
    #: Seconds without a message after which a worker's state is dropped; 0 = never.
    silence_timeout_s: float = 300.0
    #: `--kv-nats`: read the events of `nats_models` from NATS JetStream (router_adapter.nats_feed).
    nats: FeedOptions | None = None
    nats_models: tuple[str, ...] = ()
    #: A restarted process of `--processes N`: replay each source's history (see router_adapter.router).
    replay_history: bool = False
    #: The largest message taken from an engine's sockets (`--kv-max-message-size`).
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", tuple(self.sources))
        if self.block_size is not None and self.block_size <= 0:
            raise ValueError("--kv-block-size: must be > 0")
        if self.max_message_bytes <= 0:
            raise ValueError("--kv-max-message-size: must be > 0")
        # Checked here, before the models load; the index refused it only once it was made, in words
        # naming no flag (`max_blocks must be >= 0`). The native index keeps the bound as a u64.
        if type(self.max_blocks) is not int or not 0 <= self.max_blocks <= MAX_KV_BLOCKS:
            raise ValueError(f"--kv-max-blocks {self.max_blocks}: must be in [0, 2^62] (0: keep no blocks)")
        for spec in self.engine_specs.values():
            spec.validate()
        for name, group in self.groups.items():
            if not 0 <= group < 1 << 31:
                raise ValueError(f"--kv-group {name}={group}: N must be in [0, 2^31)")
        for name, value in [(None, self.lookahead), *self.lookaheads.items()]:
            shown = value if name is None else f"{name}={value}"
            if value is not None and not 0 <= value <= MAX_LOOKAHEAD:
                raise ValueError(f"--kv-lookahead {shown}: N must be in [0, {MAX_LOOKAHEAD}]")
            if name in self.engine_specs:
                # Engine mode hashes requests with the spec's own lookahead: two sources of one value.
                raise ValueError(f"--kv-lookahead {shown}: {name} is in engine mode (--kv-engine-hash); give "
                                 "lookahead= there")

    def lookahead_of(self, model: str) -> int | None:
        """The lookahead `model`'s index is configured with (None: learned, or engine mode)."""
        if model in self.lookaheads:
            return self.lookaheads[model]
        return None if model in self.engine_specs else self.lookahead


@dataclass(frozen=True)
class ServerConfig:
    """Everything `sidecar serve` can be told."""

    models: list[ModelSpec] = field(default_factory=list)
    backend: str = "native"
    host: str = "127.0.0.1"
    #: TCP port; 0 picks a free one (logged at startup), None disables TCP.
    port: int | None = 50051
    #: Unix socket path; None disables it.
    uds: str | None = None
    #: Permission bits of the Unix socket, set before anyone can connect (whatever the umask).
    uds_mode: int = 0o600
    #: Prometheus /metrics port; 0 picks a free one, None disables it.
    metrics_port: int | None = None
    #: Address /metrics listens on (loopback: metrics name models and traffic).
    metrics_host: str = "127.0.0.1"
    #: TLS on the TCP listener: PEM certificate chain and private key files (both or neither).
    tls_cert: str | None = None
    tls_key: str | None = None
    #: PEM CA bundle: TCP clients must present a certificate it signed (mutual TLS).
    tls_client_ca: str | None = None
    #: Serve the `sidecar.v1.Admin` service (ReloadModels).
    enable_admin: bool = False
    #: OTLP/gRPC collector for trace spans (`http://host:4317`); None = no tracing.
    otlp_endpoint: str | None = None
    reflection: bool = False
    allow_request_templates: bool = False
    #: Multi-turn Render cache budget per model, in MiB; 0 disables it.
    render_cache_mb: int = 64
    #: minijinja fuel per render (roughly instructions); a template that needs more fails.
    template_fuel: int = 50_000_000
    max_message_bytes: int = 64 * 1024 * 1024
    #: Native worker threads; defaults to the CPU count.
    workers: int = field(default_factory=lambda: os.cpu_count() or 2)
    #: Large calls allowed to wait for a worker before new ones get RESOURCE_EXHAUSTED.
    max_queue: int = 256
    #: Calls gRPC holds for the server before its event loop takes them (a burst: thousands of calls
    #: arrive within a millisecond, and the loop takes one at a time). Past it, gRPC itself refuses
    #: new calls, with CANCELLED: its own default, 3,000, failed a router's burst of 6,000 small calls
    #: on one connection by almost half.
    max_pending_calls: int = 16384
    #: Connections the server keeps open at once (gRPC closes any past it): below the open-file
    #: limit, so that idle connections cannot use every descriptor (19,985 of them took the health
    #: check and /metrics down with the calls). 0: half the process's open-file limit.
    max_connections: int = 0
    #: Seconds a connection with no call in flight stays open (gRPC then closes it; clients
    #: reconnect): what a connection that never calls holds a slot for.
    max_connection_idle_s: float = 300.0
    #: Bytes of unary responses that may wait for one connection's client to read them before its
    #: new unary calls are refused (RESOURCE_EXHAUSTED; everyone's past 4 times it in all): a
    #: client that never reads keeps them in memory (see `sidecar.rpc.Gate`).
    max_unsent_bytes: int = 512 << 20
    #: Calls with less input than this run inline on the event loop (a thread hop costs more).
    inline_bytes: int = 16 * 1024
    #: Bind TCP with SO_REUSEPORT (one of `--processes N` servers sharing the port); otherwise a
    #: port already in use is an error.
    reuse_port: bool = False
    #: One of `--processes N` servers: its index and the file the processes share (sidecar.group).
    process_index: int | None = None
    group_state: str | None = None
    #: The CPUs native workers run on when the event loop is pinned (`--pin-loop-cpu`); empty: inherited.
    worker_cpus: frozenset[int] = frozenset()
    #: Multiplex: requests one stream may have waiting for their results.
    multiplex_max_inflight: int = 4096
    #: Calls with more input than this run in the huge lane (at most half the workers).
    huge_bytes: int = 1 << 20
    #: Characters in one text (`--max-text-chars`).
    max_text_chars: int = 64 << 20
    #: Longest run of one character class in a text or prompt (`--max-word-chars`).
    max_word_chars: int = 100_000
    #: Token ids in one request (`--max-token-ids`).
    max_token_ids: int = 16 << 20
    #: ParseStream: stop strings per request and their total UTF-8 bytes (`--max-stop-*`).
    max_stop_strings: int = 1024
    max_stop_bytes: int = 256 * 1024
    #: chat_template_kwargs_json bytes per request (`--max-kwargs-bytes`).
    max_kwargs_bytes: int = 1 << 20
    #: ParseStream: open requests per stream.
    parse_max_requests: int = 4096
    #: ParseStream: bytes of undecided output one request may hold back.
    parse_max_held_bytes: int = 1 << 20
    #: ParseStream: bytes of undecided output all the requests of one stream may hold back together.
    parse_max_stream_held_bytes: int = 256 << 20
    #: Seconds in-flight RPCs get to finish after SIGTERM; the process exits by then.
    drain_seconds: float = 10.0
    #: Health answers NOT_SERVING for at least this long after SIGTERM, even with nothing in flight,
    #: so that clients polling it see the drain (capped by `drain_seconds`).
    drain_notice_seconds: float = 1.0
    log_level: str = "info"
    #: The router adapter (KV events and Score); None = not started.
    kv: KvConfig | None = None

    def connection_limit(self) -> int:
        """`--max-connections`, or half the open-file limit when it is 0: in all, across the TCP
        and Unix listeners."""
        if self.max_connections:
            return self.max_connections
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        return max(64, min(soft if soft != resource.RLIM_INFINITY else 1 << 20, 1 << 20) // 2)

    def listener_connection_limit(self) -> int:
        """What each listener may hold: gRPC counts connections per listener, so the limit is
        shared out (with a TCP port and a Unix socket each held half the open-file limit, and
        both together took every descriptor)."""
        listeners = (self.port is not None) + (self.uds is not None)
        return max(1, self.connection_limit() // max(1, listeners))

    def __post_init__(self) -> None:
        # The command line refuses these already (sidecar.flags); a config built in code is checked
        # here too: gRPC bound a port past 65535 modulo 65536, and /metrics failed with OverflowError.
        for flag, port in (("--port", self.port), ("--metrics-port", self.metrics_port)):
            if port is not None and not 0 <= port <= MAX_PORT:
                raise ValueError(f"{flag} {port}: must be a port in [0, {MAX_PORT}] (0: any free port)")
        if not 0 <= self.uds_mode <= 0o777:
            raise ValueError(f"--uds-mode {self.uds_mode:o}: expected permission bits such as 600 or 660")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("--tls-cert and --tls-key: give both or neither")
        if self.tls_client_ca is not None and self.tls_cert is None:
            raise ValueError("--tls-client-ca: needs --tls-cert and --tls-key (mutual TLS is TLS first)")
        if self.tls_cert is not None and self.port is None:
            raise ValueError("--tls-cert: TLS is for the TCP listener, which --port -1 disables")
        # Every count and size limit is refused here, at startup, naming its flag: a bad one
        # otherwise surfaces as an odd error on every call that meets it.
        positive = {
            "--workers": self.workers, "--max-queue": self.max_queue, "--max-pending-calls": self.max_pending_calls,
            "--multiplex-max-inflight":
            self.multiplex_max_inflight, "--parse-max-requests": self.parse_max_requests,
            "--parse-max-held-kb": self.parse_max_held_bytes,
            "--parse-max-stream-held-mb": self.parse_max_stream_held_bytes, "--max-message-mb": self.max_message_bytes,
            "--max-unsent-mb": self.max_unsent_bytes, "--template-fuel": self.template_fuel, "--max-text-chars": self.max_text_chars,
            "--max-word-chars": self.max_word_chars, "--max-token-ids": self.max_token_ids,
            "--huge-kb": self.huge_bytes,
        }
        for flag, value in positive.items():
            if value <= 0:
                raise ValueError(f"{flag}: must be > 0")
        # gRPC takes both as 32-bit ints (the idle time in milliseconds): a larger value aborted the
        # start with a traceback, and one under a millisecond closed every connection at once.
        if not 0 <= self.max_connections < 1 << 31:
            raise ValueError("--max-connections: must be in [0, 2^31) (0: half the open-file limit)")
        if not 0.001 <= self.max_connection_idle_s < (1 << 31) / 1000:
            raise ValueError("--max-connection-idle-s: must be in [0.001, 2147483)")
        if self.max_message_bytes >= 1 << 31:
            raise ValueError("--max-message-mb: at most 2047 (gRPC's message sizes are 32-bit)")
        # 0 is a choice here: no stop strings, no template kwargs, no render cache.
        at_least_zero = {
            "--max-stop-strings": self.max_stop_strings, "--max-stop-bytes": self.max_stop_bytes,
            "--max-kwargs-bytes": self.max_kwargs_bytes, "--render-cache-mb": self.render_cache_mb,
        }
        for flag, value in at_least_zero.items():
            if value < 0:
                raise ValueError(f"{flag}: must be >= 0")
        # The native core reads limits as 64-bit sizes: a larger one started the server and then
        # failed every call that met it, naming no flag.
        for flag, value in {**positive, **at_least_zero}.items():
            if value >= 1 << 62:
                raise ValueError(f"{flag}: too large (at most 2^62 once in bytes or items)")
        if self.drain_seconds < 0 or self.drain_notice_seconds < 0:
            raise ValueError("--drain-seconds, --drain-notice-seconds: must be >= 0")
