"""`Handle`: an owned native handle that is never freed while a call is using it.

A handle is used by calls in flight on worker threads while other code may close it: a ParseStream
whose client cancels closes its multiplexer while a worker is still inside a large step; a model
reloaded under traffic drops its tokenizer while requests still run on it. Freeing the memory at
that moment is a use-after-free that takes the whole process down.

So every call takes a lease (`with handle as ptr: lib.sc_...(ptr, ...)`), and `close()` only marks
the handle closed: the memory is freed by whoever lets go last, the closer when no call is in
flight, otherwise the last call when it returns. A call that starts after `close()` gets
`FailedPrecondition` naming the handle, never a dangling pointer. A handle that is dropped without
`close()` is freed by the garbage collector (`ffi.gc`), which cannot happen while a lease holds it.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from sidecar.errors import FailedPrecondition
from sidecar.native._ffi import ffi


class Handle:
    """A native pointer with leases (see the module docs)."""

    __slots__ = ("_ptr", "_what", "_lock", "_leases", "_closed", "__weakref__")

    def __init__(self, ptr: Any, free: Callable[[Any], None], what: str) -> None:
        self._ptr = ffi.gc(ptr, free)
        self._what = what
        self._lock = threading.Lock()
        self._leases = 0
        self._closed = False

    # The lock is taken with acquire/release rather than `with`: a lease is taken and returned on
    # every native call, and the context-manager protocol cost about as much as a small call.
    def __enter__(self) -> Any:
        lock = self._lock
        lock.acquire()
        closed = self._closed
        if not closed:
            self._leases += 1
        lock.release()
        if closed:
            raise FailedPrecondition(f"{self._what}: already closed")
        return self._ptr

    def __exit__(self, *exc: object) -> None:
        lock = self._lock
        lock.acquire()
        self._leases -= 1
        last = self._closed and not self._leases
        lock.release()
        if last:
            ffi.release(self._ptr)

    def close(self) -> None:
        """Frees the native object now, or when the last call in flight returns; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            last = self._leases == 0
        if last:
            ffi.release(self._ptr)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def in_flight(self) -> int:
        """Calls holding a lease right now."""
        return self._leases
