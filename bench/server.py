"""Starts the real server for a benchmark: a subprocess on a temp Unix socket, default settings."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

_REPO = Path(__file__).resolve().parent.parent


class BenchServer:
    """`with BenchServer(*extra_args) as s:` -> `s.uds` is the `unix:` target. With `tcp=True` it
    also listens on a free loopback port (`s.tcp`); with `processes=N` it runs `--processes N`
    (`s.uds` is then process 0's socket, `s.tcp` the port they share, `s.base` the base path of
    the process sockets, which the Rust client spreads over)."""

    def __init__(self, *args: str, tcp: bool = False, processes: int = 1) -> None:
        self._args = args
        self._tmp = tempfile.TemporaryDirectory(prefix="sidecar-bench-")
        self._processes = processes
        self._tcp = tcp or processes > 1
        base = f"{self._tmp.name}/sidecar.sock"
        self._uds_arg = base
        self.uds = f"unix:{base}.0" if processes > 1 else f"unix:{base}"
        self.base = f"unix:{base}"
        self.tcp: str | None = None
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> BenchServer:
        log_path = Path(self._tmp.name) / "server.log"
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in __exit__
        cmd = [sys.executable, "-m", "sidecar", "serve", "--port", "0" if self._tcp else "-1", "--uds", self._uds_arg,
               *(("--processes", str(self._processes)) if self._processes > 1 else ()), *self._args]
        self._process = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, cwd=_REPO)
        try:
            self._wait_until_serving(log_path)
            if self._tcp:
                self.tcp = self._tcp_address(log_path)
        except BaseException:
            self.__exit__()
            raise
        return self

    def _tcp_address(self, log_path: Path) -> str:
        """The TCP address from the `listening` lines, once every process has written one."""
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            listening = []
            for line in log_path.read_text().splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("event") == "listening":
                    listening.append(event)
            if len(listening) >= self._processes:
                return next(a for a in listening[0]["addresses"] if not a.startswith("unix:"))
            time.sleep(0.1)
        raise RuntimeError(f"bench server: not every process listened:\n{log_path.read_text()}")

    def _wait_until_serving(self, log_path: Path) -> None:
        # Readiness from the health service, so any --log-level works.
        health = health_pb2_grpc.HealthStub(grpc.insecure_channel(self.uds))
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"bench server exited:\n{log_path.read_text()}")
            try:
                if health.Check(health_pb2.HealthCheckRequest(), timeout=1).status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"bench server did not start:\n{log_path.read_text()}")

    def __exit__(self, *exc: object) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(30)
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._log.close()
        self._tmp.cleanup()
