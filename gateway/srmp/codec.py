"""A whole SRMP request body -> envelope + message body (pure). docs/srmp.md, "MIME framing".

User messages come as ``multipart/related``: the root part (the ``start`` parameter's
Content-Id, else the first part) is the envelope, the part whose Content-Id is ``body@...`` is
the message body (else the second part), ``extension@...`` the extension. Receipts come as a
single ``text/xml`` envelope.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.srmp.envelope import parse_envelope
from gateway.srmp.errors import MimeError
from gateway.srmp.mime import Part, parse_content_type, split_multipart
from gateway.srmp.model import Envelope

__all__ = ["SrmpMessage", "parse_request"]

_XML_TYPES = ("text/xml", "application/soap+xml", "application/xml")


@dataclass(slots=True)
class SrmpMessage:
    """A parsed request (not frozen: gateway.srmp.model says why)."""

    envelope: Envelope
    envelope_raw: bytes
    body: bytes
    body_content_type: str
    extension: bytes | None
    # The request body is ``raw[:body_start] + body + raw[body_end:]``: keeping the head and
    # tail gives back the whole MIME message without storing the body twice.
    body_start: int
    body_end: int
    envelope_start: int = 0
    envelope_end: int = 0


def parse_request(content_type: str, raw: bytes) -> SrmpMessage:
    """Raises: SrmpError (MimeError, EnvelopeError) naming the problem."""
    media, params = parse_content_type(content_type)
    if media in _XML_TYPES:
        return SrmpMessage(parse_envelope(raw), raw, b"", "", None, len(raw), len(raw), 0,
                           len(raw))
    if media != "multipart/related":
        raise MimeError(f"Content-Type {media or '(none)'!r} is neither multipart/related nor "
                        "text/xml")
    boundary = params.get("boundary")
    if not boundary:
        raise MimeError("multipart/related without a boundary parameter")
    parts = split_multipart(raw, boundary)
    root = _root(parts, params.get("start", "").strip("<>"))
    if root.content_type not in _XML_TYPES:
        raise MimeError(f"the envelope part is {root.content_type or 'untyped'!r}, not text/xml")
    rest = [p for p in parts if p is not root]
    body_part = next((p for p in rest if p.content_id.lower().startswith("body@")),
                     rest[0] if rest else None)
    extension = next((p for p in rest if p.content_id.lower().startswith("extension@")), None)
    envelope_raw = root.data(raw)
    envelope = parse_envelope(envelope_raw)
    if body_part is None:
        return SrmpMessage(envelope, envelope_raw, b"", "", None, len(raw), len(raw),
                           root.start, root.end)
    return SrmpMessage(envelope, envelope_raw, body_part.data(raw),
                       body_part.headers.get("content-type", "application/octet-stream"),
                       None if extension is None else extension.data(raw),
                       body_part.start, body_part.end, root.start, root.end)


def _root(parts: list[Part], start: str) -> Part:
    if start:
        for part in parts:
            if part.content_id == start:
                return part
        raise MimeError(f"no part has the Content-Id {start!r} named by start=")
    return parts[0]
