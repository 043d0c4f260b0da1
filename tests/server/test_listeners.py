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


def test_a_path_too_long_or_in_no_directory_says_so(tmp_path: Path) -> None:
    """gRPC reports both as "address in use or not permitted"; the flag and the reason are named."""
    long = tmp_path / ("s" * 120)
    with pytest.raises(FailedPrecondition, match=r"--uds: .* bytes long; a Unix socket path may have at most 107"):
        prepare_unix_socket(str(long))
    with pytest.raises(FailedPrecondition, match=r"--uds: .*: the directory .* does not exist"):
        prepare_unix_socket(str(tmp_path / "missing" / "s.sock"))
