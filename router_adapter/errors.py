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
