"""`sidecar serve --processes 2`: both processes answer on the shared TCP port (new connections are
spread by SO_REUSEPORT) and each on its own Unix socket; SIGTERM to the parent stops both, which
remove their sockets, and the parent exits 0."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from sidecar.v1 import preprocessor_pb2 as pb
from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc
from tests.conftest import REPO

pytestmark = pytest.mark.e2e

PROCESSES = 2
#: Fresh TCP connections made: all landing on one of 2 processes has probability 2 * 2**-24.
CONNECTIONS = 24


def log_events(path: Path) -> list[dict]:
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def tokenize(address: str, text: str) -> list[int]:
    # A local subchannel pool: one TCP connection per channel (gRPC shares them between channels otherwise).
    with grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)]) as channel:
        response = pb_grpc.PreprocessorStub(channel).Tokenize(pb.TokenizeRequest(model="qwen3", texts=[text]), timeout=30)
    return list(response.encodings[0].token_ids)


def test_processes_share_the_port_and_each_has_its_socket(tmp_path: Path) -> None:
    uds = tmp_path / "sidecar.sock"
    log_path = tmp_path / "server.log"
    with open(log_path, "w") as log:
        parent = subprocess.Popen([sys.executable, "-m", "sidecar", "serve", "--processes", str(PROCESSES), "--port", "0",
                                   "--uds", str(uds)], stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    try:
        deadline = time.monotonic() + 180
        while len(listening := [e for e in log_events(log_path) if e.get("event") == "listening"]) < PROCESSES:
            assert parent.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, f"not every process listened:\n{log_path.read_text()}"
            time.sleep(0.1)
        assert sorted(e["process"] for e in listening) == list(range(PROCESSES))
        tcp = {next(a for a in e["addresses"] if not a.startswith("unix:")) for e in listening}
        assert len(tcp) == 1, tcp  # one port for all
        expected = tokenize(f"unix:{uds}.0", "one process per core")
        for i in range(PROCESSES):
            assert tokenize(f"unix:{uds}.{i}", "one process per core") == expected
        address = tcp.pop()
        for _ in range(CONNECTIONS):
            assert tokenize(address, "one process per core") == expected
        answered = {e["process"] for e in log_events(log_path) if e.get("event") == "rpc" and e.get("rpc") == "Tokenize"}
        assert answered == set(range(PROCESSES))
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(60) == 0
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    stopped = [e for e in log_events(log_path) if e.get("event") == "stopped"]
    assert sorted(e["process"] for e in stopped) == list(range(PROCESSES))
    assert not any(Path(f"{uds}.{i}").exists() for i in range(PROCESSES))
