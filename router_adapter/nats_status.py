"""What a NATS connection of the fan-out reports in the logs: one line per change of state (the
first connection failing, connected, disconnected, reconnected) and per new kind of error, not one
per attempt.

The client retries every half second for as long as NATS is unreachable and hands every failed
attempt to its error callback; its default callback logs each one with a traceback (to the
`nats.aio.client` logger, that is to stderr as bare text), two multi-line tracebacks a second for
the whole outage. Here an error already reported in the current state is counted, and the count
is reported at most once every `REPEAT_S` seconds while the errors go on.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

_log = logging.getLogger("router_adapter.nats")

#: Seconds between two reports of the same errors going on in one state.
REPEAT_S = 60.0
#: Distinct errors remembered per state; past it any error counts as one already reported (an
#: error whose text varies, such as one naming an ephemeral port, cannot make one line each).
MAX_DISTINCT = 16

CONNECTING, CONNECTED, DISCONNECTED, CLOSED = "connecting", "connected", "disconnected", "closed"


def _describe(error: BaseException) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


class ConnectionStatus:
    """The callbacks of one NATS client (`callbacks()`), logging through `router_adapter.nats`.
    `clock` is for the tests."""

    def __init__(self, name: str, url: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.name, self.url = name, url
        self._clock = clock
        self.state = CONNECTING
        self._since = clock()  # when the state began
        self._seen: set[str] = set()
        self._repeated = 0  # errors of this state already reported, since the last line about them
        self._last_error = ""
        self._reported_at = -math.inf
        self._errors = 0  # errors in this state
        #: The client once connected (`closing` tells a disconnection from a close).
        self.client: Any = None

    def callbacks(self, disconnected_cb: Callable[[], Awaitable[None]] | None = None,
                  reconnected_cb: Callable[[], Awaitable[None]] | None = None) -> dict[str, Any]:
        """The client's error, disconnected and reconnected callbacks, calling the caller's after
        the logging."""
        async def disconnected() -> None:
            self.disconnected()
            if disconnected_cb is not None:
                await disconnected_cb()

        async def reconnected() -> None:
            self.reconnected()
            if reconnected_cb is not None:
                await reconnected_cb()

        async def error(e: Exception) -> None:
            self.error(e)

        return {"error_cb": error, "disconnected_cb": disconnected, "reconnected_cb": reconnected}

    def _enter(self, state: str) -> tuple[float, int]:
        """Moves to `state`; returns how long the previous one lasted and its error count."""
        now = self._clock()
        lasted, errors = now - self._since, self._errors
        self.state, self._since = state, now
        self._seen.clear()
        self._repeated, self._errors, self._reported_at = 0, 0, -math.inf
        return lasted, errors

    def error(self, e: BaseException) -> None:
        text = _describe(e)
        self._errors += 1
        self._last_error = text
        now = self._clock()
        if text not in self._seen and len(self._seen) < MAX_DISTINCT:
            self._seen.add(text)
            self._reported_at = now
            if self.state == CONNECTING:
                _log.warning("kv_nats_connect_failed name=%r url=%s error=%r retrying=true", self.name, self.url,
                             text)
            elif self.state == DISCONNECTED:
                _log.warning("kv_nats_reconnect_failed name=%r url=%s error=%r retrying=true", self.name,
                             self.url, text)
            else:
                _log.warning("kv_nats_error name=%r url=%s state=%s error=%r", self.name, self.url, self.state, text)
            return
        self._repeated += 1
        if now - self._reported_at >= REPEAT_S:
            _log.warning("kv_nats_errors_repeated name=%r url=%s state=%s errors=%d seconds=%.0f last_error=%r",
                         self.name, self.url, self.state, self._repeated, now - self._reported_at, text)
            self._reported_at, self._repeated = now, 0

    def connected(self, client: Any) -> None:
        """The first connection is made."""
        self.client = client
        lasted, errors = self._enter(CONNECTED)
        if errors:
            _log.info("kv_nats_connected name=%r url=%s after_seconds=%.1f failed_attempts=%d", self.name,
                      self.url, lasted, errors)
        else:
            _log.info("kv_nats_connected name=%r url=%s", self.name, self.url)

    def disconnected(self) -> None:
        if self.state in (DISCONNECTED, CLOSED):
            return
        if self.client is not None and getattr(self.client, "is_closed", False):
            self._enter(CLOSED)  # our own close at a stop: nothing went wrong
            return
        self._enter(DISCONNECTED)
        _log.warning("kv_nats_disconnected name=%r url=%s reconnecting=true", self.name, self.url)

    def reconnected(self) -> None:
        lasted, errors = self._enter(CONNECTED)
        _log.info("kv_nats_reconnected name=%r url=%s down_seconds=%.1f failed_attempts=%d", self.name, self.url,
                  lasted, errors)
