"""Errors of the queue domain.

    QueueError                 (gateway.errors.GatewayError)
    ├── BadRequest       400   a malformed name, value or request
    ├── Forbidden        403   a queue the caller may not use this way
    ├── NotFound         404   no such queue, message or transaction (for this caller)
    ├── Conflict         409   the state forbids it now: exists, held, being received
    ├── Gone             410   a range below what the queue still keeps
    ├── TooLarge         413   larger than the store can hold as one record
    ├── Unprocessable    422   well-formed but without a meaning here (no route)
    ├── TooMany          429   over a per-caller limit
    ├── Unavailable      503   the store takes no writes, or the machine quota is reached
    └── StorageFull      507   a queue's quota or the disk is full
        └── QueueFull          the destination queue's own quota (MQMSG_CLASS_NACK_Q_EXCEED_QUOTA)

The classes carry a status hint, as h11's errors do: the domain says what went wrong, and
only the web layer (gateway.web.middlewares) turns that into an HTTP answer. ``type_slug``
names the problem type (the MSMQ class or error where one fits), ``fields`` adds members to
the answer, ``retry_after_s`` tells a sender when to try again.
"""

from __future__ import annotations

from gateway.errors import GatewayError

__all__ = ["QueueError", "BadRequest", "Forbidden", "NotFound", "Conflict", "Gone", "TooLarge",
           "Unprocessable", "TooMany", "Unavailable", "StorageFull", "QueueFull"]


class QueueError(GatewayError):
    """Root of the queue domain's refusals; ``status_hint`` is the HTTP status it maps to."""

    status_hint = 400

    def __init__(self, detail: str, *, type_slug: str = "about:blank", title: str | None = None,
                 retry_after_s: int | None = None,
                 fields: dict[str, object] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.type_slug = type_slug
        self.title = title
        self.retry_after_s = retry_after_s
        self.fields = dict(fields or {})


class BadRequest(QueueError):
    status_hint = 400


class Forbidden(QueueError):
    status_hint = 403


class NotFound(QueueError):
    status_hint = 404


class Conflict(QueueError):
    status_hint = 409


class Gone(QueueError):
    status_hint = 410


class TooLarge(QueueError):
    status_hint = 413


class Unprocessable(QueueError):
    status_hint = 422


class TooMany(QueueError):
    status_hint = 429


class Unavailable(QueueError):
    status_hint = 503


class StorageFull(QueueError):
    status_hint = 507


class QueueFull(StorageFull):
    """The destination queue is over its quota: SRMP senders get a negative acknowledgement
    instead of a refusal, so the inbound pipeline catches this one by name."""
