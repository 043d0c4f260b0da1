"""The Rust client against `sidecar serve --processes 2 --uds PATH`: given `unix:PATH` it finds
`PATH.0` and `PATH.1` and spreads unary and multiplexed calls over both; every call succeeds while
process 1 is killed (it fails over to process 0) and after the parent has restarted it, and the
restarted process is used again (the driver is `sidecar-interop --fleet 2`, see its fleet.rs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2

from tests.client.test_rust_client import interop_binary, rust_outcome
from tests.conftest import REPO
from tests.server.test_processes import child_pid, health, log_events, wait_for, wait_restarted

pytestmark = pytest.mark.e2e

PROCESSES = 2


def answered(events: list[dict], process: int) -> tuple[int, int]:
    """Unary Tokenize calls and multiplexed requests a process answered, in `events`."""
    mine = [e for e in events if e.get("event") == "rpc" and e.get("process") == process]
    return (sum(e.get("rpc") == "Tokenize" for e in mine),
            sum(e.get("opened", 0) for e in mine if e.get("rpc") == "Multiplex"))


def test_rust_client_spreads_over_processes_and_survives_a_restart(tmp_path: Path) -> None:
    binary = interop_binary()
    uds = tmp_path / "sidecar.sock"
    log_path = tmp_path / "server.log"
    with open(log_path, "w") as log:
        parent = subprocess.Popen([sys.executable, "-m", "sidecar", "serve", "--processes", str(PROCESSES),
                                   "--port", "-1", "--uds", str(uds)], stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    driver = None
    try:
        wait_for(lambda: sum(e.get("event") == "listening" for e in log_events(log_path)) == PROCESSES,
                 "not every process listened", log_path)
        driver = subprocess.Popen([str(binary), "--fleet", str(PROCESSES), "--target", f"unix:{uds}"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        watchdog = threading.Timer(240, driver.kill)
        watchdog.start()
        records, restarted_at = [], None
        try:
            for line in driver.stdout:
                record = json.loads(line)
                if record.get("event") == "kill-process":
                    os.kill(child_pid(parent.pid, 1), signal.SIGKILL)
                elif record.get("event") == "wait-restarted":
                    wait_restarted(log_path, 1)
                    wait_for(lambda: health(f"unix:{uds}.1") == health_pb2.HealthCheckResponse.SERVING,
                             "the group did not turn SERVING again", log_path)
                    restarted_at = len(log_events(log_path))
                else:
                    records.append(record)
                    continue
                driver.stdin.write("done\n")
                driver.stdin.flush()
            stderr = driver.stderr.read()
            assert driver.wait() == 0, f"sidecar-interop --fleet failed:\n{stderr}"
        finally:
            watchdog.cancel()
        assert len(records) == 3 * 2 * 24 and all(rust_outcome(r)[0] == "OK" for r in records), \
            [r["case"] for r in records if rust_outcome(r)[0] != "OK"]
        parent.send_signal(signal.SIGTERM)  # streams end and are logged
        assert parent.wait(60) == 0
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    events = log_events(log_path)
    assert restarted_at is not None
    for process in range(PROCESSES):
        unary, multiplexed = answered(events, process)
        assert unary > 0 and multiplexed > 0, (process, unary, multiplexed)
    # The restarted process 1 was picked up again by both clients.
    unary, multiplexed = answered(events[restarted_at:], 1)
    assert unary > 0 and multiplexed > 0, (unary, multiplexed)
