"""`sidecar serve --processes N`: N server processes, so that N cores run Python gRPC (one event
loop each), started, supervised and stopped by this process, which serves no RPC itself.

- TCP: every process listens on the same port with SO_REUSEPORT and the kernel spreads new
  connections over them (a connection stays with its process). With `--port 0` this process
  reserves a free port first (bound with SO_REUSEPORT, never listening, so it takes no connection)
  and hands it to all.
- Unix socket: Linux does not spread AF_UNIX connections, so `--uds PATH` becomes one socket per
  process, `PATH.0` ... `PATH.N-1`. A client spreads its connections over them: the Rust client
  (`router_adapter/rust`) given `unix:PATH` finds every `PATH.<digits>` and keeps one channel per
  process (docs/operations.md).
- Health is one view: every process answers for the group (sidecar.group), NOT_SERVING while any
  process is starting, draining, or dead and being restarted.
- `--metrics-port M`: this process serves one /metrics on M that adds up the processes' own
  endpoints (each on a free loopback port; sidecar.group_metrics).
- Each process loads its own models; with `--kv-events` each subscribes to the engines' events and
  keeps its own index (the same events give the same index; docs/operations.md). A restarted
  process asks each engine's replay endpoint for the batches it still holds, from the first.
- A process that dies after it was serving is started again (at most once per
  `RESTART_INTERVAL_S`); one that dies again while restarting is started again after twice the
  previous wait, up to `MAX_RESTART_DELAY_S`. Only a process's first start (with the server)
  decides whether the server starts: one that exits then, before it ever served (bad arguments, a
  model that does not load), stops the server: the others are stopped and this process exits with
  its code.
- A serving process whose event loop stops turning (its heartbeat count in the state file unchanged
  for `--liveness-timeout-s`: a loop stuck in a call, a deadlock, a SIGSTOP) answers nothing while
  its slot still says SERVING and the kernel keeps giving it connections: it is killed (SIGKILL,
  logged `process_unresponsive`) and restarted as a process that died after serving.
- SIGTERM, SIGINT and SIGHUP are passed to every process; after SIGTERM or SIGINT nothing is
  restarted and this process exits once all have: 0 unless a process that was running when the
  stop came failed to stop cleanly (the first such code). Deaths from before the stop (a process
  waiting to be restarted) and a process killed by the passed-on signal itself (one just restarted,
  before its handlers were installed) do not count. A process still running `--drain-seconds` +
  `STOP_MARGIN_S` after the signal is killed (SIGKILL) and counts. Afterwards every process's socket
  file that is left and that nobody listens on is removed.
- The passed-on signals are blocked while a process is started and stored, so a stop that comes
  meanwhile reaches the new process too (the processes unblock them first thing).
- If this process dies (even by SIGKILL), Linux sends every process SIGTERM (PR_SET_PDEATHSIG):
  they drain and remove their sockets rather than live on orphaned, holding the listeners.

Every log line of process i carries `process: i`.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import closing, nullcontext
from typing import Sequence

from sidecar import group_metrics
from sidecar.group import DOWN, SERVING, STARTING, GroupState
from sidecar.logs import get_logger

_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
#: A process is not started again sooner than this after its previous start (no busy crash loop).
RESTART_INTERVAL_S = 1.0
#: The longest wait before starting again a process that keeps dying before it serves.
MAX_RESTART_DELAY_S = 30.0
#: After a stop, how much longer than the drain a process may take to exit before it is killed:
#: one asked to stop while it loads its models drains once they are loaded.
STOP_MARGIN_S = 10.0
#: A gap longer than this between two looks at the heartbeats (normally 0.1 s apart) means this
#: process did not run meanwhile: the heartbeats' silence is not counted against the processes.
LOOK_GAP_S = 2.0
_log = get_logger("sidecar.processes")
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def reserve_port(host: str) -> socket.socket:
    """A socket bound to a free port with SO_REUSEPORT (so the servers can bind it too), not
    listening; keep it open until they have bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    reserved = socket.socket(family, socket.SOCK_STREAM)
    reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    reserved.bind((host if host not in ("", "[::]") else "0.0.0.0", 0))
    return reserved


def child_argv(serve_argv: Sequence[str], index: int, port: int, uds: str | None,
               metrics_port: int | None, group_state: str) -> list[str]:
    """The command of process `index`: the same `serve` arguments with its own listeners appended
    (argparse keeps the last value of a repeated option)."""
    argv = [sys.executable, "-m", "sidecar", "serve", *serve_argv, "--processes", "1", "--process-index", str(index),
            "--port", str(port), "--group-state", group_state, "--supervisor-pid", str(os.getpid())]
    if uds:
        argv += ["--uds", f"{uds}.{index}"]
    if metrics_port is not None:
        # Its own endpoint, on loopback, for this process to add up.
        argv += ["--metrics-port", "0", "--metrics-host", "127.0.0.1"]
    return argv


