"""An SRMP request as the front door uses it (pure): what every message needs at hand, the
whole envelope only on demand.

Why: a parse worker (gateway.inbound.parse_pool) sends its result to the event loop pickled, and
rebuilding the whole envelope there (model classes, ~45 fields) plus making the message
properties from it would cost the busiest thread, the loop. The worker makes the
properties too and sends the envelope as bytes that are unpickled only when a request needs
more than this summary (a receipt, a signature, an authenticated queue).
"""

from __future__ import annotations

from collections.abc import Callable

from gateway.msmq.message import MessageProperties
from gateway.srmp.codec import SrmpMessage
from gateway.srmp.errors import EnvelopeError
from gateway.srmp.model import Stream
from gateway.srmp.properties import message_properties

__all__ = ["ParsedRequest"]


class ParsedRequest:
    """``kind``, ``to`` and ``message_id`` are the envelope's; ``stream`` its ``<stream>``;
    ``signed`` whether it carries a signature; ``body`` the message body."""

    __slots__ = ("kind", "to", "message_id", "stream", "signed", "body", "_properties",
                 "_error", "_message", "_load")

    def __init__(self, *, kind: str, to: str, message_id: str, stream: Stream | None,
                 signed: bool, body: bytes, properties: MessageProperties | None,
                 error: str | None, message: SrmpMessage | None = None,
                 load: Callable[[], SrmpMessage] | None = None) -> None:
        if message is None and load is None:
            raise ValueError("a parsed request needs its message or a way to load it")
        self.kind = kind
        self.to = to
        self.message_id = message_id
        self.stream = stream
        self.signed = signed
        self.body = body
        self._properties = properties
        self._error = error
        self._message = message
        self._load = load

    @classmethod
    def of(cls, message: SrmpMessage, raw: bytes, *, now_ms: int) -> ParsedRequest:
        """From a whole parse of ``raw``; the properties are made now (an error in them is
        kept and raised by ``properties``, where the front door asked for them before)."""
        properties, error = cls.properties_of(message, raw, now_ms=now_ms)
        env = message.envelope
        return cls(kind=env.kind, to=env.path.to, message_id=env.path.id, stream=env.stream,
                   signed=env.signature is not None, body=message.body,
                   properties=properties, error=error, message=message)

    @staticmethod
    def properties_of(message: SrmpMessage, raw: bytes, *, now_ms: int,
                      mime_parts: bool = True) -> tuple[MessageProperties | None, str | None]:
        try:
            return message_properties(message, raw, now_ms=now_ms, mime_parts=mime_parts), None
        except EnvelopeError as exc:
            return None, exc.reason

    @property
    def message(self) -> SrmpMessage:
        """The whole parse (envelope, extension, positions), loaded on first use."""
        if self._message is None:
            assert self._load is not None
            self._message = self._load()
            self._load = None
        return self._message

    def properties(self) -> MessageProperties:
        """The message's properties, made for this request alone (the store completes them in
        place).

        Raises:
            EnvelopeError: a value SRMP allows and MSMQ does not (a label too long).
        """
        if self._properties is None:
            raise EnvelopeError(self._error or "no message properties")
        return self._properties
