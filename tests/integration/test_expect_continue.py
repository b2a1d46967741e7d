"""``Expect: 100-continue`` from outside (both modes: make test runs it again with one
process): the gateway says "100 Continue" only to a request it will take the body of. One
without a credential, or declaring a body over the limit, gets its final answer at once and
sends no body; one that passes the checks gets the 100, sends its body, and is stored."""

from __future__ import annotations

import hashlib
import json
import socket
import urllib.request
from collections.abc import Iterator

import pytest

from tests.helpers import GatewayProcess, serving

pytestmark = pytest.mark.workers

KEY = "expect-key"
PARTNER_KEY = "expect-partner-key"
SLOW_KEY = "expect-slow-key"
BODY_MAX = 4096


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with serving(tmp_path_factory.mktemp("expect"), f"""[server]
request_body_max = "{BODY_MAX}B"
[auth]
admin_key_sha256 = "{hashlib.sha256(KEY.encode()).hexdigest()}"
[[partners]]
name = "acme"
api_key_sha256 = "{hashlib.sha256(PARTNER_KEY.encode()).hexdigest()}"
send = ["private$/expect"]
[[partners]]
name = "slow"
api_key_sha256 = "{hashlib.sha256(SLOW_KEY.encode()).hexdigest()}"
send = ["private$/expect"]
rate = 1
burst = 1
[[queues]]
path = "private$/expect"
[[queues]]
path = "private$/other"
""") as gateway:
        yield gateway


def _head(gateway: GatewayProcess, method: str, path: str, length: int,
          headers: str) -> tuple[socket.socket, bytes]:
    """Send a request's headers only, and read the first answer's head."""
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=60)
    sock.sendall((f"{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n"
                  f"{headers}\r\n").encode())
    return sock, _read_head(sock)


