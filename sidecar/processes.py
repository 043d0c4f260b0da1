"""`sidecar serve --processes N`: N server processes, so that N cores run Python gRPC (one event
loop each), started and stopped by this process, which serves nothing itself.

- TCP: every process listens on the same port with SO_REUSEPORT and the kernel spreads new
  connections over them (a connection stays with its process). With `--port 0` this process
  reserves a free port first (bound with SO_REUSEPORT, never listening, so it takes no connection)
  and hands it to all.
- Unix socket: Linux does not spread AF_UNIX connections, so `--uds PATH` becomes one socket per
  process, `PATH.0` ... `PATH.N-1` (a client spreads its connections over them).
- `--metrics-port M`: process i serves its own metrics on M + i (0: each picks a free port); the
  counters of the N endpoints add up to the server's.
- Each process loads its own models and answers health for itself; with `--kv-events` each
  subscribes to the engines' events and keeps its own index (the same events give the same index).
- SIGTERM, SIGINT and SIGHUP are passed to every process. When one process exits, the others are
  stopped (SIGTERM, so they drain) and this one exits with the first non-zero code, if any.

Every log line of process i carries `process: i`.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from contextlib import closing, nullcontext
from typing import Sequence

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def reserve_port(host: str) -> socket.socket:
    """A socket bound to a free port with SO_REUSEPORT (so the servers can bind it too), not
    listening; keep it open until they have bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    reserved = socket.socket(family, socket.SOCK_STREAM)
    reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    reserved.bind((host if host not in ("", "[::]") else "0.0.0.0", 0))
    return reserved


def child_argv(serve_argv: Sequence[str], index: int, port: int, uds: str | None,
               metrics_port: int | None) -> list[str]:
    """The command of process `index`: the same `serve` arguments with its own listeners appended
    (argparse keeps the last value of a repeated option)."""
    argv = [sys.executable, "-m", "sidecar", "serve", *serve_argv, "--processes", "1", "--process-index", str(index),
            "--port", str(port)]
    if uds:
        argv += ["--uds", f"{uds}.{index}"]
    if metrics_port:
        argv += ["--metrics-port", str(metrics_port + index)]
    return argv


def supervise(serve_argv: Sequence[str], processes: int, host: str, port: int, uds: str | None,
              metrics_port: int | None) -> int:
    """Runs `processes` servers until one exits or a stop signal has ended them all."""
    reserved = reserve_port(host) if port == 0 else None
    if reserved is not None:
        port = reserved.getsockname()[1]
    children = [subprocess.Popen(child_argv(serve_argv, i, port, uds, metrics_port)) for i in range(processes)]

    stopping: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        if signum != signal.SIGHUP:
            stopping.append(signum)
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in _FORWARDED}
    try:
        with closing(reserved) if reserved is not None else nullcontext():
            return _wait(children, stopping)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _wait(children: list[subprocess.Popen], stopping: list[int]) -> int:
    """Waits for the first exit, stops the rest (unless a stop signal already reached them: a
    second one would cut their drain short), returns the first non-zero exit code (or 0)."""
    while all(child.poll() is None for child in children):
        time.sleep(0.1)
    if not stopping:
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
    codes = [child.wait() for child in children]
    return next((code for code in codes if code), 0)

