"""The router adapter's own exceptions. They know nothing of gRPC: a server that exposes the library
(sidecar's `KvRouter` service, `Tokenize` and `Render` with `block_hashing`) maps them to statuses in
its own error table (`sidecar/errors.py`).
"""

from __future__ import annotations


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
