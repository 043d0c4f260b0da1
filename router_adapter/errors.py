"""The router adapter's own exceptions. They know nothing of gRPC: a server that exposes the library
(sidecar's `KvRouter` service, `Tokenize` and `Render` with `block_hashing`) maps them to statuses in
its own error table (`sidecar/errors.py`).
"""

from __future__ import annotations

from typing import Callable

#: How many characters of a value from the client an error message repeats. Messages quoted whole
#: values: a 16.5 KB model name made the status pass gRPC's 16 KiB metadata limit (the client got
#: RESOURCE_EXHAUSTED "Stream removed" instead of the error), and a 30 MB one wrote 180 MB of log.
#: The native core cuts at the same length (`error::QUOTED_CHARS`), so both backends and both
#: transports say the same.
QUOTED_CHARS = 200


def quoted(text: str, quote: Callable[[str], str] = repr) -> str:
    """`text` (a value from the client) as a message shows it: `quote` of its first `QUOTED_CHARS`
    characters, followed by how long it is when it is longer ("'mmmm'... (30000000 characters)").
    `quote` is the style of the message (`repr`, `json.dumps`, `str` for a log field)."""
    if len(text) <= QUOTED_CHARS:
        return quote(text)
    return f"{quote(text[:QUOTED_CHARS])}... ({len(text)} characters)"


class RouterAdapterError(Exception):
    """Base class of the errors this library raises on purpose."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidSpec(RouterAdapterError, ValueError):
    """A `HashSpec` no engine could produce; the message names the field as `block_hashing.<field>`."""


class InvalidTokens(RouterAdapterError, ValueError):
    """A token sequence holding something that is not a token id (an integer in [0, 2^32), the range
    every engine's ids live in); the message names the field and the position."""
