"""`delayq certs dev`: a development CA, a node certificate and client certificates, so that a
first run, the tests and a laptop cluster are secured like production. Production certificates
come from the organisation's own CA; delayq only needs their PEM files.

Keys are ECDSA P-256 (a TLS handshake costs the node a fraction of what RSA 2048 does) and written
readable by their owner only. Idempotent: what exists is kept, so a CA stays the one every
certificate was signed with.
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import os
import socket
from pathlib import Path
from typing import cast

import click
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from delayq.access.tokens import check_name

VALID_DAYS = 825


def _key(path: Path) -> ec.EllipticCurvePrivateKey:
    if path.exists():
        # A key this function wrote before: an EC one.
        return cast(ec.EllipticCurvePrivateKey, serialization.load_pem_private_key(path.read_bytes(), password=None))
    key = ec.generate_private_key(ec.SECP256R1())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                   serialization.NoEncryption()))
    return key


def _builder(subject: str, issuer: x509.Name, public_key) -> x509.CertificateBuilder:
    now = dt.datetime.now(dt.timezone.utc)
    return (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(issuer).public_key(public_key).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=VALID_DAYS)))


def ensure_ca(folder: Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key(folder / "ca.key")
    cert_path = folder / "ca.pem"
    if cert_path.exists():
        return x509.load_pem_x509_certificate(cert_path.read_bytes()), key
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "delayq development CA")])
    cert = (_builder("delayq development CA", name, key.public_key())
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def ensure_leaf(folder: Path, name: str, ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey], *,
                hosts: tuple[str, ...] = (), client: bool = False) -> Path:
    """folder/name.pem and name.key, signed by ca: a server certificate for hosts, or a client one
    whose common name is the client's name."""
    cert_path = folder / f"{name}.pem"
    key = _key(folder / f"{name}.key")
    if cert_path.exists():
        return cert_path
    ca_cert, ca_key = ca
    builder = _builder(name, ca_cert.subject, key.public_key()).add_extension(
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]),
        critical=False)
    if hosts:
        names: list[x509.GeneralName] = []
        for host in hosts:
            try:
                names.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                names.append(x509.DNSName(host))
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    cert_path.write_bytes(builder.sign(ca_key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
    return cert_path


def dev_set(folder: Path, hosts: tuple[str, ...] = (), clients: tuple[str, ...] = ()) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    ca = ensure_ca(folder)
    names = ("localhost", "127.0.0.1", "::1", socket.gethostname(), *hosts)
    ensure_leaf(folder, "node", ca, hosts=tuple(dict.fromkeys(names)))
    for client in clients:
        ensure_leaf(folder, check_name(client), ca, client=True)


@click.group()
def certs() -> None:
    """Certificates for development."""


@certs.command("dev")
@click.option("--dir", "folder", type=click.Path(file_okay=False), default="var/tls", show_default=True)
@click.option("--host", "hosts", multiple=True, help="A further name or address of the nodes (besides "
              "localhost, 127.0.0.1, ::1 and this machine's name). Repeat for several.")
@click.option("--client", "clients", multiple=True, help="Also a client certificate for this client name.")
def dev(folder: str, hosts: tuple[str, ...], clients: tuple[str, ...]) -> None:
    """Make (or keep) a development CA, a node certificate and client certificates in --dir:
    ca.pem, node.pem + node.key, <client>.pem + <client>.key."""
    try:
        dev_set(Path(folder), hosts, clients)
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    click.echo(f"DELAYQ_TLS_CA_FILE={folder}/ca.pem DELAYQ_TLS_CERT_FILE={folder}/node.pem "
               f"DELAYQ_TLS_KEY_FILE={folder}/node.key")
