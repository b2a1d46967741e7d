"""One partner's requests cannot take every place in flight (both modes: make test runs it
again with one process): a partner holds at most a quarter of
``server.concurrent_requests_max``, and the rest stay for the others."""

from __future__ import annotations

import contextlib
import hashlib
import json
import select
import socket
import time
from collections.abc import Iterator

import pytest

from tests.helpers import GatewayProcess, http_request, serving
from tests.srmp_client import user_message

pytestmark = pytest.mark.workers

CAP = 8


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# The admin, partner b and its queue, in both tests' configurations.
_B = f"""[auth]
admin_key_sha256 = "{_sha('admin-key')}"
[[partners]]
name = "b"
api_key_sha256 = "{_sha('key-b')}"
send = ["in_*"]
[[queues]]
path = "in_b"
"""


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with serving(tmp_path_factory.mktemp("shares"), f"""[server]
concurrent_requests_max = {CAP}
body_timeout = "1h"
[[partners]]
name = "a"
api_key_sha256 = "{_sha('key-a')}"
send = ["in_*"]
{_B}""") as gateway:
        yield gateway


def _slow_send(gateway: GatewayProcess) -> socket.socket:
    """Partner a's send whose body never comes (its headers say 1,000 bytes, 3 come)."""
    sock = socket.create_connection(("127.0.0.1", gateway.port))
    sock.sendall(b"POST /v1/queues/in_b/messages HTTP/1.1\r\nHost: localhost\r\n"
                 b"Authorization: Bearer key-a\r\nContent-Length: 1000\r\n\r\nabc")
    return sock


def test_a_partner_holding_its_share_leaves_places_for_the_others(
        gateway: GatewayProcess) -> None:
    slow = [_slow_send(gateway) for _ in range(CAP)]
    try:
        # At most a quarter of the places (split between the fronts) waits for a's bodies;
        # every other of a's requests is answered at once: 503, naming a's share.
        refused: list[bytes] = []
        waiting = list(slow)
        while len(refused) < CAP - CAP // 4:
            ready, _, _ = select.select(waiting, [], [], 60)  # a bound only
            assert ready, f"only {len(refused)} of partner a's requests were refused"
            for sock in ready:
                refused.append(sock.recv(65536))
                waiting.remove(sock)
        for answer in refused:
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503"), head
            assert "partner 'a'" in json.loads(body)["detail"], body
        # Partner b is served while a's requests wait.
        assert http_request(gateway.url + "/v1/queues/in_b/messages", body=b"b",
                            headers={"Authorization": "Bearer key-b"}) == 201
    finally:
        for sock in slow:
            sock.close()
    # Its places come back once its requests end (here: their clients hung up).
    for _ in range(1200):  # an upper bound only
        status = http_request(gateway.url + "/v1/queues/in_b/messages", body=b"a",
                              headers={"Authorization": "Bearer key-a"})
        if status == 201:
            return
        assert status == 503, status
        time.sleep(0.05)
    raise AssertionError("partner a's places did not come back")


@contextlib.contextmanager
def _strangers(tmp_path_factory: pytest.TempPathFactory, allow_networks: str,
               source: str) -> Iterator[GatewayProcess]:
    """A gateway (SRMP senders allowed from ``allow_networks``) with the quarter of SRMP
    senders nobody vouches for held: CAP slow SRMP requests from ``source``, all but the
    quarter refused 503 while the quarter waits for bodies that never come."""
    root = tmp_path_factory.mktemp("strangers")
    (root / "entrepot.toml").write_text(f"""[server]
concurrent_requests_max = {CAP}
body_timeout = "1h"
shutdown_grace = "1s"
names = ["gw"]
[srmp]
allow_networks = ["{allow_networks}"]
{_B}""")
    gateway = GatewayProcess(root / "data", env={"ENTREPOT_CONFIG": str(root / "entrepot.toml")})
    slow: list[socket.socket] = []
    try:
        gateway.wait_ready()
        for _ in range(CAP):
            sock = socket.create_connection(("127.0.0.1", gateway.port),
                                            source_address=(source, 0))
            sock.sendall(b"POST /msmq/in_b HTTP/1.1\r\nHost: gw\r\n"
                         b"Content-Type: multipart/related; boundary=b\r\n"
                         b"Content-Length: 100000\r\n\r\n--b")
            slow.append(sock)
        refused = 0
        waiting = list(slow)
        while refused < CAP - CAP // 4:
            ready, _, _ = select.select(waiting, [], [], 60)  # a bound only
            assert ready, f"only {refused} of the strangers' requests were refused"
            for sock in ready:
                answer = sock.recv(65536)
                assert answer.startswith(b"HTTP/1.1 503"), answer
                assert b"nobody vouches for" in answer, answer
                waiting.remove(sock)
                refused += 1
        yield gateway
    finally:
        for sock in slow:
            sock.close()
        gateway.stop()


def test_strangers_slow_srmp_bodies_leave_places_for_the_partners(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """SRMP senders nobody vouches for (here: loopback is outside srmp.allow_networks, no
    certificate) are admitted before their body says where it goes: together they hold at
    most a quarter of the places, as one partner does, and partners stay served."""
    with _strangers(tmp_path_factory, "10.9.9.0/24", "127.0.0.1") as gateway:
        assert http_request(gateway.url + "/v1/queues/in_b/messages", body=b"b",
                            headers={"Authorization": "Bearer key-b"}) == 201


def test_strangers_cannot_take_the_places_of_a_trusted_srmp_sender(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """An SRMP sender inside srmp.allow_networks (a Windows server, no certificate) holds a
    share of its own: strangers (here from 127.0.0.2, outside the allowed networks) holding
    their quarter with slow bodies do not keep its messages out."""
    with _strangers(tmp_path_factory, "127.0.0.1/32", "127.0.0.2") as gateway:
        request = user_message("http://gw/msmq/in_b", b"trusted", ordinal=1)
        headers = {k: v for k, v in request.headers if k not in ("Host", "Content-Length")}
        assert http_request(gateway.url + "/msmq/in_b", body=request.body,
                            headers=headers) == 200
