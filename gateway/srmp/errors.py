"""Errors of the SRMP codec (pure).

    GatewayError
    └── SrmpError            a request that is not a well-formed SRMP message (HTTP 400)
        ├── MimeError        the multipart/related framing is broken
        └── EnvelopeError    the SOAP envelope is not XML, or not an SRMP envelope

Both name the problem precisely (``reason``), so a sender's operator can tell what to fix.
"""

from __future__ import annotations

from gateway.errors import GatewayError

__all__ = ["SrmpError", "MimeError", "EnvelopeError"]


class SrmpError(GatewayError):
    """Malformed SRMP: answered 400, nothing stored."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MimeError(SrmpError):
    """The MIME framing of the request cannot be split into parts."""


class EnvelopeError(SrmpError):
    """The envelope part is not an SRMP SOAP envelope."""
