"""Who a request comes from and what it may touch (pure).

A principal is the admin (everything), a partner (its send and receive allow lists), or
"open" (the gateway has no credentials configured: everything but the admin routes, which
stay loopback-only). Allow-list entries are queue paths, case-insensitive, ``/`` or ``\\``;
a trailing ``*`` makes a prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

from mapping.names import QueueNameError, parse_queue_path

__all__ = ["Principal", "allowed", "OPEN", "ADMIN", "NOBODY"]


def _canonical(pattern: str) -> tuple[str, bool]:
    prefix = pattern.endswith("*")
    text = pattern[:-1] if prefix else pattern
    if prefix:
        return text.replace("\\", "/").lower(), True
    try:
        return parse_queue_path(text).canonical, False
    except QueueNameError:
        return text.replace("\\", "/").lower(), False


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    admin: bool = False
    open: bool = False
    send: tuple[str, ...] = ()
    receive: tuple[str, ...] = ()

    @property
    def scope(self) -> str:
        """Whose an Idempotency-Key or a range consumer is: the admin's, an open gateway's
        clients', or one partner's (none sees or uses another's)."""
        return "admin" if self.admin else "open" if self.open else f"partner:{self.name}"

    @property
    def consumer_owner(self) -> str | None:
        """Whose the range consumers it registers are: a partner's own (no other partner
        sees them); None for the admin and an open gateway's clients, who see them all."""
        return None if self.admin or self.open else self.scope

    def may(self, action: str, queue_canonical: str) -> bool:
        """``action`` is "send" or "receive"; the queue in canonical form."""
        if self.admin or self.open:
            return True
        patterns = self.send if action == "send" else self.receive
        return allowed(patterns, queue_canonical)


def allowed(patterns: tuple[str, ...], queue_canonical: str) -> bool:
    for pattern in patterns:
        text, prefix = _canonical(pattern)
        if (queue_canonical.startswith(text) if prefix else queue_canonical == text):
            return True
    return False


OPEN = Principal("anonymous", open=True)
NOBODY = Principal("an anonymous sender")  # SRMP without a certificate: see srmp_http
ADMIN = Principal("admin", admin=True)
