"""TLS: the server's SSL context, client-certificate subjects, and self-signed development
certificates made with ``cryptography``.

A client certificate names a partner when its subject equals the partner's ``cert_subject``
attribute for attribute: both are parsed (the certificate's from its DER, the configured one
as an RFC 4514 string), and each is taken as a multiset of RDNs, an RDN being the set of its
(attribute OID, value) pairs. The order of the RDNs does not matter; every attribute does
(none missing, none extra, a repeated type counted each time, a multi-valued RDN kept
together); values compare exactly, case and spaces included. No string is ever split, so a
value holding ``,`` ``+`` or ``=`` stays one value.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import ssl
from collections import Counter, OrderedDict
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = [
    "PeerSubjects",
    "SubjectKey",
    "create_self_signed",
    "parse_subject",
    "peer_certificate",
    "server_context",
    "subject_key",
]

# RFC 4514 keywords cryptography knows, and a few common ones it does not; upper or lower case.
_KEYWORDS = {"CN": NameOID.COMMON_NAME, "L": NameOID.LOCALITY_NAME,
             "ST": NameOID.STATE_OR_PROVINCE_NAME, "O": NameOID.ORGANIZATION_NAME,
             "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "C": NameOID.COUNTRY_NAME,
             "STREET": NameOID.STREET_ADDRESS, "DC": NameOID.DOMAIN_COMPONENT,
             "UID": NameOID.USER_ID, "EMAILADDRESS": NameOID.EMAIL_ADDRESS,
             "SERIALNUMBER": NameOID.SERIAL_NUMBER}
_OVERRIDES = {**_KEYWORDS, **{k.lower(): v for k, v in _KEYWORDS.items()}}

SubjectKey = frozenset[tuple[frozenset[tuple[str, str | bytes]], int]]


def subject_key(name: x509.Name) -> SubjectKey:
    """What two subjects must share to match: each RDN's (OID, value) set, with how many
    times it occurs; hashable, so the configured subjects are a dict."""
    rdns = Counter(frozenset((attr.oid.dotted_string, attr.value) for attr in rdn)
                   for rdn in name.rdns)
    return frozenset(rdns.items())


def parse_subject(text: str) -> x509.Name:
    """A configured subject, RFC 4514 (``CN=acme.example.com,O=Acme``; escape ``,`` ``+``
    ``"`` ``\\`` ``<`` ``>`` ``;`` in a value with ``\\``, no spaces around separators).

    Raises:
        ValueError: saying what is wrong.
    """
    try:
        name = x509.Name.from_rfc4514_string(text, _OVERRIDES)
    except ValueError as exc:
        detail = f" ({exc})" if str(exc) else ""
        raise ValueError(f"{text!r} is not an RFC 4514 name{detail}: attributes like "
                         "CN=x,O=y with no spaces around ',' '+' '=', a ',' or '+' inside a "
                         "value escaped as '\\,' '\\+'") from None
    if not name.rdns:
        raise ValueError("the subject is empty")
    return name


def peer_certificate(transport: asyncio.BaseTransport | None) -> bytes | None:
    """The client certificate (DER) the TLS handshake verified; None without TLS, without a
    certificate, or with one not verified (``peercert`` is then an empty dict)."""
    if transport is None or not transport.get_extra_info("peercert"):
        return None
    ssl_object = transport.get_extra_info("ssl_object")
    der: bytes | None = (ssl_object.getpeercert(binary_form=True) if ssl_object is not None
                         else None)
    return der


class PeerSubjects:
    """The subject keys of verified client certificates, by certificate (DER), the
    ``entries_max`` most recent: parsing one costs tens of microseconds, a look-up one,
    and a peer gateway presents its certificate with every SRMP request."""

    def __init__(self, entries_max: int = 1024) -> None:
        self.entries_max = entries_max
        self._keys: OrderedDict[bytes, SubjectKey | None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._keys)

    def of(self, transport: asyncio.BaseTransport | None) -> SubjectKey | None:
        """The subject key of the client certificate the TLS handshake verified; None
        without one (or for one ``cryptography`` cannot read, which then proves nothing)."""
        return self.of_der(peer_certificate(transport))

    def of_der(self, der: bytes | None) -> SubjectKey | None:
        """The subject key of a verified client certificate (DER)."""
        if not der:
            return None
        if der in self._keys:
            self._keys.move_to_end(der)
            return self._keys[der]
        try:
            key: SubjectKey | None = subject_key(x509.load_der_x509_certificate(der).subject)
        except ValueError:
            key = None
        self._keys[der] = key
        if len(self._keys) > self.entries_max:
            self._keys.popitem(last=False)
        return key


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
