"""The command line: flags map to the server configuration."""

from __future__ import annotations

import pytest

from sidecar.cli import build_parser, main
from sidecar.config import ServerConfig


def test_serve_flags() -> None:
    args = build_parser().parse_args([
        "serve", "--model", "a=/x", "--model", "b=/y,tool_parser=hermes", "--uds", "/tmp/s.sock", "--port", "-1",
        "--backend", "reference", "--reflection", "--metrics-port", "9400", "--max-message-mb", "8",
    ])
    assert args.model == ["a=/x", "b=/y,tool_parser=hermes"]
    assert (args.uds, args.port, args.backend, args.reflection, args.metrics_port, args.max_message_mb) == (
        "/tmp/s.sock", -1, "reference", True, 9400, 8)


def test_client_defaults() -> None:
    args = build_parser().parse_args(["tokenize", "hello"])
    assert (args.model, args.text, args.json) == ("qwen3", ["hello"], False)


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--parse-max-requests", "-1", "--parse-max-requests: must be > 0"),
    ("--parse-max-held-kb", "-5", "--parse-max-held-kb: must be > 0"),
    ("--parse-max-stream-held-mb", "0", "--parse-max-stream-held-mb: must be > 0"),
    ("--workers", "-1", "--workers: must be > 0"),
    ("--max-queue", "0", "--max-queue: must be > 0"),
    ("--max-pending-calls", "0", "--max-pending-calls: must be > 0"),
    ("--max-token-ids", "0", "--max-token-ids: must be > 0"),
    ("--max-stop-strings", "-1", "--max-stop-strings: must be >= 0"),
    ("--render-cache-mb", "-1", "--render-cache-mb: must be >= 0"),
    # Past what the native core reads as a size (2^64 bytes failed every ParseStream on `limits_json`).
    ("--parse-max-stream-held-mb", str(1 << 44),
     "--parse-max-stream-held-mb: too large (at most 2^62 once in bytes or items)"),
    ("--max-token-ids", str(1 << 70), "--max-token-ids: too large (at most 2^62 once in bytes or items)"),
    ("--max-message-mb", "4096", "--max-message-mb: at most 2047 (gRPC's message sizes are 32-bit)"),
])
def test_a_bad_limit_stops_the_start_naming_its_flag(flag: str, value: str, message: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before anything starts (it surfaced as an odd error on every call that met it: a
    negative --parse-max-requests failed each ParseStream with INVALID_ARGUMENT on `limits_json`)."""
    assert main(["serve", "--port", "-1", "--uds", "/nonexistent/never-bound.sock", flag, value]) == 2
    assert capsys.readouterr().err.strip() == f"sidecar: {message}"


@pytest.mark.parametrize("argv", [
    ["serve", "--kv-silence-timeout", "-1"],  # reset every worker before every batch
    ["serve", "--kv-nats-snapshot-period", "nan"],
    ["serve", "--kv-nats-retention", "-3600"],
    ["serve", "--drain-seconds", "inf"],
    ["kv-relay", "--kv-events", "w0=tcp://127.0.0.1:1", "--nats", "nats://127.0.0.1:1", "--silence-timeout", "-1"],
    ["kv-relay", "--kv-events", "w0=tcp://127.0.0.1:1", "--nats", "nats://127.0.0.1:1", "--replay-timeout", "-2"],
    ["kv-relay", "--kv-events", "w0=tcp://127.0.0.1:1", "--nats", "nats://127.0.0.1:1", "--retention", "-1"],
])
def test_a_duration_that_is_negative_or_not_finite_is_refused_naming_its_flag(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """A negative silence timeout reset every worker before every batch, and a negative retention
    failed with a traceback inside the NATS client."""
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    flag, value = argv[-2], argv[-1]
    assert f"argument {flag}: {value}: must be a finite number of seconds >= 0" in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "value", "allowed"), [
    ("--port", "70000", "a port in [0, 65535] (0: any free port) or -1 (no TCP)"),  # listened on 70000 % 65536
    ("--port", "65536", "a port in [0, 65535] (0: any free port) or -1 (no TCP)"),
    ("--port", "-5", "a port in [0, 65535] (0: any free port) or -1 (no TCP)"),  # was taken as -1: no TCP
    ("--metrics-port", "70000", "a port in [0, 65535] (0: any free port)"),  # OverflowError from bind
    ("--metrics-port", "-1", "a port in [0, 65535] (0: any free port)"),
])
@pytest.mark.parametrize("processes", ["1", "2"])
def test_a_port_out_of_range_stops_the_start_naming_its_flag(flag: str, value: str, allowed: str, processes: str,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before anything binds, by one process or the parent of `--processes N`."""
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--processes", processes, "--uds", "/nonexistent/never-bound.sock", flag, value])
    assert exited.value.code == 2
    assert f"argument {flag}: {value}: must be {allowed}" in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "value"), [("--port", "-1"), ("--port", "0"), ("--port", "65535"),
                                             ("--metrics-port", "0"), ("--metrics-port", "65535")])
def test_the_ends_of_the_port_ranges_are_taken(flag: str, value: str) -> None:
    args = build_parser().parse_args(["serve", flag, value])
    assert getattr(args, flag.removeprefix("--").replace("-", "_")) == int(value)


