"""The command line of KV-event fan-out over NATS JetStream: `sidecar kv-relay` (one per engine) and
the `--kv-nats*` flags of `sidecar serve` (docs/kv_fanout.md). The work is in `router_adapter.relay`
and `router_adapter.nats_feed`; this module turns flags into their options."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from router_adapter import fanout
from router_adapter.subscriber import DEFAULT_MAX_MESSAGE_BYTES
from sidecar.flags import DefaultsHelpFormatter, DefaultsRawDescriptionHelpFormatter, port, positive_int, seconds


def _common(parser: argparse.ArgumentParser, prefix: str) -> None:
    parser.add_argument(f"--{prefix}prefix", default=fanout.DEFAULT_PREFIX, metavar="SUBJECT",
                        help=f"subjects are SUBJECT.<model>.<worker> (default {fanout.DEFAULT_PREFIX})")
    parser.add_argument(f"--{prefix}stream", default=fanout.DEFAULT_STREAM, metavar="NAME",
                        help=f"the JetStream stream holding them (default {fanout.DEFAULT_STREAM}; created when missing)")
    parser.add_argument(f"--{prefix}retention", type=seconds, default=fanout.DEFAULT_RETENTION_S, metavar="SECONDS",
                        help="max age of the stream's messages when this process creates it (default "
                             f"{fanout.DEFAULT_RETENTION_S:g}); keep it well above the snapshot period")


SERVE_EPILOG = """KV routing at fleet scale (docs/kv_fanout.md):
  beside each engine:  sidecar kv-relay --nats nats://nats:4222 \\
                         --kv-events w0=tcp://127.0.0.1:5557,replay=tcp://127.0.0.1:5558,model=qwen3
  each replica:        sidecar serve --model qwen3=/models/Qwen3-8B --kv-nats nats://nats:4222
One replica can instead subscribe to every engine itself: --kv-events (repeatable)."""


def add_serve_flags(serve: argparse.ArgumentParser) -> None:
    serve.epilog = SERVE_EPILOG
    serve.formatter_class = DefaultsRawDescriptionHelpFormatter
    serve.add_argument("--kv-nats", default=None, metavar="nats://HOST:PORT",
                       help="read KV events from NATS JetStream (published by `sidecar kv-relay` beside each engine) "
                            "instead of subscribing to every engine: any number of replicas share one view, and a "
                            "starting replica catches up from the newest snapshot plus the stream")
    serve.add_argument("--kv-nats-model", action="append", default=[], metavar="NAME",
                       help="a model whose subjects to read (repeatable; default: the hosted models' names)")
    _common(serve, "kv-nats-")
    serve.add_argument("--kv-nats-snapshot-bucket", default=fanout.DEFAULT_SNAPSHOT_BUCKET, metavar="NAME",
                       help=f"JetStream object store of the index snapshots (default {fanout.DEFAULT_SNAPSHOT_BUCKET})")
    serve.add_argument("--kv-nats-snapshot-period", type=seconds, default=fanout.DEFAULT_SNAPSHOT_PERIOD_S,
                       metavar="SECONDS", help="how often a snapshot of each model's index is published (the "
                       f"replicas share the work; default {fanout.DEFAULT_SNAPSHOT_PERIOD_S:g}; 0 = this replica never writes one)")


def require_nats_client(flag: str) -> None:
    """ValueError naming `flag` when the NATS client package is not installed."""
    import importlib.util

    if importlib.util.find_spec("nats") is None:
        raise ValueError(f"{flag}: needs the nats-py package (pip install 'sidecar[nats]')")


def feed_options_from_args(args: argparse.Namespace):  # noqa: ANN201 - FeedOptions | None
    if not args.kv_nats:
        return None
    require_nats_client("--kv-nats")
    from router_adapter.nats_feed import FeedOptions

    if args.kv_nats_retention < 0 or args.kv_nats_snapshot_period < 0:
        raise ValueError("--kv-nats-retention, --kv-nats-snapshot-period: must be >= 0")
    return FeedOptions(
        nats_url=args.kv_nats, prefix=args.kv_nats_prefix, stream=args.kv_nats_stream,
        snapshot_bucket=args.kv_nats_snapshot_bucket, retention_s=args.kv_nats_retention,
        snapshot_period_s=args.kv_nats_snapshot_period, silence_timeout_s=args.kv_silence_timeout or None,
    )


def models_from_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The models whose subjects `serve --kv-nats` reads: --kv-nats-model, else the hosted models."""
    if not args.kv_nats:
        return ()
    if args.kv_nats_model:
        return tuple(args.kv_nats_model)
    from sidecar.registry import ModelSpec

    return tuple(ModelSpec.parse(m).name for m in args.model) or ("qwen3",)


