"""What the fan-out's NATS connections write to the logs while NATS is unreachable: one JSON line
per change of state and per new error, not the client's traceback on stderr for every attempt."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
import time

import pytest

from router_adapter import nats_status
from router_adapter.nats_status import ConnectionStatus
from sidecar import logs
from tests.conftest import REPO
from tests.kv.nats_server import free_port, require_nats_client


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Closed:
    is_closed = True


def events(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage().split(" ")[0] for r in caplog.records if r.name == "router_adapter.nats"]


def test_an_outage_is_one_line_then_a_count_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="router_adapter.nats")
    clock = Clock()
    status = ConnectionStatus("feed", "nats://127.0.0.1:1", clock)
    refused = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 1)")
    for _ in range(121):  # a minute of attempts, two a second
        status.error(refused)
        clock.now += 0.5
    assert events(caplog) == ["kv_nats_connect_failed", "kv_nats_errors_repeated"]
    assert "errors=120 seconds=60" in caplog.records[-1].getMessage()
    status.error(TimeoutError())  # another error: said at once
    assert events(caplog)[-1] == "kv_nats_connect_failed" and "error='TimeoutError'" in caplog.records[-1].getMessage()

    caplog.clear()
    status.connected(object())
    status.error(refused)  # a new state: the same error is news again
    status.disconnected()
    for _ in range(10):
        status.error(refused)
    clock.now += 3
    status.reconnected()
    assert events(caplog) == ["kv_nats_connected", "kv_nats_error", "kv_nats_disconnected",
                              "kv_nats_reconnect_failed", "kv_nats_reconnected"]
    assert "failed_attempts=122" in caplog.records[0].getMessage()
    assert "down_seconds=3.0 failed_attempts=10" in caplog.records[-1].getMessage()


def test_a_close_of_ours_is_no_disconnection(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="router_adapter.nats")
    status = ConnectionStatus("relay", "nats://x:4222", Clock())
    status.connected(Closed())
    status.disconnected()
    assert events(caplog) == ["kv_nats_connected"]


def test_distinct_errors_are_bounded(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="router_adapter.nats")
    status = ConnectionStatus("relay", "nats://x:4222", Clock())
    for port in range(100):
        status.error(OSError(f"port {port}"))
    assert len(events(caplog)) == nats_status.MAX_DISTINCT


def test_the_nats_clients_own_log_lines_are_json() -> None:
    """The backstop: what the client logs itself (an error in its read loop) is a JSON line too."""
    buffer = io.StringIO()
    logs.configure("info", stream=buffer)
    try:
        try:
            raise ConnectionResetError("reset by peer")
        except ConnectionResetError as e:
            logging.getLogger("nats.aio.client").error("nats: encountered error", exc_info=e)
    finally:
        logs.configure("info")
    (line,) = [json.loads(text) for text in buffer.getvalue().splitlines()]
    assert (line["event"], line["logger"], line["level"]) == ("nats_client", "nats.aio.client", "error")
    assert line["error"] == "ConnectionResetError('reset by peer')"


def test_a_relay_with_nats_unreachable_logs_json_lines_only() -> None:
    """`sidecar kv-relay` (as `serve --kv-nats`) with NATS unreachable wrote two client tracebacks a
    second to stderr for the whole outage, and never the `kv_nats_connect_failed` warning."""
    require_nats_client()
    process = subprocess.Popen(
        [sys.executable, "-m", "sidecar", "kv-relay", "--nats", f"nats://127.0.0.1:{free_port()}",
         "--kv-events", f"w0=tcp://127.0.0.1:{free_port()},model=q"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    time.sleep(4)  # about eight attempts
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=20)
    assert process.returncode == 0 and err == "", err[:2000]
    lines = [json.loads(text) for text in out.splitlines()]
    assert [line["event"] for line in lines] == ["kv_nats_connect_failed"], lines
    assert "ConnectionRefusedError" in lines[0]["detail"]
