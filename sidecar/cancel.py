"""The cancel token of an offloaded call: a flag the native core polls while it works.

The server hands a large call to a worker thread and awaits it. When the awaiting coroutine is
cancelled (the client went away, or its deadline passed), nothing will read the result, so the
worker should stop. The Offloader (`sidecar.runtime`) makes one `CancelToken` per offloaded call,
binds it to the worker thread for the duration of the call, and sets it when the await is
cancelled; native wrappers pass the bound token's flag (a 4-byte word) to the long native loops,
which check it between bounded units of work (see native/src/cancel.rs).

The token is bound to the thread rather than passed down every signature because every native call
a piece of offloaded work makes (tokenizing, then hashing the ids, say) belongs to the same call
and must stop together.
"""

from __future__ import annotations

import threading
from array import array
from contextlib import contextmanager
from typing import Iterator


class CancelToken:
    """A flag set once, by the event loop, and read by native code on a worker thread."""

    __slots__ = ("flag",)

    def __init__(self) -> None:
        #: The word the native side reads (a 4-byte-aligned uint32; 0 = keep going). Setting it is
        #: a single aligned 32-bit store, which the native side reads atomically.
        self.flag = array("I", [0])

    def cancel(self) -> None:
        self.flag[0] = 1

    @property
    def cancelled(self) -> bool:
        return self.flag[0] != 0


_bound = threading.local()


@contextmanager
def bound(token: CancelToken) -> Iterator[CancelToken]:
    """Makes `token` the current thread's token while the block runs."""
    previous = getattr(_bound, "token", None)
    _bound.token = token
    try:
        yield token
    finally:
        _bound.token = previous


def current() -> CancelToken | None:
    """The token of the offloaded call running on this thread; None on the event loop (inline
    calls are small and bounded) and outside the server."""
    return getattr(_bound, "token", None)
