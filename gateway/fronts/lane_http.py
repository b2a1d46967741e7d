"""The HTTP of the send lane (gateway.fronts.send_lane): one request read from a buffer, one
answer written as bytes. No I/O here.

The lane takes only what it reads without doubt: ``POST /v1/queues/<path>/messages
HTTP/1.1`` (a REST send) or ``POST /<SRMP virtual directory>[/<path>] HTTP/1.1`` (an SRMP
request), with a plain path (no escape, no query, no empty or dot segment), header names
that are tokens, values of printable ASCII, one ``Content-Length`` and a body of at most
``SEND_LANE_BODY_MAX`` bytes; nothing that changes how the body is read or the connection
kept (``Transfer-Encoding``, ``Content-Encoding``, ``Expect``, ``Upgrade``, ``Connection``
but keep-alive). Anything else is ``PASS``: aiohttp's server takes the connection, with the
bytes read so far, and answers it as it answers every request.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from email.utils import formatdate
from typing import Final, NamedTuple

from aiohttp.http import SERVER_SOFTWARE
from aiohttp.http_parser import SINGLETON_HEADERS

from gateway.web.queue_access import split_tail

__all__ = ["INCOMPLETE", "PASS", "SEND_LANE_BODY_MAX", "Head", "Incomplete", "Pass", "Read",
           "answer_bytes", "read_request"]

# A larger body goes to aiohttp's server, which reads it as a stream.
SEND_LANE_BODY_MAX: Final = 64 << 10

_QUEUES: Final = "/v1/queues/"
# Characters of a path segment (RFC 3986 pchar) but "%": an escape is aiohttp's to read.
_PATH: Final = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/]+")
_TOKEN: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
# Headers that change how the body is read or the connection is kept.
_NOT_TAKEN: Final = frozenset({"transfer-encoding", "content-encoding", "expect", "upgrade",
                               "te", "trailer", "http2-settings", "proxy-connection"})


class Head(NamedTuple):
    """A request the lane takes: a REST send's queue (as in the URL), or the SRMP virtual
    directory (as configured) of an SRMP request; its target and its headers."""

    queue: str
    srmp: str
    target: str
    headers: list[tuple[str, str]]


class Read(NamedTuple):
    """A whole request and where the next one starts in the buffer."""

    head: Head
    body: bytes
    end: int


class Pass:
    """The request is aiohttp's."""


class Incomplete:
    """The request has not all arrived."""


PASS: Final = Pass()
INCOMPLETE: Final = Incomplete()


def read_request(buffer: bytes | bytearray, head_bytes_max: int, header_count_max: int,
                 srmp_dirs: Mapping[str, str] | None = None) -> Read | Pass | Incomplete:
    """The first request in ``buffer``: read whole, not all there, or aiohttp's.
    ``srmp_dirs``: the SRMP virtual directories, lower case to as configured (aiohttp's
    routes take them in any case)."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        if len(buffer) >= head_bytes_max or buffer.count(b"\n") != buffer.count(b"\r\n"):
            return PASS  # (lines ended by a lone LF: aiohttp's to read)
        return INCOMPLETE
    try:
        lines = bytes(buffer[:end]).decode("ascii").split("\r\n")
    except UnicodeDecodeError:
        return PASS
    line = lines[0]
    if (not line.startswith("POST /") or not line.endswith(" HTTP/1.1")
            or len(lines) > header_count_max + 1 or len(line) > head_bytes_max):
        return PASS
    target = line[5:-9]
    segments = target[1:].split("/")
    if not _PATH.fullmatch(target) or any(s in ("", ".", "..") for s in segments):
        return PASS
    queue = srmp = ""
    if target.startswith(_QUEUES):
        queue, rest = split_tail(target[len(_QUEUES):])
        if rest != ["messages"]:  # /v1/queues/a/b/messages is no queue's messages
            return PASS
    else:
        srmp = (srmp_dirs or {}).get(segments[0].lower(), "")
        if not srmp:
            return PASS
    headers: list[tuple[str, str]] = []
    length = -1
    singletons: set[str] = set()  # aiohttp's parser refuses these twice (400)
    for text in lines[1:]:
        name, colon, value = text.partition(":")
        if not colon or len(text) > head_bytes_max or not _TOKEN.fullmatch(name):
            return PASS
        value = value.strip(" \t")
        if not value.isprintable():  # a control character, a tab inside
            return PASS
        lower = name.lower()
        if lower in SINGLETON_HEADERS:
            if lower in singletons:
                return PASS
            singletons.add(lower)
        if lower == "content-length":
            if not value.isdigit() or len(value) > 9:
                return PASS
            length = int(value)
        elif lower in _NOT_TAKEN or (lower == "connection" and value.lower() != "keep-alive"):
            return PASS
        headers.append((name, value))
    if not 0 <= length <= SEND_LANE_BODY_MAX or "host" not in singletons:
        return PASS  # (HTTP/1.1 without Host: aiohttp's 400)
    start = end + 4
    if len(buffer) < start + length:
        return INCOMPLETE
    return Read(Head(queue, srmp, target, headers), bytes(buffer[start:start + length]),
                start + length)


class _Clock:
    """The ``Date`` header, made once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._date = b""

    def date(self) -> bytes:
        now = int(time.time())
        if now != self._second:
            self._second = now
            self._date = formatdate(now, usegmt=True).encode("ascii")  # not the locale's
        return self._date


_CLOCK = _Clock()
_SERVER: Final = SERVER_SOFTWARE.encode("ascii")


def answer_bytes(status: int, reason: str, headers: list[tuple[str, str]],
                 body: bytes) -> bytes:
    """An answer as aiohttp writes it: the response's headers, then Content-Length, Date and
    Server."""
    lines = [f"HTTP/1.1 {status} {reason}\r\n".encode("ascii")]
    lines += [f"{name}: {value}\r\n".encode() for name, value in headers]
    lines.append(b"Content-Length: %d\r\nDate: %s\r\nServer: %s\r\n\r\n"
                 % (len(body), _CLOCK.date(), _SERVER))
    lines.append(body)
    return b"".join(lines)
