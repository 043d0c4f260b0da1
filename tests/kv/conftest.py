"""Fixtures of the KV tests: a real nats-server with JetStream (tests/kv/nats_server.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from tests.kv.nats_server import NatsServer


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A nats-server with JetStream on a free loopback port and a temporary store; skipped with the
    reason when the binary is not installed (a failure under CI=true)."""
    server = NatsServer(tmp_path / "jetstream", tmp_path / "nats-server.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()
