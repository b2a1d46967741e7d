"""Clients that ask for a large answer and never read it, from outside, on a real gateway (in
both modes: make test runs it again with one process). Their answers wait at most
``server.body_timeout`` for them; then the connection is closed, and the place the request
held among ``server.concurrent_requests_max`` is free for others."""

from __future__ import annotations

import re
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import GatewayProcess, http_request

pytestmark = pytest.mark.workers

QUEUE = "/v1/queues/big"
BODY = bytes(range(256)) * 6144  # 1.5 MiB: four of them are an answer no socket buffer holds


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    root = tmp_path_factory.mktemp("slow-readers")
    (root / "entrepot.toml").write_text(
        '[server]\nbody_timeout = "1s"\nconcurrent_requests_max = 1\n')
    gateway = GatewayProcess(root / "data", env={"ENTREPOT_CONFIG": str(root / "entrepot.toml")})
    try:
        gateway.wait_ready()
        assert http_request(gateway.url + QUEUE, method="PUT", body=b"{}") == 201
        for _ in range(4):
            assert http_request(gateway.url + QUEUE + "/messages", body=BODY) == 201
        yield gateway
    finally:
        gateway.stop()


def _ask_and_never_read(gateway: GatewayProcess, target: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", gateway.port))
    sock.sendall(f"GET {target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
                 .encode())
    # Its answer has begun (nothing read): from here on it holds the one place in flight.
    assert select.select([sock], [], [], 60)[0], "the answer never began"  # a bound only
    return sock


def _read_to_end(sock: socket.socket) -> bytes:
    sock.settimeout(60)  # a bound only: the gateway closed this connection already
    got = b""
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except ConnectionResetError:
            return got
        if not chunk:
            return got
        got += chunk


def _send_until_admitted(gateway: GatewayProcess) -> None:
    """The one place in flight is held by the unread answer until the gateway gives up on
    its reader; a send is 503 until then."""
    for _ in range(1200):  # an upper bound only
        status = http_request(gateway.url + QUEUE + "/messages", body=b"next")
        if status == 201:
            return
        assert status == 503, status
        time.sleep(0.05)
    raise AssertionError("the unread answer kept its place in flight")


@pytest.mark.parametrize("target", [f"{QUEUE}/messages?limit=10", f"{QUEUE}/range?from=1&to=5"])
def test_an_answer_nobody_reads_gives_its_place_back(gateway: GatewayProcess,
                                                     target: str) -> None:
    sock = _ask_and_never_read(gateway, target)
    try:
        _send_until_admitted(gateway)
        got = _read_to_end(sock)
    finally:
        sock.close()
    head, _, body = got.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head[:200]
    length = re.search(rb"Content-Length: (\d+)", head)
    # Cut short: the connection was closed before the whole answer was taken.
    assert len(body) < (int(length.group(1)) if length else 4 * len(BODY)), len(body)
