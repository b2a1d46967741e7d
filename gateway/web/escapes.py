"""Percent-escapes in a request's path and query: each must decode to UTF-8.

Checked after the credential and the rate limit (a stranger gets its 401, a partner over its
rate its 429, whatever the path), and before the body where the gate reads it.
"""

from __future__ import annotations

import re
from urllib.parse import unquote_to_bytes

from aiohttp import web

from gateway.errors import ProblemError

__all__ = ["check_path"]


# Routes whose path names a queue: an escape there is a queue name's problem.
_QUEUE_ROUTES = ("/v1/queues/", "/msmq/")


def check_path(request: web.Request) -> None:
    """Raises: ProblemError 400 when the path or query has a ``%`` that is not an escape
    (``%``, ``%F``, ``%zz``) or escapes that do not decode to UTF-8 (``%FF``).

    aiohttp leaves such escapes as they came, so ``a_%FF`` and ``a_%25FF`` would both name
    the queue ``a_%FF`` (and a query's ``%FF`` would become U+FFFD): the client meant a byte
    no name may hold. A UTF-8 character is one run of escapes, so each run is decoded
    alone."""
    raw = request.raw_path
    if "%" not in raw:
        return
    path, _, query = raw.partition("?")
    queue = path.lower().startswith(_QUEUE_ROUTES)
    for where, text in (("path", path), ("query", query)):
        if "%" not in text:
            continue
        bad = _NOT_ESCAPE.search(text)
        if bad is not None:
            _refuse(where, f"has a % that is not an escape ({bad.group()!r}): write a "
                    "percent sign as %25", queue and where == "path")
        for run in _ESCAPES.findall(text):
            try:
                unquote_to_bytes(run).decode()
            except UnicodeDecodeError:
                _refuse(where, f"has escapes {run} that are not UTF-8: a {where} is UTF-8 "
                        "text, percent-encoded byte by byte", queue and where == "path")


def _refuse(where: str, detail: str, queue: bool) -> None:
    slug = "MQ_ERROR_ILLEGAL_QUEUE_PATHNAME" if queue else "bad-request"
    raise ProblemError(400, f"the {where} {detail}", type_slug=slug)


_ESCAPES = re.compile(r"(?:%[0-9A-Fa-f]{2})+")
_NOT_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2}).{0,2}")
