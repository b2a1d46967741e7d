"""Partners kept apart on a real gateway over TLS: client certificates match a partner only
when their subject is the configured one attribute for attribute (a subject that spells the
partner's inside another attribute's value is refused); one partner's signed requests or
rate limit do not refuse another's."""

from __future__ import annotations

import datetime
import hashlib
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gateway.auth.hmac_sig import sign
from gateway.auth.tls import create_self_signed
from tests.helpers import GatewayProcess
from tests.srmp_client import user_message

# Run again in one process (server.workers = 1) by make test (ENTREPOT_TEST_WORKERS).
pytestmark = pytest.mark.workers

SECRETS = {name: f"{name}-shared-secret-0123456789".encode() for name in ("a", "b", "c")}
NONCES_MAX = 1000  # the least auth.nonces_max allows

_CN, _O, _OU = NameOID.COMMON_NAME, NameOID.ORGANIZATION_NAME, NameOID.ORGANIZATIONAL_UNIT_NAME
# Subjects as RDN lists, the first RDN first in the certificate (RFC 4514 writes them last).
CLIENTS: dict[str, list[list[tuple[x509.ObjectIdentifier, str]]]] = {
    "acme": [[(_O, "Acme")], [(_CN, "acme.example.com")]],
    "acme-reordered": [[(_CN, "acme.example.com")], [(_O, "Acme")]],
    # The reported injection: one O attribute whose value spells the partner's subject.
    "hostile": [[(_O, "Other,CN=acme.example.com,O=Acme")]],
    "hostile-plus": [[(_O, "Acme+CN=acme.example.com")]],
    "acme-extra": [[(_O, "Acme")], [(_OU, "Sales")], [(_CN, "acme.example.com")]],
    "acme-case": [[(_O, "ACME")], [(_CN, "acme.example.com")]],
    "units": [[(_O, "Units, Inc.")], [(_OU, "east"), (_CN, "units")], [(_OU, "a")],
              [(_OU, "b")]],
    "units-flat": [[(_O, "Units, Inc.")], [(_OU, "east")], [(_CN, "units")], [(_OU, "a")],
                   [(_OU, "b")]],
    "units-one-ou": [[(_O, "Units, Inc.")], [(_OU, "east"), (_CN, "units")], [(_OU, "a")]],
}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _issue(root: Path, ca_key: ec.EllipticCurvePrivateKey, ca: x509.Certificate, name: str,
           rdns: list[list[tuple[x509.ObjectIdentifier, str]]]) -> None:
    """``root/name/cert.pem`` and ``key.pem``: a client certificate the CA signed."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.RelativeDistinguishedName(
        [x509.NameAttribute(oid, value) for oid, value in rdn]) for rdn in rdns])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(subject).issuer_name(ca.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False,
                                         False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    out = root / name
    out.mkdir()
    (out / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (out / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))


def _client_ca(root: Path) -> Path:
    """A CA (``root/ca.pem``) and a client certificate from it for each of CLIENTS."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(_CN, "partners test CA")])
    now = datetime.datetime.now(datetime.UTC)
    ca = (x509.CertificateBuilder()
          .subject_name(name).issuer_name(name).public_key(key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                       False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                         critical=False)
          .sign(key, hashes.SHA256()))
    for client, rdns in CLIENTS.items():
        _issue(root, key, ca, client, rdns)
    path = root / "ca.pem"
    path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return path


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayProcess, Path]]:
    root = tmp_path_factory.mktemp("partners")
    cert, key = create_self_signed(root / "server", common_name="localhost",
                                   names=["127.0.0.1"], days=2)
    ca = _client_ca(root)
    partners = ""
    for name, secret in SECRETS.items():
        (root / f"{name}.secret").write_bytes(secret)
        partners += f"""
[[partners]]
name = "{name}"
hmac_secret_file = "{root / f'{name}.secret'}"
send = ["private$/in_*"]
{'rate = 1' + chr(10) + 'burst = 1' if name == 'a' else ''}
"""
    config = root / "entrepot.toml"
    config.write_text(f"""[server]
tls_cert = "{cert}"
tls_key = "{key}"
tls_client_ca = "{ca}"
names = ["gw"]
[srmp]
allow_networks = []
[auth]
admin_key_sha256 = "{_sha('root-key')}"
nonces_max = {NONCES_MAX}
[[partners]]
name = "acme"
cert_subject = "CN=acme.example.com,O=Acme"
send = ["private$/in_*"]
[[partners]]
name = "units"
cert_subject = "OU=b,OU=a,CN=units+OU=east,O=Units\\\\, Inc."
send = ["private$/in_*"]
{partners}
[[queues]]
path = "private$/in_a"
""")
    proc = GatewayProcess(root / "data", extra_args=["--config", str(config)], cafile=cert)
    try:
        proc.wait_ready()
        yield proc, root
    finally:
        proc.stop()


