"""A request without a valid credential is refused on its headers, before its body is read:
slow bodies from strangers cannot take the in-flight slots partners need. A client that
hangs up mid-body is not an error of the gateway (no 500, no traceback)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import socket
import struct
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gateway.settings import parse_settings
from tests.helpers import ready_client, serving


def _sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _settings(tmp_path: Path) -> Any:
    return parse_settings({
        "store": {"data_dir": str(tmp_path / "data")},
        "server": {"concurrent_requests_max": 4},
        "auth": {"admin_key_sha256": _sha("admin-key")},
        "partners": [
            {"name": "a", "api_key_sha256": _sha("a-key"), "send": ["private$/a_*"],
             "receive": ["private$/a_*"]},
            {"name": "s", "hmac_secret_file": str(tmp_path / "s.secret"),
             "send": ["private$/a_*"]}],
        "queues": [{"path": "private$/a_in"}],
    })


async def _stall(port: int, authorization: str) -> tuple[asyncio.StreamReader,
                                                           asyncio.StreamWriter]:
    """Headers of a send whose body never comes (3 of 100,000 bytes)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    auth = f"Authorization: {authorization}\r\n" if authorization else ""
    writer.write(("POST /v1/queues/private$/a_in/messages HTTP/1.1\r\nHost: x\r\n"
                  f"{auth}Content-Length: 100000\r\n\r\nabc").encode())
    await writer.drain()
    return reader, writer


@pytest.mark.parametrize("authorization", [
    "", "Bearer wrong-key", "Basic Og==",
    'EP-HMAC-SHA256 partner="nobody", ts="1", nonce="n", signature="AAAA"'])
async def test_strangers_are_refused_before_their_body(aiohttp_client: Any, tmp_path: Path,
                                                       authorization: str) -> None:
    (tmp_path / "s.secret").write_bytes(b"0123456789abcdef0123456789abcdef")
    client = await ready_client(aiohttp_client, _settings(tmp_path))
    port = client.server.port
    stalled = [await _stall(port, authorization) for _ in range(8)]
    try:
        for reader, _ in stalled:  # each answered at once on its headers alone
            status_line = await asyncio.wait_for(reader.readline(), 60)
            assert b" 401 " in status_line, status_line
        response = await client.post("/v1/queues/private$/a_in/messages", data=b"partner",
                                     headers={"Authorization": "Bearer a-key"})
        assert response.status == 201, await response.text()
    finally:
        for _, writer in stalled:
            writer.close()


async def test_a_client_hanging_up_mid_body_is_no_server_error(
        aiohttp_client: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "s.secret").write_bytes(b"0123456789abcdef0123456789abcdef")
    client = await ready_client(aiohttp_client, _settings(tmp_path))
    with caplog.at_level(logging.DEBUG):
        for _ in range(5):
            _, writer = await _stall(client.server.port, "Bearer a-key")
            writer.transport.abort()
        # Wait until the gateway has handled all five (their answers are counted).
        for _ in range(1200):
            text = await (await client.get("/metrics")).text()
            counted = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                          if line.startswith("entrepot_http_requests_total{")
                          and 'method="POST"' in line)
            if counted >= 5:
                break
            await asyncio.sleep(0.05)
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]
    assert _hung_up(text) == 5, text


def _hung_up(metrics: str) -> int:
    """Sends counted 499 (client closed request); asserts none was counted otherwise."""
    counts = {line.split('status="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
              for line in metrics.splitlines()
              if line.startswith("entrepot_http_requests_total{") and 'method="POST"' in line}
    assert set(counts) <= {"499"}, counts
    return int(counts.get("499", 0))


@pytest.mark.workers
def test_a_client_hanging_up_mid_body_is_counted_alike_in_both_modes(
        tmp_path: Path) -> None:
    """499, whether one process or a front took the request (make test runs this with one
    process too)."""
    with serving(tmp_path, f"""[auth]
admin_key_sha256 = "{_sha('admin-key')}"
[[partners]]
name = "a"
api_key_sha256 = "{_sha('a-key')}"
send = ["a_*"]
[[queues]]
path = "a_in"
""") as gateway:
        for _ in range(3):
            with socket.create_connection(("127.0.0.1", gateway.port)) as sock:
                sock.sendall(b"POST /v1/queues/a_in/messages HTTP/1.1\r\nHost: x\r\n"
                             b"Authorization: Bearer a-key\r\nContent-Length: 100000\r\n"
                             b"\r\nabc")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                struct.pack("ii", 1, 0))  # closed with a reset
        for _ in range(1200):  # until the gateway has counted all three (a bound only)
            with urllib.request.urlopen(gateway.url + "/metrics", timeout=30) as answer:
                text = answer.read().decode()
            if _hung_up(text) >= 3:
                break
            time.sleep(0.05)
        assert _hung_up(text) == 3, text
