"""The JSON a REST request carries: one reader, one set of 400s.

Every JSON request body goes through ``parse_json``: UTF-8 only (RFC 8259), nesting at most
``JSON_DEPTH_MAX`` deep (checked on the bytes before the recursive parser sees them: the
standard library's parser recurses once a level and fails with RecursionError, a 500, on a
few thousand brackets), and no lone surrogate (``"\\ud800"``) in any string or key: such a
string cannot be encoded as UTF-8, so storing or answering with it fails later.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from aiohttp import web

from gateway.errors import ProblemError
from gateway.web.auth_middleware import body_of

__all__ = ["JSON_DEPTH_MAX", "json_body", "json_number", "json_object", "names", "parse_json"]

JSON_DEPTH_MAX = 32  # the deepest body any route takes is 4 levels (a batch's properties)

_EXACT = 2**53  # beyond it a double no longer holds every integer
_INT_DIGITS_MAX = 40  # the largest integer a field takes has 20 digits (a 64-bit position)
# A JSON string (skipped whole) or one bracket: strings may hold brackets that are not nesting.
_STRING_OR_BRACKET = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
_OPENERS = frozenset(b"[{")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _json_int(text: str) -> int:
    """Raises: ProblemError 400 for an integer longer than any field takes (Python's own
    refusal, past 4300 digits, would name its interpreter setting)."""
    if len(text) > _INT_DIGITS_MAX:
        raise ProblemError(400, f"a number of {len(text)} digits: integers here have at most "
                           f"{_INT_DIGITS_MAX}", type_slug="bad-request")
    return int(text)


def names(keys: Iterable[str], shown: int = 10) -> str:
    """``keys`` sorted for a problem's detail: the first ``shown`` (each cut to 64
    characters), then how many more, so a body of many unknown keys gets a short answer."""
    ordered = sorted(keys)
    listed = ", ".join(key[:64] for key in ordered[:shown])
    return listed + (f" and {len(ordered) - shown} more" if len(ordered) > shown else "")


def json_number(text: str) -> int | float:
    """A JSON number with a fraction or exponent: JSON has one number type, so ``387.0`` is
    the integer 387 (as JSON Schema's ``integer`` says) and ``1.5`` stays a float. Clients in
    languages without an integer type send positions and sizes that way."""
    value = float(text)
    return int(value) if value.is_integer() and abs(value) <= _EXACT else value


def parse_json(raw: bytes) -> object:
    """Parse a request body.

    Raises:
        ProblemError: 400 when it is not UTF-8 JSON, is nested deeper than
            ``JSON_DEPTH_MAX``, holds a lone surrogate (the detail names the field), or
            gives a key twice in one object (the detail names it).
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProblemError(400, f"body is not UTF-8: {exc.reason} at byte {exc.start}",
                           type_slug="bad-request") from None
    _check_depth(raw)
    try:
        value = json.loads(text, parse_float=json_number, parse_int=_json_int,
                           object_pairs_hook=_unique_keys)
    except ValueError as exc:
        raise ProblemError(400, f"body is not JSON: {exc}", type_slug="bad-request") from exc
    if "\\u" in text:  # only an escape can make a lone surrogate out of valid UTF-8
        _check_strings(value, "")
    return value


async def json_body(request: web.Request, *, allow_empty: bool) -> dict[str, object]:
    return json_object(await body_of(request), allow_empty=allow_empty)


def json_object(raw: bytes, *, allow_empty: bool) -> dict[str, object]:
    """A body that must be a JSON object (``{}`` for an empty one when ``allow_empty``)."""
    if not raw.strip() and allow_empty:
        return {}
    body = parse_json(raw)
    if not isinstance(body, dict):
        raise ProblemError(400, "body must be a JSON object", type_slug="bad-request")
    return body


def no_fields(raw: bytes) -> None:
    """The body of a request that takes no parameters: empty or ``{}``. Raises:
    ProblemError 400 naming the fields given, so that a client's option is not ignored."""
    given = json_object(raw, allow_empty=True)
    if given:
        raise ProblemError(400, f"unknown fields: {names(given)} (this request "
                           "takes no body, or {})", type_slug="bad-request")


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """An object whose keys are each given once (RFC 8259 4: with duplicates, "the
    behavior of software that receives such an object is unpredictable"): which of two
    values counts would be a guess the client cannot see."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ProblemError(400, f"{key[:200]!r}: given more than once in one object",
                                   type_slug="bad-request")
            seen.add(key)
    return value


def _check_depth(raw: bytes) -> None:
    if raw.count(b"[") + raw.count(b"{") <= JSON_DEPTH_MAX:
        return  # fewer openers than the limit: no need to look
    depth = 0
    for match in _STRING_OR_BRACKET.finditer(raw):
        char = raw[match.start()]
        if char in _OPENERS:
            depth += 1
            if depth > JSON_DEPTH_MAX:
                raise ProblemError(400, f"body is nested more than {JSON_DEPTH_MAX} levels "
                                   "deep", type_slug="bad-request")
        elif char != 0x22:  # a closing bracket (a string is skipped)
            depth -= 1


def _check_strings(value: object, where: str) -> None:
    """Raises ProblemError naming the first string or key holding a lone surrogate (the
    depth is already bounded, so the recursion is)."""
    if isinstance(value, str):
        if _SURROGATE.search(value):
            raise ProblemError(400, f"{where[:200] or 'body'}: a lone surrogate "
                               "(\\ud800-\\udfff) is not text", type_slug="bad-request")
    elif isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}" if where else key
            if _SURROGATE.search(key):
                raise ProblemError(400, f"{where[:200] or 'body'}: a key holds a lone surrogate "
                                   "(\\ud800-\\udfff)", type_slug="bad-request")
            _check_strings(item, path)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _check_strings(item, f"{where}[{index}]")
