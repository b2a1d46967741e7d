"""RFC 9457 problem details: the one shape of every error answer."""

from __future__ import annotations

import json
from collections.abc import Mapping
from http import HTTPStatus

from aiohttp import web

from gateway.errors import ProblemError
from gateway.queues.errors import QueueError

__all__ = ["PROBLEM_CONTENT_TYPE", "problem_response", "PROBLEM_BASE_URI", "as_problem",
           "http_problem"]

PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_BASE_URI = "https://entrepot.dev/problems/"


def problem_response(
    status: int,
    detail: str,
    *,
    type_slug: str = "about:blank",
    title: str | None = None,
    instance: str | None = None,
    headers: Mapping[str, str] | None = None,
    extra: Mapping[str, object] | None = None,
) -> web.Response:
    """Build an ``application/problem+json`` response.

    ``type_slug`` is an MSMQ class or error name (``MQ_ERROR_ILLEGAL_FORMATNAME``) or a short
    slug; it is turned into a ``type`` URI so clients can switch on it.
    """
    body: dict[str, object] = {
        "type": type_slug if type_slug == "about:blank" else PROBLEM_BASE_URI + type_slug,
        "title": title or _reason(status),
        "status": status,
        "detail": detail,
    }
    if instance is not None:
        body["instance"] = instance
    if extra:
        body.update(extra)
    return web.Response(
        status=status,
        body=json.dumps(body).encode(),
        content_type=PROBLEM_CONTENT_TYPE,
        headers=dict(headers or {}),
    )


def as_problem(exc: QueueError) -> ProblemError:
    """The HTTP answer to a refusal of the queue domain: its status hint, its problem type,
    its fields, and Retry-After when it says when to try again."""
    headers = {} if exc.retry_after_s is None else {"Retry-After": str(exc.retry_after_s)}
    return ProblemError(exc.status_hint, exc.detail, type_slug=exc.type_slug, title=exc.title,
                        headers=headers, extra=exc.fields)


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def http_problem(exc: web.HTTPException) -> ProblemError:
    """An aiohttp HTTP error (405 with its Allow, 413, ...) as the problem answered for it."""
    headers = {str(k): v for k, v in exc.headers.items()  # plain str: it may cross processes
               if k.lower() in ("allow", "retry-after")}
    detail = exc.text if exc.text and not exc.text.startswith(f"{exc.status}:") else exc.reason
    if isinstance(exc, web.HTTPMethodNotAllowed):  # its text names neither method
        allowed = headers.get("Allow") or ",".join(sorted(exc.allowed_methods))
        return ProblemError(405, f"method {exc.method} is not served here (allowed: "
                            f"{allowed})", headers=headers, type_slug="method-not-allowed")
    if exc.status == 413:  # aiohttp's client_max_size: a chunked or decoded body grew over
        return ProblemError(413, detail + " (the limit is server.request_body_max)",
                            headers=headers, type_slug="body-too-large")
    return ProblemError(exc.status, detail, headers=headers)
