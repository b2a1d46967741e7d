"""JSON on the hot paths (a message's stored properties, the REST answers), through orjson.

Why: orjson encodes and decodes a message's properties several times faster than the
standard library, and every send and every receive does one or both, plus an answer. orjson
refuses a few things the standard library takes (integers beyond 64 bits, lone surrogates):
those go through ``json`` instead, written the same way (compact, UTF-8, keys in insertion
order), so the stored bytes do not depend on which encoder wrote them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

__all__ = ["dumps", "loads", "json_response"]


def dumps(value: object) -> bytes:
    try:
        return orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Raises: ValueError (``json.JSONDecodeError``) for anything that is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        # orjson is stricter (NaN, lone surrogates); the standard library decides.
        return json.loads(bytes(data) if isinstance(data, memoryview) else data)


def json_response(data: object, *, status: int = 200,
                  headers: Mapping[str, str] | None = None) -> web.Response:
    """``web.json_response`` with the body encoded by ``dumps`` (same Content-Type)."""
    return web.Response(body=dumps(data), status=status, headers=headers,
                        content_type="application/json", charset="utf-8")
