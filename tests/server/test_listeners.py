"""Unix-socket listener hygiene: a stale socket from a dead server is replaced, a live one is not."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from sidecar.errors import FailedPrecondition
from sidecar.listeners import prepare_unix_socket


def test_missing_path_is_fine(tmp_path: Path) -> None:
    prepare_unix_socket(str(tmp_path / "s.sock"))


def test_stale_socket_is_removed(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # bound but nobody listens: what a killed server leaves behind
    prepare_unix_socket(str(path))
    assert not path.exists()


def test_live_socket_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    live = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    live.bind(str(path))
    live.listen(1)
    try:
        with pytest.raises(FailedPrecondition, match="already listening"):
            prepare_unix_socket(str(path))
        assert path.exists()
    finally:
        live.close()


def test_regular_file_is_never_deleted(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("keep me")
    with pytest.raises(FailedPrecondition, match="not a socket"):
        prepare_unix_socket(str(path))
    assert path.read_text() == "keep me"
