"""Starts the real server for a benchmark: a subprocess on a temp Unix socket, default settings."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_REPO = Path(__file__).resolve().parent.parent


class BenchServer:
    """`with BenchServer(*extra_args) as s:` -> `s.uds` is the `unix:` target."""

    def __init__(self, *args: str) -> None:
        self._args = args
        self._tmp = tempfile.TemporaryDirectory(prefix="sidecar-bench-")
        self.uds = f"unix:{self._tmp.name}/sidecar.sock"
        self._process: subprocess.Popen | None = None

    def __enter__(self) -> BenchServer:
        log_path = Path(self._tmp.name) / "server.log"
        self._log = open(log_path, "w")  # noqa: SIM115 - closed in __exit__
        cmd = [sys.executable, "-m", "sidecar", "serve", "--port", "-1", "--uds", self.uds.removeprefix("unix:"), *self._args]
        self._process = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, cwd=_REPO)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"bench server exited:\n{log_path.read_text()}")
            if any(json.loads(line).get("event") == "listening" for line in log_path.read_text().splitlines() if line.startswith("{")):
                return self
            time.sleep(0.1)
        raise RuntimeError("bench server did not start")

    def __exit__(self, *exc: object) -> None:
        if self._process and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)
            try:
                self._process.wait(30)
            except subprocess.TimeoutExpired:
                self._process.kill()
        self._log.close()
        self._tmp.cleanup()
