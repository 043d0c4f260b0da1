"""`sidecar serve --processes 2`: both processes answer on the shared TCP port (new connections are
spread by SO_REUSEPORT) and each on its own Unix socket; the parent's one /metrics adds them up;
health on either socket answers for the group (NOT_SERVING while a killed process is being
restarted, SERVING once it is back), except `sidecar.process`, which answers for the process
alone; SIGTERM to the parent stops both, which remove their sockets, and the parent exits 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

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


def health(address: str, service: str = "") -> int:
    with grpc.insecure_channel(address) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=service), timeout=30).status


def wait_for(condition, what: str, log_path: Path, seconds: float = 120) -> None:  # noqa: ANN001
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"{what}:\n{log_path.read_text()[-4000:]}"
        time.sleep(0.05)


def metrics_text(metrics_address: str) -> str:
    with urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=30) as response:
        return response.read().decode()


def family_headers(text: str) -> dict[str, list[str]]:
    """The HELP and TYPE lines of an exposition by family name, `_created` families left out."""
    families: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.startswith(("# HELP ", "# TYPE ")) and not (name := line.split(" ", 3)[2]).endswith("_created"):
            families.setdefault(name, []).append(line)
    return families


def tokenize_total(metrics_address: str) -> float:
    text = metrics_text(metrics_address)
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == "sidecar_requests_total" and sample.labels == {"rpc": "Tokenize", "code": "OK"})


def wait_restarted(log_path: Path, index: int) -> None:
    """Waits until process `index` has announced it listens a second time (restarted once)."""
    wait_for(lambda: sum(e.get("event") == "listening" and e.get("process") == index for e in log_events(log_path)) == 2,
             f"process {index} was not restarted", log_path)


def child_pid(parent: int, index: int) -> int:
    for pid in Path(f"/proc/{parent}/task/{parent}/children").read_text().split():
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        if argv[argv.index(b"--process-index") + 1] == str(index).encode():
            return int(pid)
    raise AssertionError(f"no process {index}")


def test_processes_share_the_port_and_each_has_its_socket(tmp_path: Path) -> None:
    uds = tmp_path / "sidecar.sock"
    log_path = tmp_path / "server.log"
    with open(log_path, "w") as log:
        parent = subprocess.Popen([sys.executable, "-m", "sidecar", "serve", "--processes", str(PROCESSES), "--port", "0",
                                   "--uds", str(uds), "--metrics-port", "0"], stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
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
        # One /metrics adds the processes up: every Tokenize above, whichever process answered it.
        (metrics,) = [e["address"] for e in log_events(log_path) if e.get("event") == "metrics_listening"]
        assert tokenize_total(metrics) == 1 + PROCESSES + CONNECTIONS
        # ... and writes each family as a process's own endpoint does (`# TYPE sidecar_requests_total
        # counter`, not `sidecar_requests`), without the `_created` families.
        # A process's own endpoint is named as such, so that nobody scrapes one process for the sum;
        # the plain-text lines name the group's.
        assert all("metrics_port" not in e for e in listening)
        assert f"metrics of the {PROCESSES} processes on {metrics}/metrics" in log_path.read_text()
        assert "/metrics" not in "".join(line for line in log_path.read_text().splitlines() if "sidecar: serving" in line)
        group, own = metrics_text(metrics), metrics_text(f"127.0.0.1:{listening[0]['process_metrics_port']}")
        assert "_created" not in group
        group_families = family_headers(group)
        for name, lines in family_headers(own).items():
            assert group_families.pop(name) == lines, name
        assert set(group_families) == {"sidecar_processes_scraped", "sidecar_processes_unscraped"}

        # Health is the group's: process 1 killed, process 0 answers NOT_SERVING until 1 is back.
        assert health(f"unix:{uds}.0") == health_pb2.HealthCheckResponse.SERVING
        os.kill(child_pid(parent.pid, 1), signal.SIGKILL)
        wait_for(lambda: health(f"unix:{uds}.0") == health_pb2.HealthCheckResponse.NOT_SERVING,
                 "process 0 did not report its dead sibling", log_path)
        # ... while its own health (what a client probing each process asks) stays SERVING.
        assert health(f"unix:{uds}.0", "sidecar.process") == health_pb2.HealthCheckResponse.SERVING
        wait_restarted(log_path, 1)
        wait_for(lambda: health(f"unix:{uds}.0") == health_pb2.HealthCheckResponse.SERVING,
                 "the group did not turn SERVING again", log_path)
        assert tokenize(f"unix:{uds}.1", "one process per core") == expected
        assert any(e.get("event") == "process_restarted" and e.get("restarted") == 1 for e in log_events(log_path))
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(60) == 0
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    stopped = [e for e in log_events(log_path) if e.get("event") == "stopped"]
    assert sorted(e["process"] for e in stopped) == list(range(PROCESSES))
    assert not any(Path(f"{uds}.{i}").exists() for i in range(PROCESSES))


def start_group(tmp_path: Path, *extra: str, log_name: str = "server.log") -> tuple[subprocess.Popen, Path, Path]:
    """`serve --processes 2 --port 0 --uds <tmp>/sidecar.sock` plus `extra`, logging to a file;
    returns (parent, socket base path, log path) once every process listens."""
    uds = tmp_path / "sidecar.sock"
    log_path = tmp_path / log_name
    with open(log_path, "w") as log:
        parent = subprocess.Popen([sys.executable, "-m", "sidecar", "serve", "--processes", str(PROCESSES), "--port", "0",
                                   "--uds", str(uds), *extra], stdout=log, stderr=subprocess.STDOUT, cwd=REPO)
    wait_for(lambda: parent.poll() is not None or listened(log_path) == set(range(PROCESSES)),
             "not every process listened", log_path)
    assert parent.poll() is None, log_path.read_text()
    return parent, uds, log_path


def listened(log_path: Path) -> set[int]:
    return {e["process"] for e in log_events(log_path) if e.get("event") == "listening"}


def listenings(log_path: Path, index: int) -> int:
    return sum(e.get("event") == "listening" and e.get("process") == index for e in log_events(log_path))


def new_child_pid(parent: int, index: int, old: int) -> int | None:
    """The pid of process `index` if it is a new one (not `old`), else None (not started yet, or a
    dead one not reaped: its cmdline is empty)."""
    try:
        pid = child_pid(parent, index)
    except (AssertionError, ValueError, OSError):
        return None
    return pid if pid != old else None


def kill_process_1_twice(parent: subprocess.Popen, log_path: Path) -> None:
    """Kills process 1, then kills it again once the parent has started it anew (while it starts)."""
    first = child_pid(parent.pid, 1)
    os.kill(first, signal.SIGKILL)
    pids: list[int] = []
    wait_for(lambda: bool(pids.append(new_child_pid(parent.pid, 1, first)) or pids[-1]),
             "process 1 was not started again", log_path)
    os.kill(pids[-1], signal.SIGKILL)


def signal_if_alive(pids: list[int], signum: int = signal.SIGKILL) -> None:
    """Sends `signum` to each of `pids` still running (cleanup after a test that may have failed)."""
    for pid in pids:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def stop(parent: subprocess.Popen) -> None:
    if parent.poll() is None:
        parent.kill()
        parent.wait()


def test_a_process_killed_while_it_restarts_is_restarted_again(tmp_path: Path) -> None:
    """Only a process's first start, with the server, decides whether the server starts: a process
    killed again while it is being restarted (its slot is back at STARTING) must be restarted once
    more, not read as a failed start that stops every process (a crash on a restart is no sign the
    arguments or models are bad: they served before)."""
    parent, uds, log_path = start_group(tmp_path)
    try:
        kill_process_1_twice(parent, log_path)
        # Killed while starting: it had not announced it listens.
        assert listenings(log_path, 1) == 1, log_path.read_text()

        wait_for(lambda: parent.poll() is not None or listenings(log_path, 1) == 2,
                 "process 1 was not restarted after its second death", log_path)
        assert parent.poll() is None, f"the server stopped:\n{log_path.read_text()[-4000:]}"
        wait_for(lambda: health(f"unix:{uds}.0") == health_pb2.HealthCheckResponse.SERVING,
                 "the group did not turn SERVING again", log_path)
        exits = [e for e in log_events(log_path) if e.get("event") == "process_exited" and e.get("exited") == 1]
        assert [e["served"] for e in exits] == [True, False], exits
        assert not any(e.get("event") == "process_failed_to_start" for e in log_events(log_path))
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(60) == 0
    finally:
        stop(parent)


def test_an_admin_reload_on_one_process_reloads_every_process(tmp_path: Path) -> None:
    """`Admin.ReloadModels` reaches the process that answers it; that process then asks the parent
    for the SIGHUP every process takes, so no process keeps serving the old template."""
    from sidecar.v1 import admin_pb2, admin_pb2_grpc
    from tests.server.test_reload import copy_embedded_model, replace_file

    model = copy_embedded_model(tmp_path / "model")
    parent, uds, log_path = start_group(tmp_path, "--model", f"m={model}", "--enable-admin")
    try:
        def fingerprint(index: int) -> str:
            with grpc.insecure_channel(f"unix:{uds}.{index}") as channel:
                (m,) = pb_grpc.PreprocessorStub(channel).ListModels(pb.ListModelsRequest(), timeout=30).models
            return m.fingerprint

        before = fingerprint(1)
        replace_file(model / "chat_template.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}")
        with grpc.insecure_channel(f"unix:{uds}.0") as channel:
            answer = admin_pb2_grpc.AdminStub(channel).ReloadModels(admin_pb2.ReloadModelsRequest(), timeout=120)
        (reloaded,) = answer.models
        assert reloaded.outcome == admin_pb2.ModelReload.OUTCOME_RELOADED and reloaded.fingerprint != before
        assert fingerprint(0) == reloaded.fingerprint
        wait_for(lambda: fingerprint(1) == reloaded.fingerprint, "process 1 kept the old template", log_path)
    finally:
        stop(parent)


def test_processes_stop_when_the_parent_dies(tmp_path: Path) -> None:
    """The parent killed outright (SIGKILL: it passes nothing on) must not leave its processes
    running orphaned, holding the Unix sockets and the port, so that the server started again in
    its place fails (`another server is already listening`): each process drains as on SIGTERM,
    removes its socket, and a new server on the same socket path starts."""
    parent, uds, log_path = start_group(tmp_path)
    children = [child_pid(parent.pid, i) for i in range(PROCESSES)]
    again = None
    try:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        wait_for(lambda: {e["process"] for e in log_events(log_path) if e.get("event") == "stopped"} == set(range(PROCESSES)),
                 "the processes did not stop with their parent", log_path, seconds=60)
        wait_for(lambda: not any(Path(f"{uds}.{i}").exists() for i in range(PROCESSES)),
                 "the processes did not remove their sockets", log_path)
        again, _, again_log = start_group(tmp_path, log_name="again.log")
        assert tokenize(f"unix:{uds}.1", "started again in its place")
        again.send_signal(signal.SIGTERM)
        assert again.wait(60) == 0, again_log.read_text()
    finally:
        stop(parent)
        if again is not None:
            stop(again)
        signal_if_alive(children)  # orphans left by a failure


def test_a_process_that_does_not_stop_is_killed(tmp_path: Path) -> None:
    """After SIGTERM the parent waits for its processes only as long as they may drain (plus a
    margin), then kills what is left: a hung process (here a stopped one) must not keep the server
    from exiting forever. The parent removes the killed process's socket (it could not) and exits
    with a non-zero code; the other process drains as usual."""
    parent, uds, log_path = start_group(tmp_path, "--drain-seconds", "0")
    hung = child_pid(parent.pid, 1)
    try:
        os.kill(hung, signal.SIGSTOP)
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(60) != 0
        killed = [e for e in log_events(log_path) if e.get("event") == "process_killed"]
        assert [e["killed"] for e in killed] == [1], log_path.read_text()
        assert [e["process"] for e in log_events(log_path) if e.get("event") == "stopped"] == [0]
        assert not any(Path(f"{uds}.{i}").exists() for i in range(PROCESSES))
    finally:
        stop(parent)
        signal_if_alive([hung])


def test_a_serving_process_whose_loop_stops_is_killed_and_restarted(tmp_path: Path) -> None:
    """A process whose event loop stops turning (here stopped outright) still says SERVING in its
    slot and still gets connections from the kernel, but answers nothing: once its heartbeat has not
    moved for --liveness-timeout-s the parent kills it and restarts it like any process that died
    after serving, and the group serves again. The process whose loop runs is left alone."""
    parent, uds, log_path = start_group(tmp_path, "--liveness-timeout-s", "3")
    hung = child_pid(parent.pid, 1)
    try:
        os.kill(hung, signal.SIGSTOP)
        wait_restarted(log_path, 1)
        unresponsive = [e for e in log_events(log_path) if e.get("event") == "process_unresponsive"]
        assert [e["unresponsive"] for e in unresponsive] == [1], unresponsive
        assert unresponsive[0]["silent_s"] >= 3, unresponsive
        (exited,) = [e for e in log_events(log_path) if e.get("event") == "process_exited"]
        assert (exited["exited"], exited["exit_code"], exited["served"]) == (1, -signal.SIGKILL, True), exited
        wait_for(lambda: health(f"unix:{uds}.0") == health_pb2.HealthCheckResponse.SERVING,
                 "the group did not turn SERVING again", log_path)
        assert tokenize(f"unix:{uds}.1", "served again")
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(60) == 0, log_path.read_text()[-4000:]
    finally:
        stop(parent)
        signal_if_alive([hung])


def test_a_pause_of_the_whole_group_kills_nothing(tmp_path: Path) -> None:
    """When the parent was frozen with its processes (a VM paused, a host swapping; here all
    SIGSTOPped for longer than the liveness timeout), the heartbeats' silence is the parent's own:
    resumed first, it must not kill the processes for it."""
    parent, uds, log_path = start_group(tmp_path, "--liveness-timeout-s", "3")
    children = [child_pid(parent.pid, i) for i in range(PROCESSES)]
    try:
        for pid in [parent.pid, *children]:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(5)
        os.kill(parent.pid, signal.SIGCONT)
        time.sleep(0.5)  # the parent looks at heartbeats that have not moved for 5.5 s
        for pid in children:
            os.kill(pid, signal.SIGCONT)
        time.sleep(4)
        assert not [e for e in log_events(log_path) if e.get("event") in ("process_unresponsive", "process_exited")]
        assert health(f"unix:{uds}.0") == health_pb2.HealthCheckResponse.SERVING
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(60) == 0, log_path.read_text()[-4000:]
    finally:
        signal_if_alive([parent.pid, *children], signal.SIGCONT)
        stop(parent)


def test_a_stop_while_a_process_waits_to_restart_exits_0_and_removes_its_socket(tmp_path: Path) -> None:
    """SIGTERM while process 1 waits in its restart backoff (killed, then killed again while it
    restarted: the next start is 2 s after the previous one): the stop was asked for, so the parent
    exits 0 (it returned the earlier crash's -9 as 247), does not start process 1 again, and removes
    the socket file process 1 left when it was killed (nobody listens on it)."""
    parent, uds, log_path = start_group(tmp_path)
    try:
        kill_process_1_twice(parent, log_path)
        wait_for(lambda: sum(e.get("event") == "process_exited" and e.get("exited") == 1 for e in log_events(log_path)) == 2,
                 "the second death of process 1 was not seen", log_path)
        (backoff,) = [e for e in log_events(log_path) if e.get("event") == "process_exited" and e.get("crashes") == 1]
        assert backoff["restart_in_s"] > 0, backoff
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(60) == 0, log_path.read_text()[-4000:]
        restarts = [e for e in log_events(log_path) if e.get("event") == "process_restarted"]
        assert len(restarts) == 1, restarts  # the first restart only, none after the stop
        assert [e["process"] for e in log_events(log_path) if e.get("event") == "stopped"] == [0]
        assert not any(Path(f"{uds}.{i}").exists() for i in range(PROCESSES))
    finally:
        stop(parent)


def test_a_stop_just_after_a_restart_exits_0(tmp_path: Path) -> None:
    """SIGTERM right after process 1 was restarted reaches it before it has installed its handlers,
    so the default action kills it (-15): that is the stop asked for, not a failure (the parent
    exited 241)."""
    parent, uds, log_path = start_group(tmp_path)
    try:
        first = child_pid(parent.pid, 1)
        os.kill(first, signal.SIGKILL)
        wait_for(lambda: new_child_pid(parent.pid, 1, first) is not None, "process 1 was not started again", log_path)
        parent.send_signal(signal.SIGTERM)
        assert parent.wait(60) == 0, log_path.read_text()[-4000:]
        assert not any(Path(f"{uds}.{i}").exists() for i in range(PROCESSES))
    finally:
        stop(parent)


def test_a_stop_that_comes_while_a_process_is_started_reaches_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stop signal arrives while a restart is in Popen, before the new process is stored: the
    forwarded signals are blocked around Popen and the list update, so the handler runs after and
    passes SIGTERM to the new process too (it iterated the list without it: the new process got
    nothing and was SIGKILLed after the stop timeout)."""
    from sidecar import processes
    from sidecar.group import GroupState

    group = GroupState.create(str(tmp_path / "state"), 1)
    # A stand-in server process: unblocks the signals as a real one does first thing, then waits.
    sleeper = [sys.executable, "-c", "import os, time\nfrom sidecar.processes import die_with_supervisor\n"
               "die_with_supervisor(os.getppid())\ntime.sleep(120)\n"]
    fleet = processes._Fleet([sleeper], group, 30.0, None)
    previous = signal.signal(signal.SIGTERM, fleet.forward)
    try:
        # Process 0 has died and waits to be restarted.
        fleet.children.append(subprocess.Popen(sleeper, cwd=REPO))
        fleet.started.append(0.0)
        fleet.first_start.append(False)
        fleet.crashes.append(0)
        fleet.restart_at.append(0.0)
        fleet.children[0].kill()
        fleet.children[0].wait()
        popen = subprocess.Popen

        def popen_then_stop(*args, **kwargs) -> subprocess.Popen:  # noqa: ANN002, ANN003
            child = popen(*args, **kwargs, cwd=REPO)
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # the stop, before the child is stored
            return child

        monkeypatch.setattr(processes.subprocess, "Popen", popen_then_stop)
        fleet._restart(0)
        assert fleet.stopping == [signal.SIGTERM]
        assert fleet.children[0].wait(30) == -signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)
        for child in fleet.children:
            if child.poll() is None:
                child.kill()
                child.wait()
        group.close()
