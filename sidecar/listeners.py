"""Where the server listens, and who may connect: the Unix socket (its permission bits set before
anyone can connect, its file removed when the server goes), TCP (plain, TLS or mutual TLS)."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import grpc

from sidecar.config import ServerConfig
from sidecar.errors import FailedPrecondition


#: The longest path a Unix socket address holds on Linux (`sun_path` is 108 bytes with its NUL).
UNIX_PATH_MAX = 107


def prepare_unix_socket(path: str) -> None:
    """Removes a socket file left by a server that died without cleaning up; refuses to take over
    a live server's socket or to delete anything that is not a socket."""
    target = Path(path)
    # What gRPC would only report as "address in use or not permitted".
    if len(os.fsencode(path)) > UNIX_PATH_MAX:
        raise FailedPrecondition(f"--uds: {path} is {len(os.fsencode(path))} bytes long; a Unix socket "
                                 f"path may have at most {UNIX_PATH_MAX}")
    if not target.parent.is_dir():
        raise FailedPrecondition(f"--uds: {path}: the directory {target.parent} does not exist")
    if not target.exists():
        return
    if not stat.S_ISSOCK(target.stat().st_mode):
        raise FailedPrecondition(f"--uds: {path} exists and is not a socket")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.connect(path)
    except ConnectionRefusedError:
        target.unlink()  # stale: nobody listens
        return
    except OSError:
        return
    finally:
        probe.close()
    raise FailedPrecondition(f"--uds: another server is already listening on {path}")


class UnixSocket:
    """The server's socket file: created with `mode` whatever the umask, removed only if it is still
    the file this server created (never another server's socket that replaced it)."""

    def __init__(self, path: str, mode: int) -> None:
        self.path = path
        self.mode = mode
        self._inode: tuple[int, int] | None = None

    def bind(self, server: grpc.aio.Server) -> str:
        prepare_unix_socket(self.path)
        # gRPC creates and binds the file inside add_insecure_port, with the process umask applied to
        # 0777; a umask that clears group and other bits around that call means the file never exists
        # with looser bits, so nobody else can connect in the moment before chmod. (The umask is
        # process-wide; nothing else in the server creates files while it starts.)
        previous = os.umask(0o177)
        try:
            _add_port(server, f"unix:{self.path}", None)
        finally:
            os.umask(previous)
        os.chmod(self.path, self.mode)
        info = os.stat(self.path)
        self._inode = (info.st_dev, info.st_ino)
        return f"unix:{self.path}"

    def remove(self) -> None:
        """Deletes the socket file if it is still ours; idempotent, never raises."""
        if self._inode is None:
            return
        try:
            info = os.stat(self.path)
            if (info.st_dev, info.st_ino) == self._inode:
                os.unlink(self.path)
        except OSError:
            pass
        self._inode = None


def tcp_credentials(config: ServerConfig) -> grpc.ServerCredentials | None:
    """TLS for the TCP listener from `--tls-cert/--tls-key` (and `--tls-client-ca`: mutual TLS), or
    None for plaintext."""
    if config.tls_cert is None or config.tls_key is None:
        return None

    def read(flag: str, path: str) -> bytes:
        try:
            return Path(path).read_bytes()
        except OSError as e:
            raise FailedPrecondition(f"{flag} {path}: {e.strerror}") from None

    pair = (read("--tls-key", config.tls_key), read("--tls-cert", config.tls_cert))
    client_ca = read("--tls-client-ca", config.tls_client_ca) if config.tls_client_ca else None
    return grpc.ssl_server_credentials([pair], root_certificates=client_ca, require_client_auth=client_ca is not None)


def bind_tcp(server: grpc.aio.Server, config: ServerConfig) -> str:
    """Listens on `--host:--port` (TLS when configured); returns the bound address."""
    port = _add_port(server, f"{config.host}:{config.port}", tcp_credentials(config))
    return f"{config.host}:{port}"


def _add_port(server: grpc.aio.Server, address: str, credentials: grpc.ServerCredentials | None) -> int:
    try:
        if credentials is None:
            return server.add_insecure_port(address)
        return server.add_secure_port(address, credentials)
    except RuntimeError:
        raise FailedPrecondition(f"cannot listen on {address}: address in use or not permitted") from None
