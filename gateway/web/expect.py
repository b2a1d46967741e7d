"""``Expect: 100-continue``, answered only once the body is going to be read.

aiohttp writes "100 Continue" as soon as a route matches, before any middleware runs: a
client that waits for it would send its whole body for a request the gate then refuses
(401, 413, 429, 503). Every route's expect handler here only checks the expectation, and
``send_continue`` writes the 100 when the body is about to be read, after the checks that
need no body (RFC 9110 10.1.1: a server that answers with a final status first need not
read the body).
"""

from __future__ import annotations

from aiohttp import hdrs, web
from aiohttp.http import HttpVersion11

from gateway.web.problem import problem_response

__all__ = ["defer_continue", "send_continue"]

_CONTINUE_SENT = web.RequestKey("continue_sent", bool)


async def defer_continue(request: web.Request) -> web.StreamResponse | None:
    """The expect handler of every route: 417 for an expectation other than 100-continue,
    else nothing yet (``send_continue`` answers it)."""
    expect = request.headers.get(hdrs.EXPECT, "")
    if expect.lower() != "100-continue":
        return problem_response(417, f"Expect: {expect!r} is not an expectation this server "
                                "meets (only 100-continue)", type_slug="bad-header")
    return None


async def send_continue(request: web.Request) -> None:
    """Write "100 Continue" if the client waits for it before sending its body (once)."""
    # A path or method no route serves has aiohttp's own expect handler, which answered.
    if (request.version == HttpVersion11 and _CONTINUE_SENT not in request
            and request.match_info.http_exception is None
            and request.headers.get(hdrs.EXPECT, "").lower() == "100-continue"):
        request[_CONTINUE_SENT] = True
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0  # the answer's own size starts after it
