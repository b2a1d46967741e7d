"""TLS: the server's SSL context, client-certificate subjects, and self-signed development
certificates made with ``cryptography``."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["server_context", "create_self_signed", "subject_of", "subject_matches"]

_SHORT = {"commonName": "CN", "organizationName": "O", "organizationalUnitName": "OU",
          "countryName": "C", "localityName": "L", "stateOrProvinceName": "ST",
          "emailAddress": "EMAILADDRESS", "domainComponent": "DC"}


def server_context(cert: str, key: str, client_ca: str = "") -> ssl.SSLContext:
    """TLS 1.2 or later; with ``client_ca`` clients may present a certificate signed by it.

    Raises:
        OSError, ssl.SSLError: unreadable or mismatched files.
    """
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    if client_ca:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def subject_of(peercert: dict[str, object] | None) -> str:
    """``CN=x,O=y`` from the dict ``SSLSocket.getpeercert()`` gives; "" without one."""
    if not peercert:
        return ""
    parts = []
    for rdn in peercert.get("subject", ()):  # type: ignore[attr-defined]
        for name, value in rdn:
            parts.append(f"{_SHORT.get(name, name)}={value}")
    return ",".join(parts)


def _pairs(subject: str) -> frozenset[tuple[str, str]]:
    pairs = set()
    for part in subject.split(","):
        key, sep, value = part.partition("=")
        if sep:
            pairs.add((key.strip().upper(), value.strip().lower()))
    return frozenset(pairs)


def subject_matches(configured: str, presented: str) -> bool:
    """Every ``K=V`` of the configured subject is in the presented one (case-insensitive,
    any order); an empty configured subject matches nothing."""
    wanted = _pairs(configured)
    return bool(wanted) and wanted <= _pairs(presented)


def create_self_signed(out_dir: Path, *, common_name: str, names: list[str], days: int,
                       ) -> tuple[Path, Path]:
    """``cert.pem`` and ``key.pem`` (mode 0600) in ``out_dir``: an ECDSA P-256 pair for
    development, valid for ``common_name`` and ``names`` (DNS names or IP addresses)."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name),
                         x509.NameAttribute(NameOID.ORGANIZATION_NAME, "entrepot development")])
    alt: list[x509.GeneralName] = []
    for name in dict.fromkeys([common_name, *names]):
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    out_dir.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = out_dir / "cert.pem", out_dir / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    return cert_path, key_path
