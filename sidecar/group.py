"""What the processes of `sidecar serve --processes N` share: one small file, read and written in
place by each (`pread`/`pwrite`), with a slot per process (its state and the port of its own
/metrics).

The parent creates it and passes its path to every process (`--group-state`). A process writes its
own slot (STARTING, then SERVING once it listens, DRAINING when asked to stop, and a heartbeat count
its event loop raises every `HEARTBEAT_SECONDS`) and reads the others for its health answers: every process answers for the group, so a health check on any socket or
connection is NOT_SERVING while any process is not serving (starting, draining, or dead and being
restarted). The parent writes DOWN into the slot of a process that has died, reads the metrics
ports to serve one /metrics that adds the processes up (see `sidecar.group_metrics`), and kills a
serving process whose heartbeat stopped (a hung or stopped event loop; `sidecar.processes`).

Each field is an aligned 32-bit word written by one process at a time: a reader sees the old or
the new value, never a mix, which is all a health answer needs. The file is not memory-mapped: a
mapping of a file someone truncated kills the reader with SIGBUS (it took a whole group down);
a short read is a slot that says DOWN instead.
"""

from __future__ import annotations

import os
import struct

STARTING, SERVING, DRAINING, DOWN = 0, 1, 2, 3
_SLOT = struct.Struct("<III")  # state, metrics port (0: none), heartbeats
#: How often a serving process's event loop raises its heartbeat count.
HEARTBEAT_SECONDS = 1.0


class GroupState:
    """The shared slots; `create` in the parent, `open` in each process."""

    def __init__(self, path: str, processes: int, fd: int) -> None:
        self.path = path
        self.processes = processes
        self._fd = fd

    @classmethod
    def create(cls, path: str, processes: int) -> "GroupState":
        with open(path, "wb") as f:
            f.write(b"".join(_SLOT.pack(STARTING, 0, 0) for _ in range(processes)))
        return cls.open(path)

    @classmethod
    def open(cls, path: str) -> "GroupState":
        size = os.path.getsize(path)
        if size == 0 or size % _SLOT.size:
            raise ValueError(f"--group-state {path}: not a group state file ({size} bytes)")
        return cls(path, size // _SLOT.size, os.open(path, os.O_RDWR))

    def _slot(self, index: int) -> tuple[int, int, int]:
        data = os.pread(self._fd, _SLOT.size, index * _SLOT.size)
        return _SLOT.unpack(data) if len(data) == _SLOT.size else (DOWN, 0, 0)

    def state(self, index: int) -> int:
        return self._slot(index)[0]

    def set_state(self, index: int, state: int) -> None:
        os.pwrite(self._fd, struct.pack("<I", state), index * _SLOT.size)

    def metrics_port(self, index: int) -> int:
        return self._slot(index)[1]

    def set_metrics_port(self, index: int, port: int) -> None:
        os.pwrite(self._fd, struct.pack("<I", port), index * _SLOT.size + 4)

    def state_and_heartbeats(self, index: int) -> tuple[int, int]:
        """Both from one read of the slot."""
        state, _, count = self._slot(index)
        return state, count

    def set_heartbeats(self, index: int, count: int) -> None:
        os.pwrite(self._fd, struct.pack("<I", count % 2**32), index * _SLOT.size + 8)

    def all_serving(self) -> bool:
        return all(self.state(i) == SERVING for i in range(self.processes))

    def close(self) -> None:
        os.close(self._fd)