def _context(root: Path, client: str = "") -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(root / "server" / "cert.pem"))
    if client:
        context.load_cert_chain(root / client / "cert.pem", root / client / "key.pem")
    return context


async def _call(gateway: tuple[GatewayProcess, Path], method: str, path: str, *,
                client: str = "", **kwargs: Any) -> tuple[int, bytes]:
    proc, root = gateway
    connector = aiohttp.TCPConnector(ssl=_context(root, client))
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.request(method, proc.url + path, **kwargs) as response:
            return response.status, await response.read()


async def test_a_client_certificate_names_the_partner_with_exactly_its_subject(
        gateway: tuple[GatewayProcess, Path]) -> None:
    statuses = {client: (await _call(gateway, "GET", "/v1/queues", client=client))[0]
                for client in CLIENTS}
    assert statuses == {"acme": 200, "acme-reordered": 200, "hostile": 401,
                        "hostile-plus": 401, "acme-extra": 401, "acme-case": 401,
                        "units": 200, "units-flat": 401, "units-one-ou": 401}


async def test_srmp_refuses_a_subject_spelling_the_partner_inside_a_value(
        gateway: tuple[GatewayProcess, Path]) -> None:
    request = user_message("http://gw/msmq/private$/in_a", b"srmp", ordinal=1)
    headers = {k: v for k, v in request.headers if k not in ("Host", "Content-Length")}
    status, body = await _call(gateway, "POST", request.path, data=request.body,
                               headers=headers, client="acme")
    assert status == 200, body
    again = user_message("http://gw/msmq/private$/in_a", b"srmp", ordinal=2)
    headers = {k: v for k, v in again.headers if k not in ("Host", "Content-Length")}
    status, body = await _call(gateway, "POST", again.path, data=again.body,
                               headers=headers, client="hostile")
    assert status == 403, body


def _signed(partner: str, path: str, nonce: str) -> dict[str, str]:
    return {"Authorization": sign(SECRETS[partner], "GET", path, int(time.time()), nonce, b"",
                                  partner, headers=())}


async def _signed_gets(gateway: tuple[GatewayProcess, Path], partner: str, count: int,
                       tag: str) -> list[int]:
    """The statuses of ``count`` signed GET /v1/queues, each with a new nonce, over one
    connection."""
    proc, root = gateway
    statuses = []
    connector = aiohttp.TCPConnector(ssl=_context(root), limit=1)
    async with aiohttp.ClientSession(connector=connector) as session:
        for n in range(count):
            headers = _signed(partner, "/v1/queues", f"nonce-{tag}-{partner}-{n:06d}")
            async with session.get(proc.url + "/v1/queues", headers=headers) as response:
                await response.read()
                statuses.append(response.status)
    return statuses


async def test_a_partner_filling_its_nonce_cache_does_not_refuse_another(
        gateway: tuple[GatewayProcess, Path]) -> None:
    statuses = await _signed_gets(gateway, "c", NONCES_MAX + 1, "fill")
    assert statuses[:NONCES_MAX] == [200] * NONCES_MAX
    assert statuses[NONCES_MAX] == 503  # c's own cache is full: c waits
    assert await _signed_gets(gateway, "b", 3, "after-fill") == [200, 200, 200]


async def test_a_partner_over_its_rate_limit_neither_slows_another_nor_fills_its_cache(
        gateway: tuple[GatewayProcess, Path]) -> None:
    """Partner a may make one request a second: past that it gets 429, b is served, and the
    refused requests take no nonce slots (else a's own cache would fill: 503)."""
    statuses = await _signed_gets(gateway, "a", NONCES_MAX + 10, "rate")
    assert set(statuses) == {200, 429}
    assert await _signed_gets(gateway, "b", 3, "beside-rate") == [200, 200, 200]
