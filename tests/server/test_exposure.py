"""Who can reach the server: the Unix socket is 0600 whatever the umask (`--uds-mode` widens it),
/metrics listens on loopback unless `--metrics-host` says otherwise, TCP speaks TLS and mutual TLS
with certificates made here (a CA, a server certificate for 127.0.0.1, client certificates from that
CA and from a stranger's)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from sidecar.v1 import preprocessor_pb2 as pb
from sidecar.v1 import preprocessor_pb2_grpc as pb_grpc
from tests.conftest import REPO, LiveServer, start_server, stop_server

pytestmark = pytest.mark.e2e

x509 = pytest.importorskip("cryptography.x509", reason="cryptography is a test dependency (make setup)")
from cryptography.hazmat.primitives import hashes, serialization  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID  # noqa: E402


@dataclass
class Pem:
    cert: bytes
    key: bytes


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def make_ca(name: str) -> tuple[Pem, x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                                     key_encipherment=False, data_encipherment=False, key_agreement=False,
                                     encipher_only=False, decipher_only=False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return Pem(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key)), cert, key


def make_leaf(name: str, ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, server: bool) -> Pem:
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    builder = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH]),
                       critical=False)
    )
    if server:
        builder = builder.add_extension(x509.SubjectAlternativeName(
            [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return Pem(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """PEM files: ca, server.{crt,key}, client.{crt,key} (signed by ca), stranger.{crt,key} (another CA)."""
    folder = tmp_path_factory.mktemp("pki")
    ca, ca_cert, ca_key = make_ca("sidecar test CA")
    _, other_cert, other_key = make_ca("somebody else's CA")
    pems = {"ca": ca, "server": make_leaf("sidecar", ca_cert, ca_key, server=True),
            "client": make_leaf("router", ca_cert, ca_key, server=False),
            "stranger": make_leaf("router", other_cert, other_key, server=False)}
    files: dict[str, Path] = {}
    for name, pem in pems.items():
        files[f"{name}.crt"] = folder / f"{name}.crt"
        files[f"{name}.crt"].write_bytes(pem.cert)
        files[f"{name}.key"] = folder / f"{name}.key"
        files[f"{name}.key"].write_bytes(pem.key)
    return files


def start_with_umask(tmp: Path, umask: int, *args: str) -> LiveServer:
    """The server started under `umask` (inherited by the child process)."""
    previous = os.umask(umask)
    try:
        return start_server(tmp, *args)
    finally:
        os.umask(previous)


def tls_tokenize(server: LiveServer, pki: dict[str, Path], client: str | None) -> grpc.StatusCode:
    """Tokenize over TLS trusting the test CA, presenting `client`'s certificate (None: none)."""
    key = pki[f"{client}.key"].read_bytes() if client else None
    cert = pki[f"{client}.crt"].read_bytes() if client else None
    credentials = grpc.ssl_channel_credentials(pki["ca.crt"].read_bytes(), key, cert)
    with grpc.secure_channel(server.tcp, credentials) as channel:
        return call_code(pb_grpc.PreprocessorStub(channel))


def call_code(stub: pb_grpc.PreprocessorStub) -> grpc.StatusCode:
    try:
        response = stub.Tokenize(pb.TokenizeRequest(model="qwen3", texts=["Hello world"]), timeout=10)
    except grpc.RpcError as e:
        return e.code()
    assert list(response.encodings[0].token_ids) == [9707, 1879]
    return grpc.StatusCode.OK


def listening(server: LiveServer) -> dict:
    return next(e for e in server.log_lines() if e.get("event") == "listening")


def test_tls_socket_mode_and_loopback_metrics_by_default(tmp_path: Path, pki: dict[str, Path]) -> None:
    server = start_with_umask(tmp_path, 0o000, "--tls-cert", str(pki["server.crt"]), "--tls-key", str(pki["server.key"]))
    try:
        mode = os.stat(server.uds.removeprefix("unix:")).st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600, oct(mode)
        assert listening(server)["metrics_address"].startswith("127.0.0.1:")
        assert tls_tokenize(server, pki, None) == grpc.StatusCode.OK
        with grpc.insecure_channel(server.tcp) as plaintext:
            assert call_code(pb_grpc.PreprocessorStub(plaintext)) == grpc.StatusCode.UNAVAILABLE
        with grpc.insecure_channel(server.uds) as local:  # the Unix socket stays plaintext: its mode guards it
            assert call_code(pb_grpc.PreprocessorStub(local)) == grpc.StatusCode.OK
    finally:
        stop_server(server)


def test_mutual_tls_wider_socket_mode_and_metrics_host(tmp_path: Path, pki: dict[str, Path]) -> None:
    server = start_with_umask(
        tmp_path, 0o077, "--tls-cert", str(pki["server.crt"]), "--tls-key", str(pki["server.key"]),
        "--tls-client-ca", str(pki["ca.crt"]), "--uds-mode", "660", "--metrics-host", "127.0.0.2",
    )
    try:
        assert stat.S_IMODE(os.stat(server.uds.removeprefix("unix:")).st_mode) == 0o660
        assert listening(server)["metrics_address"].startswith("127.0.0.2:")
        assert tls_tokenize(server, pki, "client") == grpc.StatusCode.OK
        assert tls_tokenize(server, pki, None) == grpc.StatusCode.UNAVAILABLE
        assert tls_tokenize(server, pki, "stranger") == grpc.StatusCode.UNAVAILABLE
        cli = subprocess.run(
            [sys.executable, "-m", "sidecar", "tokenize", "--target", server.tcp, "--tls-ca", str(pki["ca.crt"]),
             "--tls-cert", str(pki["client.crt"]), "--tls-key", str(pki["client.key"]), "Hello world"],
            capture_output=True, text=True, cwd=REPO, timeout=60,
        )
        assert cli.returncode == 0 and cli.stdout.split() == ["9707", "1879"], cli.stderr
    finally:
        stop_server(server)


def test_tls_flags_are_checked_before_anything_starts() -> None:
    from sidecar.config import ServerConfig

    with pytest.raises(ValueError, match="--tls-cert and --tls-key"):
        ServerConfig(tls_cert="a.pem")
    with pytest.raises(ValueError, match="--tls-client-ca"):
        ServerConfig(tls_client_ca="ca.pem")
    with pytest.raises(ValueError, match="--uds-mode"):
        ServerConfig(uds_mode=0o1777)
