"""Errors raised by the gateway package.

    GatewayError
    ├── ConfigError          bad configuration file, flag or value (exit 2 at start)
    ├── StartupError         the process cannot start: busy port, unusable data dir (exit 2)
    └── ProblemError         a request that gets an RFC 9457 problem answer (has status_hint)

Errors of ``store`` and ``mapping`` have their own roots; the HTTP middleware is the one place
that turns any of them into a response.
"""

from __future__ import annotations

__all__ = ["GatewayError", "ConfigError", "StartupError", "ProblemError"]


class GatewayError(Exception):
    """Root of every error the gateway package raises on purpose."""


class ConfigError(GatewayError):
    """A configuration value is unknown, malformed or out of range; the message names its key."""


class StartupError(GatewayError):
    """The gateway cannot start (busy port, unusable data directory)."""


class AnswerInDoubt(GatewayError):
    """A request was passed on and whoever carried it out went away before answering: it may
    have been done (a message stored or taken). The client gets no answer at all, its
    connection closed, as from a gateway that crashed, so that it is in doubt and not told
    the request failed."""


class ProblemError(GatewayError):
    """A request failed in a way the client must be told about.

    ``status_hint`` is the HTTP status; ``type_slug`` names the problem type (the MSMQ class or
    error where one fits) and becomes the problem's ``type`` URI.
    """

    def __init__(
        self,
        status_hint: int,
        detail: str,
        *,
        type_slug: str = "about:blank",
        title: str | None = None,
        headers: dict[str, str] | None = None,
        extra: dict[str, object] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status_hint = status_hint
        self.detail = detail
        self.type_slug = type_slug
        self.title = title
        self.headers = dict(headers or {})
        self.extra = dict(extra or {})
