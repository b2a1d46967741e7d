"""The JSON object a REST request carries: one reader, one set of 400s."""

from __future__ import annotations

import json

from aiohttp import web

from gateway.errors import ProblemError

__all__ = ["json_body"]


async def json_body(request: web.Request, *, allow_empty: bool) -> dict[str, object]:
    raw = await request.read()
    if not raw.strip() and allow_empty:
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise ProblemError(400, f"body is not JSON: {exc}", type_slug="bad-request") from exc
    if not isinstance(body, dict):
        raise ProblemError(400, "body must be a JSON object", type_slug="bad-request")
    return body