def add_relay_command(sub) -> None:  # noqa: ANN001 - argparse subparsers
    relay = sub.add_parser(
        "kv-relay", help="forward one engine's ZMQ KV events to NATS JetStream (run one beside each engine)",
        formatter_class=DefaultsHelpFormatter,
        description="Subscribes to one engine's ZMQ KV-event publisher (sequence checks, replay on gaps, "
                    "restart detection) and publishes each batch to JetStream on SUBJECT.<model>.<worker>, where "
                    "`sidecar serve --kv-nats` replicas read it. Restarting it is harmless: it resumes from the "
                    "last batch it published and JetStream drops what it publishes twice.",
    )
    relay.add_argument("--kv-events", required=True, metavar="WORKER=ENDPOINT[,replay=ENDPOINT],model=NAME[,topic=T]",
                       help="the engine's publisher, as for `sidecar serve --kv-events`; model= is required (the "
                            "replicas read the subjects of their models)")
    relay.add_argument("--nats", required=True, metavar="nats://HOST:PORT", help="the NATS server (JetStream enabled)")
    _common(relay, "")
    relay.add_argument("--silence-timeout", type=seconds, default=300.0,
                       help="seconds without events after which the worker is reset for every replica; 0 = never")
    relay.add_argument("--replay-timeout", type=seconds, default=2.0, help="seconds to wait for the replay socket")
    relay.add_argument("--max-message-size", type=positive_int, default=DEFAULT_MAX_MESSAGE_BYTES, metavar="BYTES",
                       help="the largest message taken from the engine, as `sidecar serve --kv-max-message-size` "
                            "(default 64 MiB); a larger one is lost as a gap (a gap reset for the replicas)")
    relay.add_argument("--metrics-port", type=port, default=None,
                       help="serve Prometheus /metrics (the relay's counters) on this port; 0 = any free port "
                            "(logged at startup)")
    relay.add_argument("--metrics-host", default="127.0.0.1",
                       help="address /metrics listens on (default 127.0.0.1; 0.0.0.0 for every interface)")
    relay.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info",
                       help="least severity of the log lines on stdout")
    relay.set_defaults(func=run_relay)


def run_relay(args: argparse.Namespace) -> int:
    from router_adapter.relay import Relay, RelayOptions
    from router_adapter.subscriber import Source
    from sidecar import logs

    try:
        require_nats_client("kv-relay")
        source = Source.parse(args.kv_events)
        if not source.model:
            # `serve --kv-events` reads the empty model as the one hosted model; a relay's subject
            # would be `<prefix>._.<worker>`, which no replica reads (they read their models' names).
            raise ValueError(f"--kv-events {args.kv_events!r}: kv-relay needs model=NAME (the model the replicas "
                             f"read, as `serve --kv-nats-model` or `--model` names it)")
    except ValueError as e:
        print(f"sidecar: {e}", file=sys.stderr)
        return 2
    logs.configure(args.log_level)  # the relay's own lines, from the router adapter, included
    relay = Relay(source, RelayOptions(
        nats_url=args.nats, prefix=args.prefix, stream=args.stream, retention_s=args.retention,
        silence_timeout_s=args.silence_timeout or None, replay_timeout_s=args.replay_timeout,
        max_message_bytes=args.max_message_size,
    ))

    if args.metrics_port is not None:
        try:
            host, bound = serve_relay_metrics(relay, args.metrics_host, args.metrics_port)
        except OSError as e:
            print(f"sidecar: --metrics-host/--metrics-port {args.metrics_host}:{args.metrics_port}: {e.strerror}",
                  file=sys.stderr)
            return 2
        logs.get_logger("sidecar.kv_relay").info("kv_relay_metrics", address=f"{host}:{bound}")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, relay.stop)
        await relay.run()

    try:
        asyncio.run(main())
    except ValueError as e:  # an endpoint ZMQ refused to connect to
        print(f"sidecar: {e}", file=sys.stderr)
        return 2
    return 0


def serve_relay_metrics(relay, host: str, port: int) -> tuple[str, int]:  # noqa: ANN001 - router_adapter.relay.Relay
    """Serves `relay`'s counters (`RelayStats`) on /metrics at `host`:`port`, from a registry of
    their own (the server's request metrics mean nothing here); returns the bound address."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import CounterMetricFamily

    from sidecar import metrics

    class RelayCollector:
        def collect(self):  # noqa: ANN202
            labels = [relay.source.model, relay.source.worker]
            stats = relay.stats
            for name, value, meaning in (
                ("published", stats.published, "Messages (batches and resets) stored in JetStream"),
                ("duplicates", stats.duplicates, "Publishes JetStream acknowledged as duplicates (same message id)"),
                ("resets", stats.resets, "Resets published (engine restart, gap the replay socket could not fill, "
                                         "silence, batch too large)"),
                ("retries", stats.retries, "Publish attempts retried (NATS unreachable, no acknowledgement)"),
                ("too_large", stats.too_large, "Batches over the server's max_payload or the stream's max_msg_size, "
                                               "each replaced by a gap reset"),
            ):
                family = CounterMetricFamily(f"sidecar_kv_relay_{name}", meaning, labels=["model", "worker"])
                family.add_metric(labels, value)
                yield family

    registry = CollectorRegistry()
    registry.register(RelayCollector())
    return metrics.serve_http(port, host, registry)