def _read_head(sock: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(1)
        assert chunk, data
        data += chunk
    return data


@pytest.mark.parametrize("method,path", [("POST", "/v1/queues/private$/expect/messages"),
                                         ("POST", "/v1/messages"),
                                         ("PUT", "/v1/queues/private$/made")])
def test_no_continue_for_a_request_without_a_credential(gateway: GatewayProcess, method: str,
                                                        path: str) -> None:
    sock, head = _head(gateway, method, path, 100, "Expect: 100-continue\r\n")
    with sock:
        assert head.startswith(b"HTTP/1.1 401 "), head


def test_no_continue_for_a_body_over_the_limit(gateway: GatewayProcess) -> None:
    sock, head = _head(gateway, "POST", "/v1/queues/private$/expect/messages", BODY_MAX + 1,
                       f"Expect: 100-continue\r\nAuthorization: Bearer {KEY}\r\n")
    with sock:
        assert head.startswith(b"HTTP/1.1 413 "), head


@pytest.mark.parametrize("size", [BODY_MAX, BODY_MAX + 1])
def test_a_chunked_body_is_held_to_the_limit_when_it_arrives_whole(gateway: GatewayProcess,
                                                                   size: int) -> None:
    """No length declared, and the whole body in one write with its headers: the gate
    takes it as it arrived, and refuses it (413, nothing stored) when it is over the
    limit."""
    path = "/v1/queues/private$/other"

    def count() -> int:
        asked = urllib.request.Request(gateway.url + path,
                                       headers={"Authorization": f"Bearer {KEY}"})
        with urllib.request.urlopen(asked, timeout=60) as answer:
            return int(json.load(answer)["messages"])

    before = count()
    with socket.create_connection(("127.0.0.1", gateway.port), timeout=60) as sock:
        sock.sendall((f"POST {path}/messages HTTP/1.1\r\nHost: x\r\n"
                      f"Authorization: Bearer {KEY}\r\nTransfer-Encoding: chunked\r\n"
                      f"Connection: close\r\n\r\n{size:x}\r\n").encode()
                     + b"x" * size + b"\r\n0\r\n\r\n")
        head = _read_head(sock)
    if size > BODY_MAX:
        assert head.startswith(b"HTTP/1.1 413 "), head
        assert count() == before
    else:
        assert head.startswith(b"HTTP/1.1 201 "), head
        assert count() == before + 1


@pytest.mark.parametrize("method,path,body,status,key", [
    ("POST", "/v1/queues/private$/expect/messages", b"after the 100", b"201", KEY),
    ("PUT", "/v1/queues/private$/made", b"{}", b"201", KEY),
    ("POST", "/v1/queues/private$/expect/messages", b"acme", b"201", PARTNER_KEY)])
def test_continue_then_the_body_for_an_admitted_request(
        gateway: GatewayProcess, method: str, path: str, body: bytes, status: bytes,
        key: str) -> None:
    sock, head = _head(gateway, method, path, len(body),
                       f"Expect: 100-continue\r\nAuthorization: Bearer {key}\r\n"
                       "Content-Type: application/json\r\n")
    with sock:
        assert head == b"HTTP/1.1 100 Continue\r\n\r\n", head
        sock.sendall(body)
        answer = _read_head(sock)
        assert answer.startswith(b"HTTP/1.1 " + status), answer


@pytest.mark.parametrize("method,path", [("POST", "/v1/queues/private$/other/messages"),
                                         ("POST", "/v1/queues/private$/expect/receive"),
                                         ("PUT", "/v1/queues/private$/made_by_acme"),
                                         ("POST", "/v1/queues/private$/expect/purge"),
                                         ("POST", "/v1/admin/backup"),
                                         ("POST", "/v1/links/abc/resume")])
def test_no_continue_for_a_partner_the_queue_refuses(gateway: GatewayProcess, method: str,
                                                     path: str) -> None:
    # The permission is known from the path and the credential: the body is not needed.
    sock, head = _head(gateway, method, path, 2,
                       f"Expect: 100-continue\r\nAuthorization: Bearer {PARTNER_KEY}\r\n"
                       "Content-Type: application/json\r\n")
    with sock:
        assert head.startswith(b"HTTP/1.1 403 "), head


@pytest.mark.parametrize("method,path", [
    ("POST", "/v1/queues/private$/expect%zz/messages"),
    ("POST", "/v1/queues/private$/expect%00/messages"),
    ("PUT", "/v1/queues/private$/made_by_slow"), ("POST", "/v1/queues/private$/other/purge"),
    ("PATCH", "/v1/queues/private$/expect/messages")])
def test_a_partner_over_its_rate_gets_429_whatever_it_asks(gateway: GatewayProcess,
                                                          method: str, path: str) -> None:
    # Bad escapes, management routes and routes the owner answers spend a token first, in
    # one process and with fronts, with Expect too: a refusal is no way around the rate.
    for _ in range(5):  # a token may come back between the two requests on a slow machine
        sock, _ = _head(gateway, "GET", "/v1/queues", 0,
                        f"Authorization: Bearer {SLOW_KEY}\r\n")
        sock.close()
        sock, head = _head(gateway, method, path, 2,
                           f"Expect: 100-continue\r\nAuthorization: Bearer {SLOW_KEY}\r\n")
        sock.close()
        if head.startswith(b"HTTP/1.1 429 "):
            break
    assert head.startswith(b"HTTP/1.1 429 "), head


@pytest.mark.parametrize("path", ["/v1/queues/private$/other%00/messages",
                                  "/v1/queues/private$/other%zz/messages"])
def test_a_bad_queue_path_is_refused_before_the_body(gateway: GatewayProcess,
                                                     path: str) -> None:
    for key in (PARTNER_KEY, KEY):
        sock, head = _head(gateway, "POST", path, 2,
                           f"Expect: 100-continue\r\nAuthorization: Bearer {key}\r\n")
        with sock:
            assert head.startswith(b"HTTP/1.1 400 "), head
    sock, head = _head(gateway, "POST", path, 2, "Expect: 100-continue\r\n")
    with sock:
        assert head.startswith(b"HTTP/1.1 401 "), head  # a stranger learns nothing more


@pytest.mark.parametrize("method,path", [("PUT", "/v1/queues/private$/made_by_acme"),
                                         ("POST", "/v1/queues/private$/expect/purge"),
                                         ("POST", "/v1/queues/private%24%2Fother/messages"),
                                         ("POST", "/v1/admin/backup"),
                                         ("POST", "/v1/links/abc/pause")])
def test_a_refused_partner_is_answered_before_a_body_it_has_not_sent(
        gateway: GatewayProcess, method: str, path: str) -> None:
    # Without Expect too: with fronts, a request the owner answers (management, an escaped
    # path) was passed on only once its body had come, then refused.
    sock, head = _head(gateway, method, path, 2, f"Authorization: Bearer {PARTNER_KEY}\r\n")
    with sock:
        assert head.startswith(b"HTTP/1.1 403 "), head


def test_an_unknown_expectation_is_417(gateway: GatewayProcess) -> None:
    sock, head = _head(gateway, "POST", "/v1/queues/private$/expect/messages", 1,
                       f"Expect: 200-ok\r\nAuthorization: Bearer {KEY}\r\n")
    with sock:
        assert head.startswith(b"HTTP/1.1 417 "), head


def test_a_path_no_route_serves_gets_one_continue(gateway: GatewayProcess) -> None:
    """The router answers the expectation of a path or method it does not serve; the
    body's reader must not answer it a second time (with fronts it did, twice)."""
    sock, head = _head(gateway, "POST", "/healthz", 2,
                       f"Expect: 100-continue\r\nAuthorization: Bearer {KEY}\r\n")
    with sock:
        assert head == b"HTTP/1.1 100 Continue\r\n\r\n", head
        sock.sendall(b"{}")
        answer = _read_head(sock)
        assert answer.startswith(b"HTTP/1.1 405 "), answer
