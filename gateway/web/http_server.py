"""The HTTP server under the app: what aiohttp answers by itself gets problem+json too.

A request line or header aiohttp's parser refuses (bad bytes, a line over
``server.header_bytes_max``, more than ``server.header_count_max`` headers, a malformed
Content-Length or chunk) never reaches a handler or the middleware: aiohttp's connection
protocol answers it through ``RequestHandler.handle_error``, in text/plain. aiohttp has no
option for that answer, so the runner's server makes its connections with a subclass of
``RequestHandler`` whose ``handle_error`` returns an RFC 9457 problem instead (same status,
connection closed). A refused request is the client's error, not the gateway's: it is
logged in one line at debug level (the access log, when on, has it too), where aiohttp
logs a traceback at error level, which anyone could make fill the log and the status
page's recent errors. A 5xx is still aiohttp's error log with its traceback.
"""

from __future__ import annotations

import gc

from aiohttp import web
from aiohttp.http_exceptions import ContentEncodingError, HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from gateway.logs import access_log, server_log
from gateway.settings import Settings
from gateway.web.problem import problem_response

__all__ = ["ProblemAppRunner", "app_runner", "freeze_startup_objects"]

_DETAIL_CHARS_MAX = 200


class _ProblemRequestHandler(RequestHandler):
    def handle_error(self, request: BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        slug, detail = _detail(status, exc, request)
        if status >= 500:
            # aiohttp's own: the traceback logged; its text/plain answer is replaced.
            super().handle_error(request, status, exc, message)
        else:
            server_log.debug("refused a malformed request from %s: %s", request.remote, detail)
            if request.writer.output_size > 0:
                raise ConnectionError("an answer was already started; the connection is "
                                      "closed instead")
        response = problem_response(status, detail, type_slug=slug)
        response.force_close()
        return response


def _detail(status: int, exc: BaseException | None, request: BaseRequest) -> tuple[str, str]:
    """The problem's type and detail."""
    if status >= 500:
        return "about:blank", "internal error; see the gateway log"
    if isinstance(exc, ContentEncodingError):  # as gateway.web.middlewares says it later
        # The request here may have no headers: aiohttp's message names the coding.
        coding = request.headers.get("Content-Encoding") or str(exc.message).rsplit(" ")[-1]
        return "bad-body", ("request body: it does not decode as its Content-Encoding says "
                            f"({coding[:_DETAIL_CHARS_MAX]})")
    if isinstance(exc, LineTooLong):
        return "bad-http-request", ("a request line or header is over the size limit "
                                    "(server.header_bytes_max)")
    # aiohttp's message: a reason line ("Invalid header token:"), then the bytes it refused.
    lines = str(exc.message).strip().splitlines() if isinstance(exc, HttpProcessingError) else []
    reason = lines[0].rstrip(":")[:_DETAIL_CHARS_MAX] if lines else "refused by the parser"
    if "too many headers" in reason.lower():
        reason += " (the limit is server.header_count_max)"
    return "bad-http-request", f"malformed HTTP request: {reason}"


class _ProblemServer(web.Server):
    def __call__(self) -> RequestHandler:
        return _ProblemRequestHandler(self, loop=self._loop, **self._kwargs)


class ProblemAppRunner(web.AppRunner):
    """``web.AppRunner`` whose connections answer parse errors with problem+json."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # The app's server as aiohttp builds it (the app started and frozen, its handler
        # arguments), only making _ProblemRequestHandler connections.
        server.__class__ = _ProblemServer
        return server


# What a front adds to a request it forwards (gateway.web.forwarded): up to three headers, one
# a client certificate in base64 (a chain of tens of KiB at most, as TLS carries it).
_FORWARDED_HEADERS = 3
_FORWARDED_FIELD_MAX = 256 * 1024


def app_runner(app: web.Application, settings: Settings, *,
               handler_cancellation: bool = False,
               forwarded: bool = False) -> ProblemAppRunner:
    """The runner of ``app`` with the server section's limits (one process, or each front).

    ``handler_cancellation``: a handler is cancelled when its client hangs up (a front's:
    its forwarded request to the owner is then closed, and a long poll there ends without
    taking a message; the owner's and one process's handlers finish what they started).
    ``forwarded``: the store owner's runner, for requests its fronts checked against the
    limits already and add their own headers to.

    On a stop, aiohttp gives the requests in flight its shutdown timeout to finish, then
    cancels them and gives them that timeout again: half of ``server.shutdown_grace`` each,
    so that a stop takes at most the grace."""
    server = settings.server
    return ProblemAppRunner(
        app,
        handle_signals=False,
        shutdown_timeout=server.shutdown_grace / 2,
        handler_cancellation=handler_cancellation,
        access_log=access_log if settings.log.access else None,
        keepalive_timeout=server.keepalive_timeout,
        max_headers=server.header_count_max + (_FORWARDED_HEADERS if forwarded else 0),
        max_field_size=(max(server.header_bytes_max, _FORWARDED_FIELD_MAX) if forwarded
                        else server.header_bytes_max),
        max_line_size=server.header_bytes_max,
    )


_GC_YOUNG_THRESHOLD = 10_000  # allocations between young collections (CPython's default: 700)


def freeze_startup_objects() -> int:
    """Move everything alive now out of the cyclic collector's reach and let young
    collections come less often; the number of objects frozen.

    Why: every full collection would walk the startup objects, pausing the loop long enough
    to set the send latency's p99 under load, and young collections at the default threshold
    run often enough to take a visible share of the loop's time (docs/performance.md).
    Startup objects that later become cyclic garbage are never reclaimed: there are few."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(_GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    return gc.get_freeze_count()
