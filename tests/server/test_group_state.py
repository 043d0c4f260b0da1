"""The `--processes N` state file: a slot per process, read and written in place. A file someone
truncated (same user: the directory is 0700) reads as processes that are down, where the memory
mapping it replaced killed the reader with SIGBUS (a health check took the whole group down)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

SCENARIO = """
import os, sys
from sidecar.group import DOWN, SERVING, GroupState
path = sys.argv[1]
group = GroupState.create(path, 2)
other = GroupState.open(path)
group.set_state(0, SERVING); group.set_state(1, SERVING); group.set_metrics_port(1, 9100)
assert other.all_serving() and other.metrics_port(1) == 9100
group.set_heartbeats(1, 2**32 + 5)  # a count wraps; the slot's other words are untouched
assert (other.state_and_heartbeats(0), other.state_and_heartbeats(1), other.metrics_port(1)) == \
    ((SERVING, 0), (SERVING, 5), 9100)
os.truncate(path, 0)
assert (other.state(0), other.state_and_heartbeats(1), other.metrics_port(1), other.all_serving()) == \
    (DOWN, (DOWN, 0), 0, False)
group.set_state(0, SERVING)  # writes go on (the file grows back word by word)
assert other.state(0) == DOWN and not other.all_serving()  # slot 0 is only half there
print("ok")
"""


def test_a_truncated_state_file_reads_as_processes_down(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-c", SCENARIO, str(tmp_path / "state")], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr
