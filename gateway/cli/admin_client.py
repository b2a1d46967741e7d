"""The admin commands' HTTP client: one blocking request at a time against a running gateway,
errors turned into ``AdminError`` with the exit code they mean."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from gateway.errors import GatewayError

__all__ = ["AdminClient", "AdminError", "EXIT_REFUSED", "EXIT_UNREACHABLE", "EXIT_NOT_FOUND"]

EXIT_REFUSED = 1  # the gateway answered with an error (its detail is printed)
EXIT_UNREACHABLE = 3  # no answer: connection refused, reset, timed out, TLS failed
EXIT_NOT_FOUND = 4  # the queue, message, link or transaction does not exist


class AdminError(GatewayError):
    def __init__(self, message: str, code: int, problem_type: str = "") -> None:
        """``problem_type``: the gateway's problem ``type`` when it refused."""
        super().__init__(message)
        self.code = code
        self.problem_type = problem_type


def ca_context(cafile: str, option: str = "--cafile") -> ssl.SSLContext | None:
    """A TLS context trusting ``cafile`` (None without one).

    Raises: AdminError (2) naming the file when it cannot be loaded."""
    if not cafile:
        return None
    try:
        return ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise AdminError(f"{option} {cafile}: cannot load it as CA certificates: {reason}",
                         2) from None


class AdminClient:
    def __init__(self, url: str, token: str = "", cafile: str = "", timeout_s: float = 30.0
                 ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s
        self._context = ca_context(cafile)

    def call(self, method: str, path: str, *, doc: Any = None, body: bytes | None = None,
             headers: dict[str, str] | None = None, query: dict[str, Any] | None = None
             ) -> Any:
        """The JSON answer (None for an empty one)."""
        url = self.url + urllib.parse.quote(path, safe="/$;%")  # ids come pre-quoted
        if query:
            url += "?" + urllib.parse.urlencode(query)
        sent = dict(headers or {})
        if doc is not None:
            body = json.dumps(doc).encode()
            sent["Content-Type"] = "application/json"
        if self.token:
            sent["Authorization"] = f"Bearer {self.token}"
        request = urllib.request.Request(url, data=body, method=method, headers=sent)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s,
                                        context=self._context) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            detail, kind = _problem(exc)
            code = EXIT_NOT_FOUND if exc.code == 404 else EXIT_REFUSED
            raise AdminError(f"{method} {path}: {exc.code} {detail}", code, kind) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AdminError(f"cannot reach the gateway at {self.url}: {reason}",
                             EXIT_UNREACHABLE) from None
        return json.loads(raw) if raw.strip() else None


def _problem(exc: urllib.error.HTTPError) -> tuple[str, str]:
    """The refusal's detail and problem type ("" when it is not a problem document)."""
    try:
        problem = json.loads(exc.read())
    except (ValueError, OSError):
        return str(exc.reason), ""
    if not isinstance(problem, dict):
        return str(exc.reason), ""
    return (str(problem.get("detail") or problem.get("title") or exc.reason),
            str(problem.get("type", "")))
