"""A real gateway over TLS with partners: API keys, HMAC signatures (and replays), client
certificates for SRMP, allow lists, the admin credential, rate limits, body limits; checked
with aiohttp and with curl."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import socket
import ssl
import subprocess
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.auth.hmac_sig import sign
from tests.helpers import GatewayProcess, tls_server_config
from tests.srmp_client import user_message

# Run again in one process (server.workers = 1) by make test (ENTREPOT_TEST_WORKERS).
pytestmark = pytest.mark.workers

SECRET = b"acme-shared-secret-0123456789"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayProcess, Path]]:
    root = tmp_path_factory.mktemp("secure")
    cert = root / "server" / "cert.pem"
    (root / "acme.secret").write_bytes(SECRET)
    config = root / "entrepot.toml"
    config.write_text(tls_server_config(root, "acme-client") + f"""
body_timeout = "1s"
request_body_max = "64KiB"
names = ["gw"]
[srmp]
allow_networks = []
[auth]
admin_key_sha256 = "{_sha('root-key')}"
[[partners]]
name = "acme"
api_key_sha256 = "{_sha('acme-key')}"
hmac_secret_file = "{root / 'acme.secret'}"
cert_subject = "CN=acme-client,O=entrepot development"
send = ["private$/in_*"]
receive = ["private$/acme_out"]
[[partners]]
name = "slow"
api_key_sha256 = "{_sha('slow-key')}"
send = ["private$/in_*"]
rate = 1
burst = 2
[[queues]]
path = "private$/in_a"
[[queues]]
path = "private$/acme_out"
[[queues]]
path = "private$/secret"
[log]
level = "debug"
access = true
""")
    proc = GatewayProcess(root / "data", extra_args=["--config", str(config)], cafile=cert)
    try:
        proc.wait_ready()
        yield proc, root
    finally:
        proc.stop()


def _context(root: Path, *, client: bool = False) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(root / "server" / "cert.pem"))
    if client:
        context.load_cert_chain(root / "client" / "cert.pem", root / "client" / "key.pem")
    return context


async def _call(secure: tuple[GatewayProcess, Path], method: str, path: str, *,
                client_cert: bool = False, **kwargs: Any) -> tuple[int, dict[str, str], bytes]:
    proc, root = secure
    connector = aiohttp.TCPConnector(ssl=_context(root, client=client_cert))
    async with aiohttp.ClientSession(connector=connector) as session:
        async with session.request(method, proc.url + path, **kwargs) as response:
            return response.status, dict(response.headers), await response.read()


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_tls_and_public_routes(secure: tuple[GatewayProcess, Path]) -> None:
    status, _, body = await _call(secure, "GET", "/healthz")
    assert status == 200
    proc, root = secure

    async def handshake(highest: ssl.TLSVersion) -> str:
        # Security level 0 lets OpenSSL 3 really offer TLS 1.1, so a refusal is the server's.
        context = _context(root)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # that is the point
            context.minimum_version = ssl.TLSVersion.TLSv1_1
            context.maximum_version = highest
        context.set_ciphers("DEFAULT@SECLEVEL=0")
        _, writer = await asyncio.open_connection("127.0.0.1", proc.port, ssl=context,
                                                  server_hostname="127.0.0.1")
        version = str(writer.get_extra_info("ssl_object").version())
        writer.close()
        await writer.wait_closed()
        return version

    assert await handshake(ssl.TLSVersion.TLSv1_2) == "TLSv1.2"  # this client can connect
    with pytest.raises(OSError) as refused:  # ssl.SSLError is an OSError
        await handshake(ssl.TLSVersion.TLSv1_1)
    # The server hangs up or alerts; a client that never offered 1.1 fails with its own
    # NO_PROTOCOLS_AVAILABLE / UNSUPPORTED_PROTOCOL instead.
    error = refused.value
    assert (isinstance(error, ConnectionError) or "ALERT" in str(getattr(error, "reason", ""))
            or getattr(error, "reason", "") == "UNEXPECTED_EOF_WHILE_READING"), repr(error)


async def test_missing_or_wrong_credentials_are_401(secure: tuple[GatewayProcess, Path]
                                                    ) -> None:
    for headers in ({}, _bearer("not-a-key"), {"Authorization": "Basic eDp5"}):
        status, got, body = await _call(secure, "GET", "/v1/queues", headers=headers)
        assert status == 401 and got["Content-Type"] == "application/problem+json"
        assert "Bearer" in got["WWW-Authenticate"]


async def test_partners_touch_only_their_queues(secure: tuple[GatewayProcess, Path]) -> None:
    acme = _bearer("acme-key")
    assert (await _call(secure, "POST", "/v1/queues/private$/in_a/messages", data=b"hi",
                        headers=acme))[0] == 201
    status, _, body = await _call(secure, "POST", "/v1/queues/private$/secret/messages",
                                  data=b"x", headers=acme)
    assert status == 403 and b"MQ_ERROR_ACCESS_DENIED" in body
    assert (await _call(secure, "POST", "/v1/queues/private$/in_a/receive",
                        headers=acme))[0] == 403
    assert (await _call(secure, "POST", "/v1/queues/private$/acme_out/receive",
                        headers=acme))[0] == 200
    listed = json.loads((await _call(secure, "GET", "/v1/queues", headers=acme))[2])
    assert {q["path"] for q in listed["queues"]} == {"private$/in_a", "private$/acme_out"}
    assert (await _call(secure, "PUT", "/v1/queues/private$/in_new", json={},
                        headers=acme))[0] == 403
    assert (await _call(secure, "PUT", "/v1/queues/private$/in_new", json={},
                        headers=_bearer("root-key")))[0] == 201
    assert (await _call(secure, "POST", "/v1/admin/backup", json={"dest": "/nonexistent/x"},
                        headers=acme))[0] == 403


_OCTETS = {"Content-Type": "application/octet-stream"}  # what aiohttp sends for bytes
_ROUTING = {"Mq-Destination": "DIRECT=OS:.\\private$\\in_a",
            "Mq-Admin-Queue": "DIRECT=OS:.\\private$\\in_a",
            "Idempotency-Key": "key-1", "Content-Type": "application/json"}


def _signed(path: str, body: bytes, nonce: str, headers: dict[str, str], *,
            age_s: int = 0) -> dict[str, str]:
    """``headers`` plus an Authorization header signing them (and the rest) as acme."""
    return {**headers, "Authorization": sign(SECRET, "POST", path, int(time.time()) - age_s,
                                             nonce, body, "acme", headers=headers.items())}


async def test_hmac_signed_requests_and_replays(secure: tuple[GatewayProcess, Path]) -> None:
    path = "/v1/queues/private$/in_a/messages"
    headers = _signed(path, b"signed", "nonce-replay-test-1", _OCTETS)
    status, _, body = await _call(secure, "POST", path, data=b"signed", headers=headers)
    assert status == 201, body
    status, _, body = await _call(secure, "POST", path, data=b"signed", headers=headers)
    assert status == 401 and b"replayed" in body
    tampered = _signed(path, b"signed", "nonce-replay-test-2", _OCTETS)
    status, _, body = await _call(secure, "POST", path, data=b"tampered", headers=tampered)
    assert status == 401 and b"does not match" in body
    stale = _signed(path, b"s", "nonce-replay-test-3", _OCTETS, age_s=3600)
    status, _, body = await _call(secure, "POST", path, data=b"s", headers=stale)
    assert status == 401 and b"outside the replay window" in body


async def test_signatures_cover_the_routing_headers(secure: tuple[GatewayProcess, Path]
                                                    ) -> None:
    """A header that routes or describes the message, added or changed after signing, makes
    the signature wrong; signed as sent, the same headers pass."""
    path = "/v1/messages"
    status, _, body = await _call(secure, "POST", path, data=b"{}",
                                  headers=_signed(path, b"{}", "nonce-routing-ok-1", _ROUTING))
    assert status == 201, body
    accepted = []
    for n, (name, value) in enumerate([("Mq-Destination", "DIRECT=HTTP://gw/msmq/private$/in_a"),
                                       ("Mq-Admin-Queue", "DIRECT=HTTP://gw/msmq/private$/in_a"),
                                       ("Idempotency-Key", "key-2"),
                                       ("Content-Type", "text/plain")]):
        changed = {**_signed(path, b"{}", f"nonce-routing-changed-{n}", _ROUTING),
                   name: value}
        without = {k: v for k, v in _ROUTING.items() if k != name}
        added = {**_signed(path, b"{}", f"nonce-routing-added-{n}", without),
                 name: _ROUTING[name]}
        for how, headers in (("changed", changed), ("added", added)):
            status, _, body = await _call(secure, "POST", path, data=b"{}", headers=headers)
            if not (status == 401 and b"does not match" in body):
                accepted.append((name, how, status))
    assert accepted == []


async def test_rate_limit_is_429_with_retry_after(secure: tuple[GatewayProcess, Path]) -> None:
    statuses = []
    for _ in range(4):
        status, headers, _ = await _call(secure, "POST", "/v1/queues/private$/in_a/messages",
                                         data=b"r", headers=_bearer("slow-key"))
        statuses.append(status)
        if status == 429:
            assert int(headers["Retry-After"]) >= 1
    assert statuses[:2] == [201, 201] and 429 in statuses


def test_curl_over_tls(secure: tuple[GatewayProcess, Path]) -> None:
    proc, root = secure
    base = ["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10",
            "--cacert", str(root / "server" / "cert.pem")]
    url = proc.url + "/v1/queues/private$/in_a/messages"
    sent = subprocess.run([*base, "-H", "Authorization: Bearer acme-key", "--data-binary",
                           "from curl", url], capture_output=True, text=True, check=True)
    assert sent.stdout == "201"
    refused = subprocess.run([*base, "--data-binary", "x", url], capture_output=True,
                             text=True, check=True)
    assert refused.stdout == "401"


async def test_srmp_by_client_certificate(secure: tuple[GatewayProcess, Path]) -> None:
    request = user_message("http://gw/msmq/private$/in_a", b"srmp", ordinal=1)
    headers = {k: v for k, v in request.headers if k not in ("Host", "Content-Length")}
    status, _, body = await _call(secure, "POST", request.path, data=request.body,
                                  headers=headers)
    assert status == 403, body  # no certificate, not an allowed network, not anonymous
    status, _, body = await _call(secure, "POST", request.path, data=request.body,
                                  headers=headers, client_cert=True)
    assert status == 200, body
    other = user_message("http://gw/msmq/private$/secret", b"srmp", ordinal=2)
    status, _, _ = await _call(secure, "POST", other.path, data=other.body,
                               headers={"Content-Type": dict(other.headers)["Content-Type"]},
                               client_cert=True)
    assert status == 403


async def test_declared_oversize_body_is_413_before_reading(
        secure: tuple[GatewayProcess, Path]) -> None:
    status, _, body = await _call(secure, "POST", "/v1/queues/private$/in_a/messages",
                                  data=b"x" * (65 * 1024), headers=_bearer("acme-key"))
    assert status == 413


def test_slow_body_is_408(secure: tuple[GatewayProcess, Path]) -> None:
    proc, root = secure
    raw = socket.create_connection(("127.0.0.1", proc.port), timeout=10)
    with _context(root).wrap_socket(raw, server_hostname="localhost") as tls:
        tls.sendall(b"POST /v1/queues/private$/in_a/messages HTTP/1.1\r\nHost: x\r\n"
                    b"Authorization: Bearer acme-key\r\nContent-Length: 100\r\n\r\npart")
        started = time.monotonic()
        answer = tls.recv(4096)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
    assert time.monotonic() - started < 5


async def test_a_normal_client_is_served_meanwhile(secure: tuple[GatewayProcess, Path]
                                                   ) -> None:
    proc, root = secure
    loop = asyncio.get_running_loop()
    slow = loop.run_in_executor(None, test_slow_body_is_408, secure)
    status, _, _ = await _call(secure, "GET", "/healthz")
    assert status == 200
    await slow


@pytest.mark.parametrize("extra", [
    b"".join(b"X-Pad-%d: y\r\n" % i for i in range(150)),  # over header_count_max (100)
    b"X-Big: " + b"y" * 10_000 + b"\r\n",  # over header_bytes_max (8 KiB)
])
def test_oversized_headers_are_refused(secure: tuple[GatewayProcess, Path], extra: bytes
                                       ) -> None:
    proc, root = secure
    raw = socket.create_connection(("127.0.0.1", proc.port), timeout=10)
    with _context(root).wrap_socket(raw, server_hostname="localhost") as tls:
        tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + extra + b"\r\n")
        answer = tls.recv(4096)
    assert answer.split(b" ")[1] in (b"400", b"431"), answer[:100]


def test_online_backup_with_the_admin_key(secure: tuple[GatewayProcess, Path]) -> None:
    import os
    import sys

    proc, root = secure
    env = {**os.environ, "ENTREPOT_CAFILE": str(root / "server" / "cert.pem")}
    args = [sys.executable, "-m", "gateway", "backup", str(proc.data_dir)]
    refused = subprocess.run([*args, str(root / "backup-refused")], env=env,
                             capture_output=True, text=True, timeout=60)
    # The gateway's refusal: exit 1 (as the admin commands), saying how to give the key.
    assert refused.returncode == 1 and "refused" in refused.stderr, refused.stderr
    done = subprocess.run([*args, str(root / "backup")], capture_output=True, text=True,
                          env={**env, "ENTREPOT_ADMIN_KEY": "root-key"}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (root / "backup" / "MANIFEST.json").exists()


def _operations() -> list[tuple[str, str]]:
    """Every (method, path) the router serves or the OpenAPI document lists, placeholders
    filled: the routes an unauthenticated caller could try."""
    from gateway.web.app import make_app
    from gateway.web.openapi import document
    from gateway.settings import Settings

    values = {"{path}": "private$/in_a", "{id}": "0123abcd", "{name}": "spark",
              "{action}": "commit", "{tail}": "private$/in_a/messages", "{vdir}": "msmq/"}
    found: set[tuple[str, str]] = set()
    for path, operations in document()["paths"].items():
        found.update((method.upper(), path) for method in operations)
    for route in make_app(Settings()).router.routes():
        found.add((route.method if route.method != "*" else "POST", route.resource.canonical))
    filled = []
    for method, path in sorted(found):
        for placeholder, value in values.items():
            path = path.replace(placeholder, value)
        filled.append((method, path.replace("//", "/")))
    return filled


async def test_no_route_is_served_without_credentials(secure: tuple[GatewayProcess, Path]
                                                      ) -> None:
    """Authentication bypass: walk every route with no credential and with a wrong one."""
    operations = _operations()
    assert len(operations) > 30
    for method, path in operations:
        for headers in ({}, _bearer("wrong-key")):
            status, got, body = await _call(secure, method, path, headers=headers,
                                            data=b"{}" if method in ("POST", "PUT") else None)
            if path in ("/healthz", "/readyz", "/metrics", "/v1/openapi.json"):
                assert status == 200, (method, path)
            elif path.startswith("/msmq/"):  # SRMP: a client certificate or nothing
                assert status in (400, 403), (method, path, status, body[:200])
            else:
                assert status == 401, (method, path, status, body[:200])
                assert got["Content-Type"] == "application/problem+json"


async def test_queue_names_cannot_reach_outside_the_store(secure: tuple[GatewayProcess, Path]
                                                         ) -> None:
    """Path traversal: hostile names are refused or kept as names; no file appears outside
    the data directory and every queue file keeps the store's own name pattern."""
    import re

    proc, root = secure
    before = {p for p in root.rglob("*") if proc.data_dir not in p.parents}
    admin = _bearer("root-key")
    for name in ("private$/../../escape", "private$/..%2F..%2Fescape", "../../../tmp/escape",
                 "private$/%2e%2e%2f%2e%2e%2fescape", "private$/a\\..\\..\\escape",
                 "private$/x%00y", "/etc/passwd", "private$/" + "a" * 300):
        for method, suffix, kwargs in (("PUT", "", {"json": {}}),
                                       ("POST", "/messages", {"data": b"t"}),
                                       ("GET", "", {})):
            status, _, body = await _call(secure, method, f"/v1/queues/{name}{suffix}",
                                          headers=admin, **kwargs)
            assert status < 500, (method, name, status, body[:200])
    after = {p for p in root.rglob("*") if proc.data_dir not in p.parents}
    assert after - before <= {p for p in after if p.name.startswith("gateway-")}
    assert not list(Path("/tmp").glob("escape*"))
    lqs = proc.data_dir / "storage" / "lqs"
    assert all(re.fullmatch(r"[0-9a-f]{8}\.[0-9a-f]{8}", p.name)
               for p in lqs.iterdir() if p.is_file()), sorted(p.name for p in lqs.iterdir())


async def test_secrets_are_never_logged(secure: tuple[GatewayProcess, Path]) -> None:
    """Debug logging and the access log on: API keys, the admin key, HMAC secrets and
    signatures never reach the log, whether the credential is accepted or refused."""
    path = "/v1/queues/private$/in_a/messages"
    signed = _signed(path, b"l", "nonce-log-test-1", _OCTETS)
    signature = signed["Authorization"]
    for headers in (_bearer("acme-key"), _bearer("root-key"), _bearer("acme-key-wrong"), signed,
                    {"Authorization": "Basic " + base64.b64encode(b"x:root-key").decode()}):
        await _call(secure, "POST", path, data=b"l", headers=headers)
    proc, _ = secure
    log = proc.log()
    assert "POST /v1/queues/private$/in_a/messages" in log  # the access log is on
    for secret in ("acme-key", "root-key", SECRET.decode(), signature.split("sig=")[-1][:20],
                   base64.b64encode(b"x:root-key").decode()):
        assert secret not in log, secret
