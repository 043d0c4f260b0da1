"""The command line: flags map to the server configuration."""

from __future__ import annotations

from sidecar.cli import build_parser


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
