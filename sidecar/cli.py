"""The `sidecar` command: `serve` runs the server; `tokenize`, `detokenize`, `render` and `models` are
a client for people at a terminal (human-readable by default, `--json` for scripts).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import traceback
from typing import NoReturn, Sequence

from router_adapter.subscriber import DEFAULT_MAX_MESSAGE_BYTES
from sidecar import kv_nats
from sidecar.flags import DefaultsHelpFormatter, port, port_or_off, positive_int, seconds, token_ids, uint32

DEFAULT_TARGET = os.environ.get("SIDECAR_TARGET", "127.0.0.1:50051")


def pin_loop_cpu(cpu: int | None, process_index: int) -> frozenset[int]:
    """Pins this thread (the event loop's, before gRPC starts its own threads, which inherit it) to
    one CPU; returns the CPUs the native workers go back to (empty when not pinning)."""
    if cpu is None:
        return frozenset()
    allowed = sorted(os.sched_getaffinity(0))
    if cpu < 0 or cpu not in allowed:
        raise ValueError(f"--pin-loop-cpu: CPU {cpu} is not one this process may run on ({allowed})")
    mine = allowed[(allowed.index(cpu) + process_index) % len(allowed)]
    os.sched_setaffinity(0, {mine})
    return frozenset(allowed)


def _serve(args: argparse.Namespace) -> int:
    from sidecar import logs
    from sidecar.config import ServerConfig
    from sidecar.errors import SidecarError
    from sidecar.registry import ModelSpec
    from sidecar.server import exit_unless_threads_finish, serve

    logs.configure(args.log_level)
    if args.processes > 1:
        return _supervise(args)
    if args.process_index is not None:
        logs.bind_process(args.process_index)
    if args.supervisor_pid is not None:
        from sidecar.processes import die_with_supervisor

        if not die_with_supervisor(args.supervisor_pid):
            return 1
    try:
        worker_cpus = pin_loop_cpu(args.pin_loop_cpu, args.process_index or 0)
        config = ServerConfig(
            models=[ModelSpec.parse(m) for m in args.model],
            backend=args.backend,
            host=args.host,
            port=None if args.port < 0 else args.port,
            uds=args.uds,
            uds_mode=args.uds_mode,
            metrics_port=args.metrics_port,
            metrics_host=args.metrics_host,
            tls_cert=args.tls_cert,
            tls_key=args.tls_key,
            tls_client_ca=args.tls_client_ca,
            enable_admin=args.enable_admin,
            otlp_endpoint=args.otlp_endpoint,
            reflection=args.reflection,
            allow_request_templates=args.allow_request_templates,
            render_cache_mb=args.render_cache_mb,
            template_fuel=args.template_fuel,
            max_message_bytes=args.max_message_mb * 1024 * 1024,
            workers=args.workers or (os.cpu_count() or 2),
            max_queue=args.max_queue,
            max_pending_calls=args.max_pending_calls,
            max_connections=args.max_connections, max_connection_idle_s=args.max_connection_idle_s,
            max_unsent_bytes=args.max_unsent_mb << 20,
            drain_seconds=args.drain_seconds,
            drain_notice_seconds=args.drain_notice_seconds,
            parse_max_requests=args.parse_max_requests,
            multiplex_max_inflight=args.multiplex_max_inflight,
            reuse_port=args.process_index is not None,
            worker_cpus=worker_cpus,
            process_index=args.process_index,
            group_state=args.group_state,
            parse_max_held_bytes=args.parse_max_held_kb * 1024,
            parse_max_stream_held_bytes=args.parse_max_stream_held_mb << 20,
            log_level=args.log_level,
            kv=kv_config_from_args(args),
            **limits_from_args(args),
        )
        asyncio.run(serve(config))
    except SidecarError as e:
        print(f"sidecar: {e.message}", file=sys.stderr)
        return exit_unless_threads_finish(2)
    except ValueError as e:
        print(f"sidecar: {e}", file=sys.stderr)
        return exit_unless_threads_finish(2)
    except BaseException:
        traceback.print_exc()
        return exit_unless_threads_finish(1)
    # Native calls the drain gave up on must not keep the process alive.
    return exit_unless_threads_finish(0)


def _supervise(args: argparse.Namespace) -> int:
    """`--processes N`: N servers on the same listeners (see sidecar.processes)."""
    from sidecar.processes import supervise

    if args.port < 0 and not args.uds:
        print("sidecar: --processes: needs a listener (--port >= 0 or --uds)", file=sys.stderr)
        return 2
    if args.port < 0:
        print("sidecar: --processes: with --port -1 each process listens only on its own Unix socket", file=sys.stderr)
    return supervise(args.serve_argv, args.processes, args.host, args.port, args.uds, args.metrics_port,
                     args.metrics_host, args.drain_seconds, args.liveness_timeout_s)


def _octal_mode(text: str) -> int:
    try:
        return int(text, 8)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected octal permission bits such as 600 or 660") from None


def limits_from_args(args: argparse.Namespace) -> dict:
    """The per-request limits and the huge-call lane of `serve` (`ServerConfig` fields)."""
    return {
        "max_text_chars": args.max_text_chars, "max_word_chars": args.max_word_chars,
        "max_token_ids": args.max_token_ids, "max_stop_strings": args.max_stop_strings,
        "max_stop_bytes": args.max_stop_bytes, "max_kwargs_bytes": args.max_kwargs_bytes,
        "huge_bytes": args.huge_kb * 1024,
    }


def _add_limit_flags(serve: argparse.ArgumentParser) -> None:
    limits = serve.add_argument_group(
        "per-request limits", "each is a RESOURCE_EXHAUSTED naming the flag (and the field, where one field "
        "exceeds it; --max-word-chars names where the run starts) when a request exceeds it")
    limits.add_argument("--max-text-chars", type=int, default=64 << 20,
                        help="characters in one text (Tokenize, Score text); default 64 Mi")
    limits.add_argument("--max-word-chars", type=int, default=100_000,
                        help="longest run of one character class (letters, digits, whitespace, symbols) in a text or "
                             "rendered prompt: the longest word the encoder takes in one uninterruptible piece, for "
                             "tokenizers that split text into words (a Metaspace tokenizer with split off, such as "
                             "Mistral v3's, takes the text between two cuts in one piece, and cuts fall only at spaces "
                             "between ASCII characters: --max-text-chars bounds a text without them); "
                             "default 100,000")
    limits.add_argument("--max-token-ids", type=int, default=16 << 20,
                        help="token ids in one request (Detokenize in all, ParseStream prompt ids and one request's ids "
                             "in one step, Score ids); "
                             "default 16 Mi")
    limits.add_argument("--max-stop-strings", type=int, default=1024,
                        help="ParseStream: stop strings of one request; default 1024")
    limits.add_argument("--max-stop-bytes", type=int, default=256 * 1024,
                        help="ParseStream: total UTF-8 bytes of one request's stop strings; default 256 KiB")
    limits.add_argument("--max-kwargs-bytes", type=int, default=1 << 20,
                        help="characters of chat_template_kwargs_json in one request (Render, Score, ParseStream; a "
                             "character is at most 4 bytes); default 1 Mi")
    limits.add_argument("--huge-kb", type=int, default=1024,
                        help="calls reading more than this run in their own lane of at most half the workers, so "
                             "huge requests never hold every worker; default 1024")


def kv_config_from_args(args: argparse.Namespace):  # noqa: ANN201 - sidecar.config.KvConfig | None
    """The router adapter settings of `serve`, or None without --kv-events and --kv-nats."""
    if not args.kv_events and not args.kv_nats:
        return None
    from router_adapter import Source
    from router_adapter.spec import HashSpec
    from sidecar.config import KvConfig

    sources = [Source.parse(text) for text in args.kv_events]
    engine_specs = {}
    for text in args.kv_engine_hash:
        name, sep, rest = text.partition("=")
        algorithm, *pairs = rest.split(",")
        fields: dict = {"algorithm": algorithm, "block_size": args.kv_block_size or 0}
        for pair in pairs:
            key, eq, value = pair.partition("=")
            if not eq or key not in ("block_size", "seed", "extra_keys", "sglang_event_format", "lookahead"):
                raise ValueError(f"--kv-engine-hash {text!r}: unknown option {pair!r}; known: block_size, seed, "
                                 "extra_keys, sglang_event_format, lookahead")
            if key in ("block_size", "lookahead"):
                try:
                    fields[key] = int(value)
                except ValueError:
                    raise ValueError(f"--kv-engine-hash {text!r}: {key} must be an integer, got {value!r}") from None
            else:
                fields[key] = value
        if not sep or not algorithm:
            raise ValueError(f"--kv-engine-hash {text!r}: expected MODEL=ALGORITHM[,block_size=N][,seed=S]"
                             "[,lookahead=N]")
        if fields["block_size"] <= 0:
            # A request's engine hashes are computed block by block: nothing to learn them from.
            raise ValueError(f"--kv-engine-hash {text!r}: needs block_size=N (or --kv-block-size N), the "
                             "engine's tokens per KV block")
        engine_specs[name] = HashSpec(**fields)
    groups = {}
    for text in args.kv_group:
        name, sep, value = text.partition("=")
        if not sep or not name or not value.strip().isdigit():
            raise ValueError(f"--kv-group {text!r}: expected MODEL=N (N >= 0)")
        groups[name] = int(value)
    lookahead, lookaheads = None, {}
    for text in args.kv_lookahead:
        name, sep, value = text.partition("=") if "=" in text else ("", "", text)
        if (sep and not name) or not (value.isascii() and value.isdigit()):
            raise ValueError(f"--kv-lookahead {text!r}: expected N or MODEL=N (N >= 0)")
        if sep:
            lookaheads[name] = int(value)
        else:
            lookahead = int(value)
    return KvConfig(  # validated there
        sources=tuple(sources), block_size=args.kv_block_size or None, engine_specs=engine_specs, groups=groups,
        lookahead=lookahead, lookaheads=lookaheads,
        max_blocks=args.kv_max_blocks, silence_timeout_s=args.kv_silence_timeout,
        nats=kv_nats.feed_options_from_args(args), nats_models=kv_nats.models_from_args(args),
        replay_history=getattr(args, "kv_replay_history", False),
        max_message_bytes=args.kv_max_message_size,
    )


def _usage_error(message: str) -> NoReturn:
    """Ends a client command on a mistake in its arguments as argparse does (exit 2), naming the
    argument, rather than with the traceback of where the value failed."""
    print(f"sidecar: {message}", file=sys.stderr)
    raise SystemExit(2)


def _channel(args: argparse.Namespace):  # noqa: ANN202 - grpc.Channel
    """A channel to `--target`: TLS when `--tls-ca` is given, trusting that CA, or `--tls-cert`
    and `--tls-key` (mutual TLS) without it, trusting the system's roots; else plaintext."""
    import grpc

    limit = 256 * 1024 * 1024  # the server enforces its own limit; the client should not be the one to refuse
    options = [("grpc.max_receive_message_length", limit), ("grpc.max_send_message_length", limit)]
    if (args.tls_cert is None) != (args.tls_key is None):
        _usage_error("--tls-cert, --tls-key: give both (the client certificate and its key) or neither")
    if not args.tls_ca and not args.tls_cert:
        return grpc.insecure_channel(args.target, options=options)

    def read(flag: str, path: str | None) -> bytes | None:
        if path is None:
            return None
        try:
            with open(path, "rb") as f:
                return f.read()
        except OSError as e:
            _usage_error(f"{flag} {path}: {e.strerror}")

    credentials = grpc.ssl_channel_credentials(
        read("--tls-ca", args.tls_ca), read("--tls-key", args.tls_key), read("--tls-cert", args.tls_cert))
    return grpc.secure_channel(args.target, credentials, options=options)


def _stub(args: argparse.Namespace):  # noqa: ANN202 - generated stub type
    from sidecar.v1 import preprocessor_pb2_grpc

    return preprocessor_pb2_grpc.PreprocessorStub(_channel(args))


def _call(fn, request, timeout: float, rpc: str = ""):  # noqa: ANN001, ANN202
    import grpc

    from sidecar.errors import client_hint

    try:
        return fn(request, timeout=timeout)
    except grpc.RpcError as e:
        hint = client_hint(rpc, e.code())
        print(f"sidecar: {e.code().name}: {e.details()}{f' ({hint})' if hint else ''}", file=sys.stderr)
        raise SystemExit(1) from None


def _read_texts(texts: list[str]) -> list[str]:
    if texts == ["-"] or not texts:
        return [sys.stdin.read()]
    return texts


def _tokenize(args: argparse.Namespace) -> int:
    from google.protobuf import json_format

    from sidecar.v1 import preprocessor_pb2 as pb

    request = pb.TokenizeRequest(
        model=args.model,
        texts=_read_texts(args.text),
        add_special_tokens=not args.no_special_tokens,
        return_offsets=args.offsets,
        return_tokens=args.tokens,
        max_length=args.max_length,
    )
    response = _call(_stub(args).Tokenize, request, args.timeout)
    if args.json:
        print(json_format.MessageToJson(response, preserving_proto_field_name=True))
        return 0
    for encoding in response.encodings:
        print(" ".join(map(str, encoding.token_ids)))
        if args.tokens:
            print(" ".join(json.dumps(t, ensure_ascii=False) for t in encoding.tokens))
        if args.offsets:
            pairs = zip(encoding.offsets[::2], encoding.offsets[1::2])
            print(" ".join(f"{a}:{b}" for a, b in pairs))
        print(f"# {len(encoding.token_ids)} tokens{' (truncated)' if encoding.truncated else ''}", file=sys.stderr)
    return 0


def _detokenize(args: argparse.Namespace) -> int:
    from google.protobuf import json_format

    from sidecar.v1 import preprocessor_pb2 as pb

    ids = [i for part in args.ids for i in part]  # each argument checked by flags.token_ids
    request = pb.DetokenizeRequest(
        model=args.model, sequences=[pb.TokenIds(token_ids=ids)], skip_special_tokens=not args.keep_special_tokens
    )
    response = _call(_stub(args).Detokenize, request, args.timeout)
    if args.json:
        print(json_format.MessageToJson(response, preserving_proto_field_name=True))
    else:
        print(response.texts[0])
    return 0


def raw_json_fields(text: str) -> dict[str, str]:
    """A JSON object's top-level values as raw text, so numbers keep their spelling on the way."""
    decoder = json.JSONDecoder()
    fields: dict[str, str] = {}
    pos = text.index("{") + 1
    while True:
        while text[pos] in " \t\r\n,":
            pos += 1
        if text[pos] == "}":
            return fields
        key, pos = decoder.raw_decode(text, pos)
        while text[pos] in " \t\r\n:":
            pos += 1
        _, end = decoder.raw_decode(text, pos)
        fields[key] = text[pos:end]
        pos = end


def _read_arg_file(path: str | None, argument: str) -> str:
    """The text of file `path` ('-': stdin); a file that cannot be read is a usage error naming
    `argument` (as the user wrote it: `--tools FILE`, `messages`)."""
    if path is None:
        return ""
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        _usage_error(f"{argument} {path}: {e.strerror}")
    except UnicodeDecodeError as e:
        _usage_error(f"{argument} {path}: not UTF-8 text ({e.reason} at byte {e.start})")


def _render(args: argparse.Namespace) -> int:
    from google.protobuf import json_format

    from sidecar.v1 import preprocessor_pb2 as pb

    body = _read_arg_file(args.messages, "messages").strip()
    fields: dict[str, str] = {}
    if body.startswith("{"):
        # An OpenAI chat request body: messages, tools, documents, chat_template_kwargs.
        try:
            fields = raw_json_fields(body)
        except (ValueError, IndexError) as e:
            print(f"sidecar: {args.messages}: not a JSON object: {e}", file=sys.stderr)
            return 2
        messages = fields.get("messages", "")
    else:
        messages = body
    request = pb.RenderRequest(
        model=args.model,
        messages_json=messages,
        tools_json=_read_arg_file(args.tools, "--tools") or fields.get("tools", ""),
        documents_json=_read_arg_file(args.documents, "--documents") or fields.get("documents", ""),
        chat_template_kwargs_json=args.kwargs or fields.get("chat_template_kwargs", ""),
        continue_final_message=args.continue_final_message,
        add_special_tokens=args.add_special_tokens,
        return_text=True,
        return_offsets=args.offsets,
    )
    if args.no_generation_prompt:
        request.add_generation_prompt = False
    if args.template is not None:
        request.chat_template = (_read_arg_file(args.template[1:], "--template @FILE") if args.template.startswith("@")
                                 else args.template)
    response = _call(_stub(args).Render, request, args.timeout)
    if args.json:
        print(json_format.MessageToJson(response, preserving_proto_field_name=True))
        return 0
    sys.stdout.write(response.text)
    if not response.text.endswith("\n"):
        sys.stdout.write("\n")
    if args.ids:
        print(" ".join(map(str, response.token_ids)))
    print(f"# {len(response.token_ids)} tokens, fingerprint {response.fingerprint}", file=sys.stderr)
    return 0


def _models(args: argparse.Namespace) -> int:
    from google.protobuf import json_format

    from sidecar.v1 import preprocessor_pb2 as pb

    response = _call(_stub(args).ListModels, pb.ListModelsRequest(), args.timeout)
    if args.json:
        print(json_format.MessageToJson(response, preserving_proto_field_name=True))
        return 0
    for m in response.models:
        print(f"{m.name}\t{m.fingerprint}\tvocab={m.vocab_size}\tencoder={m.encoder}\tbackend={m.backend}\t{m.source}")
    return 0


def _reload(args: argparse.Namespace) -> int:
    from google.protobuf import json_format

    from sidecar.v1 import admin_pb2, admin_pb2_grpc

    request = admin_pb2.ReloadModelsRequest(models=args.models, force=args.force)
    response = _call(admin_pb2_grpc.AdminStub(_channel(args)).ReloadModels, request, args.timeout, "ReloadModels")
    if args.json:
        print(json_format.MessageToJson(response, preserving_proto_field_name=True))
    failed = False
    for r in response.models:
        outcome = admin_pb2.ModelReload.Outcome.Name(r.outcome).removeprefix("OUTCOME_").lower()
        failed |= r.outcome == admin_pb2.ModelReload.OUTCOME_FAILED
        if not args.json:
            print(f"{r.model}\t{outcome}\t{r.fingerprint}\t{r.seconds:.2f}s\t{r.error}".rstrip())
    return 1 if failed else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sidecar", description=__doc__, formatter_class=DefaultsHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run the gRPC server", formatter_class=DefaultsHelpFormatter)
    serve.add_argument("--model", action="append", default=[], metavar="NAME=DIR[,key=value]",
                       help="host a model directory under NAME (repeatable); options: tool_parser=, "
                            "reasoning_parser=, vocab_size= (the model's output rows when DIR has no config.json "
                            "saying it; 0 = unknown). Without any, the embedded Qwen3 tokenizer and template are served as 'qwen3'")
    serve.add_argument("--backend", choices=["native", "reference"], default="native",
                       help="native: the Rust core (default); reference: pure Python on PyPI tokenizers")
    serve.add_argument("--host", default="127.0.0.1", help="TCP listen address (default 127.0.0.1)")
    serve.add_argument("--processes", type=positive_int, default=1, metavar="N",
                       help="run N server processes on the same listeners: TCP port shared (SO_REUSEPORT), "
                            "Unix socket PATH as PATH.0 .. PATH.N-1, one /metrics adding them up, health for the group, "
                            "a process that dies restarted; see sidecar/processes.py")
    serve.add_argument("--liveness-timeout-s", type=seconds, default=30.0, metavar="S",
                       help="with --processes: a serving process whose event loop has not turned for S seconds (hung, "
                            "deadlocked, stopped) is killed and restarted; 0 = never (default 30)")
    serve.add_argument("--pin-loop-cpu", type=int, default=None, metavar="CPU",
                       help="run the event loop and gRPC's threads on this CPU (process i of --processes on the i-th "
                            "CPU after it), and the native workers on every CPU the process may use: on the 2-vCPU VM "
                            "measured, thread wake-ups across CPUs cost more than the work of a small request "
                            "(docs/benchmarks.md, Multiplex vs vllm-rs); off by default")
    serve.add_argument("--process-index", type=int, default=None, help=argparse.SUPPRESS)
    serve.add_argument("--group-state", default=None, help=argparse.SUPPRESS)
    serve.add_argument("--supervisor-pid", type=int, default=None, help=argparse.SUPPRESS)
    serve.add_argument("--kv-replay-history", action="store_true", help=argparse.SUPPRESS)
    serve.add_argument("--port", type=port_or_off, default=50051, help="TCP port; 0 = any free port, -1 = no TCP")
    serve.add_argument("--uds", default=None, metavar="PATH", help="also listen on this Unix socket")
    serve.add_argument("--uds-mode", type=_octal_mode, default=0o600, metavar="MODE",
                       help="permission bits of the Unix socket, whatever the umask (default 600; 660 lets the group in)")
    serve.add_argument("--metrics-port", type=port, default=None,
                       help="serve Prometheus /metrics on this port; 0 = any free port (logged at startup)")
    serve.add_argument("--metrics-host", default="127.0.0.1",
                       help="address /metrics listens on (default 127.0.0.1; 0.0.0.0 for every interface)")
    serve.add_argument("--tls-cert", default=None, metavar="PEM", help="TLS on the TCP listener: certificate chain")
    serve.add_argument("--tls-key", default=None, metavar="PEM", help="TLS on the TCP listener: private key")
    serve.add_argument("--tls-client-ca", default=None, metavar="PEM",
                       help="mutual TLS: TCP clients must present a certificate signed by this CA")
    serve.add_argument("--enable-admin", action="store_true",
                       help="serve sidecar.v1.Admin (ReloadModels); keep it to the Unix socket or mutual TLS")
    serve.add_argument("--otlp-endpoint", default=None, metavar="URL",
                       help="export OpenTelemetry trace spans to this OTLP/gRPC collector (http://host:4317); "
                            "a traceparent in the call's metadata is continued")
    serve.add_argument("--reflection", action="store_true", help="enable gRPC server reflection")
    serve.add_argument("--allow-request-templates", action="store_true",
                       help="let Render requests carry their own Jinja chat_template (templates are code: fuel "
                            "bounds their steps, not their memory; only for trusted clients)")
    serve.add_argument("--render-cache-mb", type=int, default=64,
                       help="multi-turn Render cache per model (token ids of unchanged prompt segments); 0 disables it")
    serve.add_argument("--template-fuel", type=int, default=50_000_000,
                       help="chat template instruction budget per Render; a template that needs more fails")
    serve.add_argument("--max-message-mb", type=int, default=64, help="max gRPC message size, both ways")
    serve.add_argument("--workers", type=int, default=0, help="native worker threads (default: CPU count)")
    serve.add_argument("--max-queue", type=int, default=256, help="large calls allowed to wait for a worker; a stream's messages, one per stream, are not refused")
    serve.add_argument("--max-pending-calls", type=int, default=16384,
                       help="calls gRPC holds before the server takes them (a burst); past it gRPC refuses new "
                            "calls with CANCELLED; gRPC's own bound is 3000")
    serve.add_argument("--max-connections", type=int, default=0,
                       help="connections kept open at once, gRPC closing any past it; 0 = half the open-file limit")
    serve.add_argument("--max-connection-idle-s", type=seconds, default=300.0,
                       help="seconds a connection with no call in flight stays open; clients reconnect")
    serve.add_argument("--max-unsent-mb", type=int, default=512,
                       help="MB of responses that may wait for one connection's client to read them (unary "
                            "responses, and each ParseStream/Multiplex answer while gRPC writes it); past it that "
                            "connection's new work gets RESOURCE_EXHAUSTED (a unary call's status, a stream "
                            "request's own error), and everyone's past 4 times it in all")
    serve.add_argument("--drain-seconds", type=seconds, default=10.0,
                       help="on SIGTERM/SIGINT: seconds calls in flight get to finish; the process exits by then")
    serve.add_argument("--drain-notice-seconds", type=seconds, default=1.0,
                       help="health answers NOT_SERVING for at least this long after SIGTERM, capped by --drain-seconds")
    serve.add_argument("--parse-max-requests", type=int, default=4096,
                       help="ParseStream: open requests per stream; more is RESOURCE_EXHAUSTED")
    serve.add_argument("--parse-max-held-kb", type=int, default=1024,
                       help="ParseStream: KiB of undecided output one request may hold back: the undecided text its "
                            "parsers hold (each copy counted) plus 8 bytes for each token waiting for its text to "
                            "be decided")
    serve.add_argument("--parse-max-stream-held-mb", type=int, default=256,
                       help="ParseStream: MiB of undecided output all the requests of one stream may hold back "
                            "together (counted as --parse-max-held-kb counts); the request whose step passes it is "
                            "RESOURCE_EXHAUSTED")
    serve.add_argument("--multiplex-max-inflight", type=int, default=4096,
                       help="Multiplex: requests one stream may have waiting for their results; more are "
                            "RESOURCE_EXHAUSTED, each on its own")
    serve.add_argument("--log-level", choices=["debug", "info", "warning", "error"], default="info",
                       help="least severity of the JSON log lines on stdout; info writes one line per RPC")
    _add_limit_flags(serve)
    serve.add_argument("--kv-events", action="append", default=[],
                       metavar="WORKER=ENDPOINT[,replay=ENDPOINT][,model=NAME][,topic=T]",
                       help="subscribe to an engine's ZMQ KV-event publisher (repeatable; one per engine and DP "
                            "rank) and serve the KvRouter service; model= names the index (and, for text input, "
                            "the hosted tokenizer)")
    serve.add_argument("--kv-block-size", type=int, default=0,
                       help="tokens per KV block of the indexes (default: learned from the first event)")
    serve.add_argument("--kv-engine-hash", action="append", default=[],
                       metavar="MODEL=ALGORITHM[,block_size=N][,seed=S][,extra_keys=legacy][,lookahead=N]",
                       help="match MODEL's blocks on the engine's own hashes (e.g. "
                            "qwen3=vllm_sha256_cbor,block_size=16,seed=0) instead of content keys recomputed from "
                            "the events' token ids; block_size= (or --kv-block-size) is required here; "
                            "sglang_event_format=dynamo for SGLang publishing Dynamo's event format; lookahead=N for "
                            "vLLM >= 0.33 with prefix caching and an EAGLE/EAGLE3/MTP drafter (1; "
                            "num_speculative_tokens for multi-module MTP; 0 with disable_lookahead_block_hashes "
                            "or a KV connector)")
    serve.add_argument("--kv-group", action="append", default=[], metavar="MODEL=N",
                       help="index MODEL's blocks of the engine's KV-cache group N (vLLM's group_idx; default 0). "
                            "A hybrid model (sliding-window or Mamba layers beside full attention) publishes one "
                            "group per layer type; give the full-attention group's index (gpt-oss: 1)")
    serve.add_argument("--kv-lookahead", action="append", default=[], metavar="[MODEL=]N",
                       help="content mode: key each block over its tokens and the N after it, as vLLM >= 0.33 "
                            "hashes with prefix caching and an EAGLE/EAGLE3/MTP drafter (1; num_speculative_tokens "
                            "for multi-module MTP; 0 with disable_lookahead_block_hashes or a KV connector), from "
                            "the start instead of once the first store tells; N for every content-mode model, "
                            "MODEL=N for one (repeatable). A store of another N is skipped, a snapshot of another "
                            "refused. Engine mode: lookahead= in --kv-engine-hash")
    serve.add_argument("--kv-max-blocks", type=int, default=4_000_000,
                       help="bound on indexed blocks per model; past it, 1%% of the bound is evicted: the oldest blocks of the "
                            "largest worker, at most a quarter of that worker at a time. 0 keeps no blocks (every store "
                            "is evicted at once: every score is 0)")
    serve.add_argument("--kv-silence-timeout", type=seconds, default=300.0,
                       help="seconds without KV events after which a worker's blocks are dropped; 0 = never")
    serve.add_argument("--kv-max-message-size", type=positive_int, default=DEFAULT_MAX_MESSAGE_BYTES,
                       metavar="BYTES",
                       help="the largest KV-event message taken from an engine (libzmq's MAXMSGSIZE on its SUB "
                            "and replay sockets; default 64 MiB): a larger one drops the connection, which is made "
                            "again, and is lost as a gap (logged kv_events_disconnected, counted in disconnects)")
    kv_nats.add_serve_flags(serve)
    serve.set_defaults(func=_serve)
    kv_nats.add_relay_command(sub)

    def client(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, formatter_class=DefaultsHelpFormatter)
        p.add_argument("--target", default=DEFAULT_TARGET,
                       help=f"server address: host:port or unix:/path (default {DEFAULT_TARGET}, env SIDECAR_TARGET)")
        p.add_argument("--json", action="store_true", help="print the response as JSON")
        p.add_argument("--timeout", type=seconds, default=30.0, help="deadline in seconds")
        p.add_argument("--tls-ca", default=None, metavar="PEM", help="connect with TLS, trusting this CA")
        p.add_argument("--tls-cert", default=None, metavar="PEM",
                       help="mutual TLS: the client certificate (with --tls-key; without --tls-ca the server's "
                            "certificate is checked against the system's roots)")
        p.add_argument("--tls-key", default=None, metavar="PEM", help="mutual TLS: the client key")
        return p

    tok = client("tokenize", "tokenize text (arguments, or stdin with '-')")
    tok.add_argument("--model", default="qwen3", help="model name on the server")
    tok.add_argument("--no-special-tokens", action="store_true", help="add_special_tokens = false")
    tok.add_argument("--offsets", action="store_true", help="also print character offsets")
    tok.add_argument("--tokens", action="store_true", help="also print token strings")
    tok.add_argument("--max-length", type=uint32, default=0,
                     help="truncate each encoding to at most this many tokens; 0 = no limit")
    tok.add_argument("text", nargs="*")
    tok.set_defaults(func=_tokenize)

    detok = client("detokenize", "turn token ids back into text")
    detok.add_argument("--model", default="qwen3", help="model name on the server")
    detok.add_argument("--keep-special-tokens", action="store_true", help="skip_special_tokens = false")
    detok.add_argument("ids", nargs="+", type=token_ids, help="token ids, space or comma separated")
    detok.set_defaults(func=_detokenize)

    render = client("render", "render a chat request with the model's chat template (and tokenize it)")
    render.add_argument("--model", default="qwen3", help="model name on the server")
    render.add_argument("messages", nargs="?", default="-",
                        help="file with a JSON array of messages or an OpenAI chat request body ('-' = stdin)")
    render.add_argument("--tools", metavar="FILE", help="JSON array of tools (overrides the body's)")
    render.add_argument("--documents", metavar="FILE", help="JSON array of documents (overrides the body's)")
    render.add_argument("--kwargs", metavar="JSON", help='chat_template_kwargs, e.g. \'{"enable_thinking": false}\'')
    render.add_argument("--template", metavar="NAME|@FILE",
                        help="a template name of the model, or @FILE with Jinja source (server needs --allow-request-templates)")
    render.add_argument("--no-generation-prompt", action="store_true", help="add_generation_prompt = false")
    render.add_argument("--continue-final-message", action="store_true", help="end the prompt inside the last message")
    render.add_argument("--add-special-tokens", action="store_true", help="let the tokenizer add BOS/EOS too")
    render.add_argument("--ids", action="store_true", help="also print the token ids")
    render.add_argument("--offsets", action="store_true", help="ask for offsets (shown with --json)")
    render.set_defaults(func=_render)

    models = client("models", "list the server's models")
    models.set_defaults(func=_models)

    reload = client("reload", "reload changed model directories (the server needs --enable-admin; SIGHUP does the same)")
    reload.add_argument("models", nargs="*", help="model names (default: all)")
    reload.add_argument("--force", action="store_true", help="reload even when the files are unchanged")
    reload.set_defaults(func=_reload)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    # `serve --processes N` starts N servers with the same arguments.
    args.serve_argv = argv[argv.index("serve") + 1:] if "serve" in argv else []
    return args.func(args)
