"""The send lane's HTTP (gateway.fronts.lane_http): it reads only what it reads without
doubt, and leaves every other request, whole or not, to aiohttp's server."""

from __future__ import annotations

import re

import pytest

from gateway.fronts.lane_http import (
    INCOMPLETE,
    PASS,
    SEND_LANE_BODY_MAX,
    Read,
    answer_bytes,
    read_request,
)

HEAD_MAX = 8190
COUNT_MAX = 32
SEND = b"POST /v1/queues/orders/messages HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi"


def _read(data: bytes) -> object:
    return read_request(data, HEAD_MAX, COUNT_MAX)


def _with(header: bytes) -> bytes:
    """SEND with one more header line."""
    return SEND.replace(b"Host: h\r\n", b"Host: h\r\n" + header + b"\r\n")


def test_a_plain_send_is_read_whole() -> None:
    read = _read(SEND + b"POST /next")
    assert isinstance(read, Read)
    assert (read.head.queue, read.head.target, read.head.headers, read.body) == (
        "orders", "/v1/queues/orders/messages", [("Host", "h"), ("Content-Length", "2")],
        b"hi")
    assert SEND[read.end:] + b"POST /next" == b"POST /next"  # the next request starts there


@pytest.mark.parametrize("data, queue, headers", [
    (SEND.replace(b"orders", b"PRIVATE$/orders"), "PRIVATE$/orders", None),
    (SEND.replace(b"orders", b"a.b-c_d~e!$&'()*+,;=:@"), "a.b-c_d~e!$&'()*+,;=:@", None),
    (_with(b"Mq-Label:  spaced \t"), "orders", ("Mq-Label", "spaced")),  # OWS both sides
    (_with(b"Connection: Keep-Alive"), "orders", ("Connection", "Keep-Alive")),
    (_with(b"X-Empty:"), "orders", ("X-Empty", "")),
])
def test_what_the_lane_reads(data: bytes, queue: str, headers: tuple[str, str] | None) -> None:
    read = _read(data)
    assert isinstance(read, Read)
    assert read.head.queue == queue
    if headers is not None:
        assert headers in read.head.headers


def test_an_empty_body_is_read() -> None:
    read = _read(SEND.replace(b"Content-Length: 2", b"Content-Length: 0")[:-2])
    assert isinstance(read, Read) and read.body == b""


@pytest.mark.parametrize("data", [
    SEND[:20],  # the head not all there
    SEND[:-1],  # the body not all there
    SEND.replace(b"Content-Length: 2", b"Content-Length: %d" % SEND_LANE_BODY_MAX),
])
def test_a_request_not_all_there_waits(data: bytes) -> None:
    assert _read(data) is INCOMPLETE


@pytest.mark.parametrize("data", [
    SEND.replace(b"POST", b"PUT"),
    SEND.replace(b"POST", b"post"),
    SEND.replace(b"HTTP/1.1", b"HTTP/1.0"),
    SEND.replace(b"/messages", b"/messages?x=1"),
    SEND.replace(b"orders", b"ord%65rs"),
    SEND.replace(b"orders", b"or#ders"),
    SEND.replace(b"orders", b"a/./b"),
    SEND.replace(b"orders", b"a/../orders"),
    SEND.replace(b"orders", b"a//b"),
    SEND.replace(b"orders", b"a/b"),  # a path under queue a, not a send
    SEND.replace(b"orders", b"or ders"),
    SEND.replace(b"orders", "ördres".encode()),
    SEND.replace(b"POST /v1", b"POST http://h/v1"),  # absolute form
    SEND.replace(b"\r\n", b"\n"),  # lines ended by LF alone
    SEND.replace(b"Host: h\r\n", b"Host: h\n"),
    b"POST /v1/queues/orders/messages HTTP/1.1\r\nX: " + b"x" * HEAD_MAX,  # no end in sight
    _with(b"X-Long: " + b"x" * HEAD_MAX),
    SEND.replace(b"orders", b"o" * HEAD_MAX),
    _with(b"".join(b"X-%d: 1\r\n" % i for i in range(COUNT_MAX)).rstrip()),
    _with("X-Name: é".encode()),
    _with(b"X-Name: a\tb"),
    _with(b"X-Name: a\x01b"),
    _with(b"X-Name : a"),
    _with(b"X-Name\x7f: a"),
    _with(b" folded"),
    _with(b"no colon"),
    _with(b"Content-Length: 2"),  # twice
    SEND.replace(b"Content-Length: 2\r\n", b""),
    SEND.replace(b"Content-Length: 2", b"Content-Length: +2"),
    SEND.replace(b"Content-Length: 2", b"Content-Length: 0x2"),
    SEND.replace(b"Content-Length: 2", b"Content-Length: %d" % (SEND_LANE_BODY_MAX + 1)),
    _with(b"Transfer-Encoding: chunked"),
    _with(b"Content-Encoding: gzip"),
    _with(b"Expect: 100-continue"),
    _with(b"Upgrade: h2c"),
    _with(b"Connection: close"),
    _with(b"Connection: Upgrade"),
    # What aiohttp's parser refuses (400) or reads otherwise:
    SEND.replace(b"Host: h\r\n", b""),  # HTTP/1.1 without Host
    _with(b"Host: h2"),
    _with(b"host: h"),
    _with(b"User-Agent: a\r\nuser-agent: b"),
    _with(b"ETag: a\r\nETag: a"),
    _with(b"Proxy-Connection: close"),
])
def test_anything_else_is_aiohttps(data: bytes) -> None:
    assert _read(data) is PASS


def test_an_answer_is_written_as_aiohttp_writes_it() -> None:
    data = answer_bytes(201, "Created", [("Location", "/v1/queues/q/messages/1"),
                                         ("Content-Type", "application/json")], b'{"a":1}')
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[:4] == ["HTTP/1.1 201 Created", "Location: /v1/queues/q/messages/1",
                         "Content-Type: application/json", "Content-Length: 7"]
    assert re.fullmatch(r"Date: \w{3}, \d\d \w{3} \d{4} \d\d:\d\d:\d\d GMT", lines[4])
    assert re.fullmatch(r"Server: Python/3\.\d+ aiohttp/\S+", lines[5])
    assert body == b'{"a":1}'


DIRS = {"msmq": "msmq", "partners": "Partners"}


@pytest.mark.parametrize("target, srmp", [
    (b"/msmq/private$/orders", "msmq"),
    (b"/MSMQ/private$/orders", "msmq"),  # aiohttp's route takes any case
    (b"/msmq", "msmq"),
    (b"/PARTNERS/q", "Partners"),  # named as configured (the metrics' label)
])
def test_an_srmp_request_is_read(target: bytes, srmp: str) -> None:
    read = read_request(SEND.replace(b"/v1/queues/orders/messages", target), HEAD_MAX,
                        COUNT_MAX, DIRS)
    assert isinstance(read, Read)
    assert (read.head.srmp, read.head.queue, read.head.target) == (srmp, "", target.decode())


@pytest.mark.parametrize("target", [b"/msmq/", b"/msmqx/q", b"/other/q", b"/msmq/a%20b",
                                    b"/msmq/q?x", b"/msmq//q", b"/msmq/./q"])
def test_other_paths_are_aiohttps(target: bytes) -> None:
    data = SEND.replace(b"/v1/queues/orders/messages", target)
    assert read_request(data, HEAD_MAX, COUNT_MAX, DIRS) is PASS
    assert read_request(SEND.replace(b"/v1/queues/orders/messages", b"/msmq/q"), HEAD_MAX,
                        COUNT_MAX) is PASS  # no SRMP directories
