"""A request body's Content-Encoding undone, strictly and within a size (pure: no I/O).

The gateway decodes bodies itself (aiohttp's decoding is turned off, ``auto_decompress``):
aiohttp takes a gzip stream cut short as if it were whole, so an upload that stopped midway
would be stored as a shorter message. Here a stream must end where its format says, nothing
may follow it, and the decoded size is bounded as it is made: a small body cannot become a
large one in memory.
"""

from __future__ import annotations

import zlib

__all__ = ["CODINGS", "BodyCodingError", "BodyTooLarge", "decode"]

# The codings a body may come in; any other is refused before the body is read (415).
CODINGS = frozenset({"gzip", "deflate", "identity"})


class BodyCodingError(ValueError):
    """The body does not decode as its Content-Encoding says; the message says how."""


class BodyTooLarge(ValueError):
    """The decoded body is over the limit."""


def decode(coding: str, data: bytes, limit: int) -> bytes:
    """``data`` decoded from ``coding`` (one of CODINGS, any case), at most ``limit`` bytes.

    gzip may hold several members one after the other (RFC 1952); deflate is the zlib format
    (RFC 9110), or a bare deflate stream, which some clients send instead. An empty body is
    empty in any coding.

    Raises:
        BodyCodingError: not that format, cut short, or followed by other bytes.
        BodyTooLarge: more than ``limit`` bytes once decoded.
    """
    coding = coding.strip().lower()
    if coding == "identity" or not data:
        return data
    if coding == "gzip":
        return _inflate(data, 16 + zlib.MAX_WBITS, limit, members=True)
    if coding == "deflate":
        zlib_format = data[0] & 0x0F == 8  # RFC 1950: CM = 8 in the first byte's low bits
        return _inflate(data, zlib.MAX_WBITS if zlib_format else -zlib.MAX_WBITS, limit,
                        members=False)
    raise BodyCodingError(f"{coding!r} is not a coding the gateway decodes")


def _inflate(data: bytes, wbits: int, limit: int, *, members: bool) -> bytes:
    out = bytearray()
    rest = data
    first = True
    while True:
        inflater = zlib.decompressobj(wbits)
        pending = rest
        try:
            while pending:
                # At most one byte over the limit is made: enough to know it is over.
                out += inflater.decompress(pending, limit + 1 - len(out))
                if len(out) > limit:
                    raise BodyTooLarge(f"over {limit} bytes once decoded")
                pending = inflater.unconsumed_tail
        except zlib.error as exc:
            raise BodyCodingError(f"not valid: {exc}" if first else
                                  f"{len(rest)} bytes follow the end of the stream that "
                                  "are not a gzip member") from None
        if not inflater.eof:
            raise BodyCodingError("cut short: the stream does not end")
        rest = inflater.unused_data
        if not rest:
            return bytes(out)
        if not members:
            raise BodyCodingError(f"{len(rest)} bytes follow the end of the stream")
        first = False