@pytest.mark.parametrize("field", ["port", "metrics_port"])
@pytest.mark.parametrize("value", [-1, 65536])
def test_a_config_built_in_code_refuses_a_port_out_of_range_too(field: str, value: int) -> None:
    flag = "--" + field.replace("_", "-")
    with pytest.raises(ValueError, match=f"^{flag} {value}: must be a port in \\[0, 65535\\]"):
        ServerConfig(**{field: value})


@pytest.mark.parametrize(("argv", "message"), [
    # Each ended in a traceback from where the value failed (int(), protobuf, open()).
    (["detokenize", "1", "abc"], "argument ids: 'abc': not a token id (an integer in [0, 4294967295])"),
    (["detokenize", "99999999999"], "argument ids: 99999999999: not a token id"),
    (["detokenize", "--", "-5"], "argument ids: -5: not a token id"),
    (["tokenize", "--max-length", "-1", "hi"], "argument --max-length: -1: must be in [0, 4294967295]"),
    (["tokenize", "--max-length", str(1 << 32), "hi"], f"argument --max-length: {1 << 32}: must be in"),
    (["render", "/nonexistent/m.json"], "sidecar: messages /nonexistent/m.json: No such file or directory"),
    (["render", "--tools", "/nonexistent/t.json", "MESSAGES"], "sidecar: --tools /nonexistent/t.json: No such file"),
    (["render", "--documents", "/nonexistent/d.json", "MESSAGES"], "sidecar: --documents /nonexistent/d.json: No such"),
    (["render", "--template", "@/nonexistent/t.jinja", "MESSAGES"],
     "sidecar: --template @FILE /nonexistent/t.jinja: No such file"),
    (["render", "BINARY"], "sidecar: messages BINARY: not UTF-8 text"),
    (["models", "--tls-ca", "/nonexistent/ca.pem"], "sidecar: --tls-ca /nonexistent/ca.pem: No such file or directory"),
    (["models", "--tls-cert", "/nonexistent/c.pem"], "sidecar: --tls-cert, --tls-key: give both"),
    (["models", "--tls-key", "/nonexistent/k.pem"], "sidecar: --tls-cert, --tls-key: give both"),
    (["models", "--tls-ca", "CA", "--tls-cert", "CA", "--tls-key", "/nonexistent/k.pem"],
     "sidecar: --tls-key /nonexistent/k.pem: No such file or directory"),
])
def test_a_client_argument_mistake_is_named_with_exit_2(argv: list[str], message: str, tmp_path,  # noqa: ANN001
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    messages = tmp_path / "m.json"
    messages.write_text('[{"role": "user", "content": "hi"}]')
    binary = tmp_path / "b.json"
    binary.write_bytes(b"\xff\xfe[]")
    names = {"MESSAGES": str(messages), "BINARY": str(binary), "CA": str(messages)}
    argv = [names.get(a, a) for a in argv]
    message = message.replace("BINARY", str(binary))
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--target", "127.0.0.1:1", "--timeout", "1"])
    err = capsys.readouterr().err
    assert exited.value.code == 2 and message in err and "Traceback" not in err, err


def test_a_client_certificate_without_a_ca_is_tls_with_the_system_roots(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """`--tls-cert/--tls-key` without `--tls-ca` were ignored: the client spoke plaintext."""
    import grpc

    from sidecar import cli

    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    cert.write_bytes(b"CERT")
    key.write_bytes(b"KEY")
    made = []
    monkeypatch.setattr(grpc, "ssl_channel_credentials", lambda *a: made.append(a) or "credentials")
    monkeypatch.setattr(grpc, "secure_channel", lambda target, credentials, options: ("secure", target, credentials))
    args = build_parser().parse_args(["models", "--target", "h:1", "--tls-cert", str(cert), "--tls-key", str(key)])
    assert cli._channel(args) == ("secure", "h:1", "credentials")
    assert made == [(None, b"KEY", b"CERT")]


def test_reload_against_a_server_without_admin_names_the_flag(monkeypatch, capsys) -> None:  # noqa: ANN001
    """The server's answer is gRPC's own UNIMPLEMENTED "Method not found!", which said nothing of
    --enable-admin."""
    import grpc

    from sidecar.v1 import admin_pb2_grpc

    class Unimplemented(grpc.RpcError):
        def code(self) -> grpc.StatusCode:
            return grpc.StatusCode.UNIMPLEMENTED

        def details(self) -> str:
            return "Method not found!"

    class Stub:
        def __init__(self, _channel: object) -> None:
            pass

        def ReloadModels(self, request: object, timeout: float) -> None:  # noqa: N802 - the RPC's name
            raise Unimplemented()

    monkeypatch.setattr(admin_pb2_grpc, "AdminStub", Stub)
    with pytest.raises(SystemExit) as exited:
        main(["reload", "--target", "127.0.0.1:1"])
    err = capsys.readouterr().err
    assert exited.value.code == 1
    assert err.startswith("sidecar: UNIMPLEMENTED: Method not found! (the server has no Admin service: start it "
                          "with --enable-admin"), err


def test_max_unsent_help_covers_streams_as_the_readme_does() -> None:
    """--help spoke of unary calls only; the bound counts ParseStream and Multiplex answers too."""
    import argparse

    serve = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    (flag,) = [a for a in serve._actions if "--max-unsent-mb" in a.option_strings]
    assert "ParseStream" in flag.help and "Multiplex" in flag.help
