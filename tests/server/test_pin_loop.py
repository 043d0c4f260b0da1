"""`--pin-loop-cpu`: the event loop and gRPC's threads on one CPU, native workers on all of them.

Why it exists is a measurement (docs/benchmarks.md: thread wake-ups across CPUs cost the Multiplex
stream more than its work); what is tested here is what the flag promises about threads.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest

from sidecar.v1 import preprocessor_pb2 as pb
from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc
from tests.conftest import REPO, start_server, stop_server

pytestmark = pytest.mark.e2e


def _cpus_of_threads(pid: int) -> dict[int, str]:
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        for line in (task / "status").read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                out[int(task.name)] = line.split(":", 1)[1].strip()
    return out


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs at least 2 CPUs to tell pinned from free")
def test_loop_and_grpc_threads_pinned_workers_free(tmp_path: Path) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    live = start_server(tmp_path, "--pin-loop-cpu", str(allowed[-1]), "--workers", "2")
    try:
        stub = pb_grpc.PreprocessorStub(grpc.insecure_channel(live.uds))
        before = _cpus_of_threads(live.process.pid)
        assert before[live.process.pid] == str(allowed[-1]), before
        # Every thread that exists once the server listens (gRPC's among them) is on that CPU.
        assert set(before.values()) == {str(allowed[-1])}, before
        # A call above the inline bound starts a native worker, which runs on every allowed CPU.
        stub.Tokenize(pb.TokenizeRequest(model="qwen3", texts=["word " * 20_000]), timeout=60)
        after = _cpus_of_threads(live.process.pid)
        free = [tid for tid, cpus in after.items() if tid not in before and cpus != str(allowed[-1])]
        assert free, after
    finally:
        stop_server(live)


def test_a_cpu_the_process_may_not_use_is_refused_naming_the_flag() -> None:
    bad = max(os.sched_getaffinity(0)) + 1000
    done = subprocess.run([sys.executable, "-m", "sidecar", "serve", "--port", "0", "--pin-loop-cpu", str(bad)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done
    assert f"--pin-loop-cpu: CPU {bad}" in done.stderr, done.stderr
