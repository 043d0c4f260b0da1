"""Connections are a bounded resource: `--max-connections` caps how many the server keeps open,
shared out between its listeners (so idle ones cannot use every file descriptor, which took health
checks and `/metrics` down with the calls), and `--max-connection-idle-s` closes one with no call
in flight."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.conftest import start_server, stop_server

pytestmark = pytest.mark.e2e

#: What an HTTP/2 client sends first: the preface and an empty SETTINGS frame.
PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def idle_connection(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    conn = socket.create_connection((host, int(port)), timeout=10)
    conn.sendall(PREFACE)
    return conn


def check(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=3).status


def closed_by_server(conn: socket.socket, within: float) -> bool:
    deadline = time.monotonic() + within
    conn.settimeout(0.5)
    while time.monotonic() < deadline:
        try:
            if conn.recv(4096) == b"":
                return True
        except socket.timeout:
            continue
        except OSError:
            return True
    return False


def test_connections_past_the_bound_are_refused_until_one_closes(tmp_path: Path) -> None:
    # Shared out between the two listeners the test server has (TCP and a Unix socket): 3 each.
    server = start_server(tmp_path, "--max-connections", "6")
    held = []
    try:
        held = [idle_connection(server.tcp) for _ in range(3)]
        time.sleep(0.5)  # let the server accept them (not an assertion)
        with pytest.raises(grpc.RpcError) as refused:
            check(server.tcp)
        assert refused.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
        held.pop().close()
        deadline = time.monotonic() + 30
        while True:
            try:
                assert check(server.tcp) == health_pb2.HealthCheckResponse.SERVING
                break
            except grpc.RpcError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        for conn in held:
            conn.close()
        stop_server(server)


def test_a_connection_that_never_calls_is_closed_when_idle(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--max-connection-idle-s", "1")
    try:
        conn = idle_connection(server.tcp)
        assert closed_by_server(conn, within=30), "an idle connection stayed open"
        conn.close()
        assert check(server.tcp) == health_pb2.HealthCheckResponse.SERVING
    finally:
        stop_server(server)


@pytest.mark.parametrize(("flag", "value"), [
    ("--max-connections", "-1"), ("--max-connections", "3000000000"),
    # gRPC's idle time is a 32-bit count of milliseconds: past it the start aborted; under one
    # millisecond every connection was closed at once.
    ("--max-connection-idle-s", "0"), ("--max-connection-idle-s", "0.0004"), ("--max-connection-idle-s", "3000000"),
])
def test_bad_connection_limits_are_refused_naming_the_flag(tmp_path: Path, flag: str, value: str) -> None:
    with pytest.raises(RuntimeError, match=flag):
        start_server(tmp_path, flag, value, timeout=60)


def test_the_bound_is_shared_out_between_the_listeners() -> None:
    from sidecar.config import ServerConfig

    both = ServerConfig(max_connections=1000, uds="/tmp/x.sock")
    assert both.listener_connection_limit() == 500
    assert ServerConfig(max_connections=1000).listener_connection_limit() == 1000
    assert ServerConfig(max_connections=1000, port=None, uds="/tmp/x.sock").listener_connection_limit() == 1000
