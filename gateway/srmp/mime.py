"""MIME framing of SRMP requests (pure): ``multipart/related`` split and build.
docs/srmp.md, "MIME framing".

Why our own parser: MSMQ writes each part's data straight into the next ``--boundary`` (no CRLF
before it), which aiohttp's reader and Python's ``email`` package both reject, while RFC 2046
senders put a CRLF there. Both framings are accepted. A part's ``Content-Length``, when present
and followed by a delimiter, says where its data ends (so a body may even contain the boundary
text); otherwise the data ends at the next delimiter, and a CRLF right before it belongs to the
delimiter (RFC 2046). Outgoing messages are built in MSMQ's framing, byte for byte.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.srmp.errors import MimeError

__all__ = ["Part", "parse_content_type", "split_multipart", "join_multipart",
           "PARTS_MAX", "PART_HEADER_BYTES_MAX"]

PARTS_MAX = 8
PART_HEADER_BYTES_MAX = 8192
PART_HEADERS_MAX = 32
BOUNDARY_CHARS_MAX = 200  # RFC 2046 allows 70; MSMQ's are ~30; be generous, not unbounded
_CRLF = b"\r\n"


@dataclass(slots=True)
class Part:
    """One part: its headers (names lower-cased) and where its data lies in the whole body
    (not frozen: gateway.srmp.model says why)."""

    headers: dict[str, str]
    start: int
    end: int

    def data(self, body: bytes) -> bytes:
        return body[self.start:self.end]

    @property
    def content_type(self) -> str:
        return parse_content_type(self.headers.get("content-type", ""))[0]

    @property
    def content_id(self) -> str:
        return self.headers.get("content-id", "").strip().strip("<>")


def parse_content_type(value: str) -> tuple[str, dict[str, str]]:
    """``type/subtype`` (lower-cased) and its parameters (names lower-cased, quotes removed).

    Quoted values may hold spaces, commas, semicolons and backslash escapes. Cached: every
    SRMP request parses its own and its envelope part's, and senders repeat them.

    Raises:
        MimeError: an unterminated quoted string.
    """
    media, params = _parse_content_type(value)
    return media, dict(params)


@functools.lru_cache(maxsize=256)
def _parse_content_type(value: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    media, _, rest = value.partition(";")
    params: dict[str, str] = {}
    i, n = 0, len(rest)
    while i < n:
        while i < n and rest[i] in " \t;":
            i += 1
        start = i
        while i < n and rest[i] not in "=;":
            i += 1
        name = rest[start:i].strip().lower()
        if i >= n or rest[i] == ";":
            continue  # a bare token without a value: ignored
        i += 1  # '='
        while i < n and rest[i] in " \t":
            i += 1
        if i < n and rest[i] == '"':
            i += 1
            chars = []
            while i < n and rest[i] != '"':
                if rest[i] == "\\" and i + 1 < n:
                    i += 1
                chars.append(rest[i])
                i += 1
            if i >= n:
                raise MimeError(f"Content-Type parameter {name!r}: unterminated quoted string")
            i += 1
            param = "".join(chars)
        else:
            start = i
            while i < n and rest[i] != ";":
                i += 1
            param = rest[start:i].strip()
        if name:
            params[name] = param
    return media.strip().lower(), tuple(params.items())


def _parse_headers(block: bytes, where: str) -> dict[str, str]:
    headers: dict[str, str] = {}
    lines = block.split(_CRLF) if _CRLF in block else block.split(b"\n")
    for raw in lines:
        if not raw:
            continue
        if raw[:1] in (b" ", b"\t") and headers:  # obsolete line folding
            last = next(reversed(headers))
            headers[last] += " " + raw.strip().decode("latin-1")
            continue
        name, sep, value = raw.partition(b":")
        if not sep or not name.strip() or name != name.strip():
            raise MimeError(f"{where}: malformed header line {raw[:60]!r}")
        if len(headers) >= PART_HEADERS_MAX:
            raise MimeError(f"{where}: more than {PART_HEADERS_MAX} headers")
        headers[name.decode("latin-1").lower()] = value.strip().decode("latin-1")
    return headers


def _content_length(headers: dict[str, str], where: str) -> int | None:
    raw = headers.get("content-length")
    if raw is None:
        return None
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 12:
        raise MimeError(f"{where}: Content-Length {raw!r} is not a byte count")
    return int(raw)


def split_multipart(body: bytes, boundary: str) -> list[Part]:
    """The parts of a ``multipart/related`` body (preamble and epilogue ignored).

    Raises:
        MimeError: no opening delimiter, a part without a header end, no closing delimiter,
            too many parts, oversized part headers, a bad boundary.
    """
    if not boundary or len(boundary) > BOUNDARY_CHARS_MAX:
        raise MimeError(f"boundary must be 1..{BOUNDARY_CHARS_MAX} characters")
    try:
        delimiter = b"--" + boundary.encode("ascii")
    except UnicodeEncodeError:
        raise MimeError("boundary is not ASCII") from None
    if body.startswith(delimiter):
        pos = 0
    else:
        pos = body.find(_CRLF + delimiter)
        if pos < 0:
            raise MimeError("no opening boundary delimiter")
        pos += 2
    parts: list[Part] = []
    while True:
        pos += len(delimiter)
        if body.startswith(b"--", pos):
            if not parts:
                raise MimeError("closing delimiter before any part")
            return parts
        if len(parts) >= PARTS_MAX:
            raise MimeError(f"more than {PARTS_MAX} parts")
        where = f"part {len(parts) + 1}"
        while body[pos:pos + 1] in (b" ", b"\t"):  # transport padding after a delimiter
            pos += 1
        if body.startswith(_CRLF, pos):
            pos += 2
        elif body.startswith(b"\n", pos):
            pos += 1
        else:
            raise MimeError(f"{where}: boundary delimiter not followed by a line end")
        head_end, sep_len = _header_end(body, pos, where)
        headers = _parse_headers(body[pos:head_end], where)
        start = head_end + sep_len
        end, pos = _data_end(body, start, delimiter, _content_length(headers, where), where)
        parts.append(Part(headers, start, end))


def _header_end(body: bytes, pos: int, where: str) -> tuple[int, int]:
    if body.startswith(_CRLF, pos):  # a part with no headers
        return pos, 2
    limit = pos + PART_HEADER_BYTES_MAX
    crlf = body.find(b"\r\n\r\n", pos, limit + 4)
    # Only an LF-only end before the CRLF one matters: without the bound this search ran on
    # through a binary body up to the header limit.
    lf = body.find(b"\n\n", pos, crlf + 2 if crlf >= 0 else limit + 2)
    if crlf >= 0 and (lf < 0 or crlf < lf):
        return crlf, 4
    if lf >= 0:
        return lf, 2
    if len(body) - pos > PART_HEADER_BYTES_MAX:
        raise MimeError(f"{where}: headers longer than {PART_HEADER_BYTES_MAX} bytes")
    raise MimeError(f"{where}: headers not terminated by an empty line")


def _data_end(body: bytes, start: int, delimiter: bytes, length: int | None,
              where: str) -> tuple[int, int]:
    """(end of the part's data, position of the delimiter that ends it)."""
    if length is not None and start + length <= len(body):
        end = start + length
        if body.startswith(delimiter, end):
            return end, end  # MSMQ framing
        if body.startswith(_CRLF + delimiter, end):
            return end, end + 2  # RFC 2046 framing
    at = body.find(delimiter, start)
    if at < 0:
        if length is not None:
            raise MimeError(f"{where}: no boundary delimiter after its {length} bytes of data "
                            "(Content-Length) nor later")
        raise MimeError(f"{where}: no closing boundary delimiter")
    # No usable Content-Length: the first delimiter ends the data; a CRLF right before it is
    # the delimiter's (RFC 2046), otherwise the data ran straight into it (MSMQ).
    if at - 2 >= start and body[at - 2:at] == _CRLF:
        return at - 2, at
    return at, at


def join_multipart(boundary: str, parts: Sequence[tuple[Sequence[tuple[str, str]], bytes]]
                   ) -> bytes:
    """A body in MSMQ's framing: each part's data runs straight into the next delimiter."""
    delimiter = b"--" + boundary.encode("ascii")
    out = bytearray()
    for headers, data in parts:
        out += delimiter + _CRLF
        for name, value in headers:
            out += f"{name}: {value}".encode("latin-1") + _CRLF
        out += _CRLF + data
    out += delimiter + b"--" + _CRLF
    return bytes(out)
