"""Answers a client does not take. A write of an answer waits while the client's socket is
full; each such wait lasts at most ``server.body_timeout`` (as a request body must come
within it), then the connection is closed. What the answer held goes with it: its bytes, and
its place among the requests in flight (``server.concurrent_requests_max``), so that clients
that stop reading cannot hold the gateway's memory and places for ever.

Small answers are left to aiohttp, which writes them after the handler: the socket's buffers
take them whole, and a wrapper on every answer would cost every request.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from gateway.logs import server_log

__all__ = ["WHOLE_ANSWER_MIN", "finish_within", "write_within"]

# Answers from this size on are written by the middleware, within the timeout.
WHOLE_ANSWER_MIN = 256 << 10


async def write_within(request: web.Request, response: web.StreamResponse, data: bytes,
                       timeout: float) -> None:
    """``response.write(data)``.

    Raises:
        ConnectionError: the client went away, or took none of it for ``timeout`` seconds
            (then its connection is closed here).
    """
    try:
        async with asyncio.timeout(timeout):
            await response.write(data)
    except TimeoutError:
        _close(request, timeout)
        raise ConnectionResetError("the client did not take its answer") from None


async def finish_within(request: web.Request, response: web.StreamResponse,
                        timeout: float) -> None:
    """Write a whole answer now, closing the connection of a client that does not take it
    within ``timeout`` seconds; aiohttp then finds it written."""
    try:
        async with asyncio.timeout(timeout):
            await response.prepare(request)
            await response.write_eof()
    except TimeoutError:
        _close(request, timeout)
    except ConnectionError:  # the client went away: nothing more to write
        pass


def _close(request: web.Request, timeout: float) -> None:
    server_log.info("answer to %s %s not taken by the client in %gs (server.body_timeout): "
                    "connection closed", request.method, request.path, timeout)
    if request.transport is not None:
        request.transport.abort()