def die_with_supervisor(supervisor_pid: int) -> bool:
    """In a server process, first thing: asks Linux to send it SIGTERM when the supervisor dies,
    even by SIGKILL, so that it drains and removes its socket as on a stop instead of living on
    orphaned, holding the listeners a server started in its place needs. Returns False when the
    supervisor is already gone (it died before the request was made: the process must exit).
    Also unblocks the signals the supervisor blocks while it starts a process (inherited)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _FORWARDED)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            _log.warning("parent_death_signal_unavailable", errno=ctypes.get_errno())
    except (OSError, AttributeError):  # not Linux
        _log.warning("parent_death_signal_unavailable")
    if os.getppid() != supervisor_pid:
        _log.error("supervisor_gone", supervisor_pid=supervisor_pid)
        return False
    return True


def supervise(serve_argv: Sequence[str], processes: int, host: str, port: int, uds: str | None,
              metrics_port: int | None, metrics_host: str = "127.0.0.1", drain_seconds: float = 10.0,
              liveness_timeout_s: float = 0.0) -> int:
    """Runs `processes` servers until a stop signal has ended them all, or one fails to start;
    2 (before any starts) when the --metrics-port listener cannot be made."""
    reserved = reserve_port(host) if port == 0 else None
    if reserved is not None:
        port = reserved.getsockname()[1]
    state_dir = tempfile.mkdtemp(prefix="sidecar-group-")
    group = GroupState.create(os.path.join(state_dir, "state"), processes)
    metrics_server = None
    try:
        if metrics_port is not None:
            # Its threads (and theirs) inherit the passed-on signals blocked, so those always reach
            # the main thread, which blocks them while it starts a process (_Fleet._spawn).
            unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
            try:
                metrics_server = group_metrics.serve(group, metrics_host, metrics_port)
            except OSError as e:  # in use, an address not of this host: as one process says it
                print(f"sidecar: --metrics-host/--metrics-port {metrics_host}:{metrics_port}: {e.strerror}",
                      file=sys.stderr, flush=True)
                return 2
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)
            address = f"{metrics_host}:{metrics_server.server_address[1]}"
            _log.info("metrics_listening", address=address)
            print(f"sidecar: metrics of the {processes} processes on {address}/metrics", file=sys.stderr, flush=True)
        argv = [child_argv(serve_argv, i, port, uds, metrics_port, group.path) for i in range(processes)]
        fleet = _Fleet(argv, group, drain_seconds + STOP_MARGIN_S, uds, liveness_timeout_s)
        previous = {s: signal.signal(s, fleet.forward) for s in _FORWARDED}
        try:
            with closing(reserved) if reserved is not None else nullcontext():
                return fleet.run()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
    finally:
        if metrics_server is not None:
            metrics_server.shutdown()
        group.close()
        shutil.rmtree(state_dir, ignore_errors=True)


class _Fleet:
    """The processes, their restarts, and the signals passed on to them."""

    def __init__(self, argv: list[list[str]], group: GroupState, stop_timeout: float, uds: str | None,
                 liveness_timeout: float = 0.0) -> None:
        self.argv = argv
        self.group = group
        #: Seconds the processes get to exit after a stop before they are killed.
        self.stop_timeout = stop_timeout
        self.uds = uds
        #: Seconds a serving process's heartbeat may stay unchanged before it is killed (0: never).
        self.liveness_timeout = liveness_timeout
        #: Per process: its last heartbeat count seen while serving, and when it was first seen.
        self.heartbeats: dict[int, tuple[int, float]] = {}
        #: When this process last looked at the heartbeats (see `_check_alive`).
        self.last_look = time.monotonic()
        self.children: list[subprocess.Popen] = []
        self.started: list[float] = []
        #: Per process: whether it is on its first start, the one that decides whether the server starts.
        self.first_start: list[bool] = []
        #: Per process: deaths in a row without having served since, and when the next start is due
        #: (None while it runs).
        self.crashes: list[int] = []
        self.restart_at: list[float | None] = []
        self.stopping: list[int] = []
        #: The processes that were running when the stop signal came and were passed it: only
        #: their exit codes count.
        self.signalled: set[int] = set()

    def start(self, index: int, restart: bool = False) -> subprocess.Popen:
        # Always from the main thread: the children's parent-death signal fires when the thread
        # that started them ends, not the process (die_with_supervisor).
        self.group.set_metrics_port(index, 0)
        self.group.set_state(index, STARTING)
        # A restarted process asks the engines for the KV events its siblings have already seen.
        return subprocess.Popen(self.argv[index] + (["--kv-replay-history"] if restart else []))

    def forward(self, signum: int, _frame: object) -> None:
        if signum != signal.SIGHUP:
            self.stopping.append(signum)
        for i, child in enumerate(self.children):
            if child.poll() is None:
                child.send_signal(signum)
                if signum != signal.SIGHUP:
                    self.signalled.add(i)

    def _spawn(self, index: int, restart: bool) -> None:
        """Starts process `index` and stores it with the passed-on signals blocked, so that a stop
        that comes meanwhile is passed on (on unblocking) to the new process too, not only to the
        list without it."""
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, _FORWARDED)
        try:
            if self.stopping:  # the stop came before the signals were blocked: nothing more starts
                return
            child = self.start(index, restart=restart)
            if restart:
                self.children[index] = child
                self.started[index] = time.monotonic()
                self.restart_at[index] = None
            else:
                self.children.append(child)
                self.started.append(time.monotonic())
                self.first_start.append(True)
                self.crashes.append(0)
                self.restart_at.append(None)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    def run(self) -> int:
        """Supervises until every process has exited after a stop signal (or a failed start);
        returns the first non-zero exit code, or 0."""
        for i in range(len(self.argv)):
            self._spawn(i, restart=False)
            if self.stopping:
                break
        while True:
            if self.stopping:
                return self._stop()
            self._heartbeats_seen_lately()
            for i, child in enumerate(self.children):
                code = child.poll()
                if self.stopping:
                    break  # no restart, nor failed start, once the stop has come
                if code is None:
                    self._check_alive(i)
                    continue
                if self.restart_at[i] is None:  # a death not seen before
                    served = self.group.state(i) != STARTING
                    self.group.set_state(i, DOWN)
                    if not served and self.first_start[i]:
                        return self._stop_after_failed_start(i, code)
                    self._schedule_restart(i, code, served)
                elif time.monotonic() >= self.restart_at[i]:
                    self._restart(i)
            time.sleep(0.1)

    def _heartbeats_seen_lately(self) -> None:
        """Forgets when the heartbeats last moved if this process has not looked for a while (it was
        stopped, or the whole machine paused: a VM migrated, a host under swap): the processes
        were frozen with it, and their silence is this process's own."""
        now = time.monotonic()
        if now - self.last_look > LOOK_GAP_S:
            self.heartbeats.clear()
        self.last_look = now

    def _check_alive(self, index: int) -> None:
        """Kills process `index` (the next poll restarts it) when it has served without raising its
        heartbeat for `liveness_timeout` seconds. Counted on this process's clock from the first
        time a count was seen, so a process that just turned SERVING gets the whole timeout."""
        if not self.liveness_timeout:
            return
        state, count = self.group.state_and_heartbeats(index)
        if state != SERVING:
            self.heartbeats.pop(index, None)
            return
        now = time.monotonic()
        seen = self.heartbeats.get(index)
        if seen is None or seen[0] != count:
            self.heartbeats[index] = (count, now)
        elif now - seen[1] > self.liveness_timeout:
            _log.error("process_unresponsive", unresponsive=index, silent_s=round(now - seen[1], 1))
            self.heartbeats.pop(index)
            self.children[index].kill()

    def _schedule_restart(self, index: int, code: int, served: bool) -> None:
        """A process that served is started again RESTART_INTERVAL_S after its previous start; one
        that died again before serving waits twice as long each time (up to MAX_RESTART_DELAY_S), so
        a crash loop costs a start every half minute, not a core."""
        self.first_start[index] = False
        self.crashes[index] = 0 if served else self.crashes[index] + 1
        delay = min(RESTART_INTERVAL_S * 2 ** self.crashes[index], MAX_RESTART_DELAY_S)
        self.restart_at[index] = max(time.monotonic(), self.started[index] + delay)
        _log.warning("process_exited", exited=index, exit_code=code, served=served, crashes=self.crashes[index],
                     restart_in_s=round(self.restart_at[index] - time.monotonic(), 3))

    def _restart(self, index: int) -> None:
        _log.warning("process_restarted", restarted=index, exit_code=self.children[index].returncode)
        self._spawn(index, restart=True)

    def _stop(self) -> int:
        """After SIGTERM or SIGINT: waits for the processes, then returns 0 unless one that was
        running at the stop failed to stop cleanly. Not counted: the old code of a process waiting
        to be restarted, and death by the stop signal itself (a process killed before it had
        installed its handlers, e.g. one restarted just before)."""
        codes = self._wait_all()
        for i, code in enumerate(codes):
            if i not in self.signalled or code is None or -code in self.stopping:
                continue
            if code:
                return code
        return 0

    def _stop_after_failed_start(self, index: int, code: int) -> int:
        _log.error("process_failed_to_start", failed=index, exit_code=code)
        for child in self.children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        self._wait_all()
        return code or 1

    def _wait_all(self) -> list[int]:
        """The exit codes of all processes, once they have exited after a stop; one still running
        `stop_timeout` seconds later is hung (a drain ends on its own): it is killed. Then every
        process's socket file that is left (a killed process cannot remove it; one dead before the
        stop, or killed by the stop signal, did not) is removed if nobody listens on it."""
        deadline = time.monotonic() + self.stop_timeout
        codes = []
        for i, child in enumerate(self.children):
            try:
                codes.append(child.wait(max(0.0, deadline - time.monotonic())))
                continue
            except subprocess.TimeoutExpired:
                pass
            _log.error("process_killed", killed=i, waited_s=self.stop_timeout)
            child.kill()
            codes.append(child.wait())
        if self.uds:
            from sidecar.errors import FailedPrecondition
            from sidecar.listeners import prepare_unix_socket  # imports grpc: only here

            for i in range(len(self.children)):
                try:
                    prepare_unix_socket(f"{self.uds}.{i}")
                except (FailedPrecondition, OSError):
                    pass  # not a socket, or somebody else's live one: not ours to remove
        return codes
