"""The JSON object a REST request carries: one reader, one set of 400s."""

from __future__ import annotations

import json

from aiohttp import web

from gateway.errors import ProblemError

__all__ = ["json_body", "json_number"]


_EXACT = 2**53  # beyond it a double no longer holds every integer


def json_number(text: str) -> int | float:
    """A JSON number with a fraction or exponent: JSON has one number type, so ``387.0`` is
    the integer 387 (as JSON Schema's ``integer`` says) and ``1.5`` stays a float. Clients in
    languages without an integer type send positions and sizes that way."""
    value = float(text)
    return int(value) if value.is_integer() and abs(value) <= _EXACT else value


async def json_body(request: web.Request, *, allow_empty: bool) -> dict[str, object]:
    raw = await request.read()
    if not raw.strip() and allow_empty:
        return {}
    try:
        body = json.loads(raw, parse_float=json_number)
    except ValueError as exc:
        raise ProblemError(400, f"body is not JSON: {exc}", type_slug="bad-request") from exc
    if not isinstance(body, dict):
        raise ProblemError(400, "body must be a JSON object", type_slug="bad-request")
    return body
