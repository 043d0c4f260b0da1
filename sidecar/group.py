"""What the processes of `sidecar serve --processes N` share: one small file, mapped by each, with
a slot per process (its state and the port of its own /metrics).

The parent creates it and passes its path to every process (`--group-state`). A process writes its
own slot (STARTING, then SERVING once it listens, DRAINING when asked to stop) and reads the others
for its health answers: every process answers for the group, so a health check on any socket or
connection is NOT_SERVING while any process is not serving (starting, draining, or dead and being
restarted). The parent writes DOWN into the slot of a process that has died, and reads the metrics
ports to serve one /metrics that adds the processes up (see `sidecar.group_metrics`).

Each field is an aligned 32-bit word written by one process at a time: a reader sees the old or
the new value, never a mix, which is all a health answer needs.
"""

from __future__ import annotations

import mmap
import os
import struct

STARTING, SERVING, DRAINING, DOWN = 0, 1, 2, 3
_SLOT = struct.Struct("<II")  # state, metrics port (0: none)


class GroupState:
    """The shared slots; `create` in the parent, `open` in each process."""

    def __init__(self, path: str, processes: int, memory: mmap.mmap) -> None:
        self.path = path
        self.processes = processes
        self._memory = memory

    @classmethod
    def create(cls, path: str, processes: int) -> "GroupState":
        with open(path, "wb") as f:
            f.write(b"".join(_SLOT.pack(STARTING, 0) for _ in range(processes)))
        return cls.open(path)

    @classmethod
    def open(cls, path: str) -> "GroupState":
        size = os.path.getsize(path)
        if size == 0 or size % _SLOT.size:
            raise ValueError(f"--group-state {path}: not a group state file ({size} bytes)")
        with open(path, "r+b") as f:
            memory = mmap.mmap(f.fileno(), size)
        return cls(path, size // _SLOT.size, memory)

    def state(self, index: int) -> int:
        return _SLOT.unpack_from(self._memory, index * _SLOT.size)[0]

    def set_state(self, index: int, state: int) -> None:
        struct.pack_into("<I", self._memory, index * _SLOT.size, state)

    def metrics_port(self, index: int) -> int:
        return _SLOT.unpack_from(self._memory, index * _SLOT.size)[1]

    def set_metrics_port(self, index: int, port: int) -> None:
        struct.pack_into("<I", self._memory, index * _SLOT.size + 4, port)

    def all_serving(self) -> bool:
        return all(self.state(i) == SERVING for i in range(self.processes))

    def close(self) -> None:
        self._memory.close()
