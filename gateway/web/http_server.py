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

import asyncio
import gc
import resource
import socket
import ssl
import time
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from gateway.logs import access_log, server_log
from gateway.settings import Settings
from gateway.web.problem import problem_response
from gateway.web.tls_accept import TlsAcceptor

__all__ = ["ProblemAppRunner", "ProblemServer", "Refused", "ServingSite", "accepted",
           "app_runner", "connections_cap", "freeze_startup_objects", "raise_file_limit"]

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
    if isinstance(exc, LineTooLong):
        return "bad-http-request", ("a request line or header is over the size limit "
                                    "(server.header_bytes_max)")
    # aiohttp's message: a reason line ("Invalid header token:"), then the bytes it refused.
    lines = str(exc.message).strip().splitlines() if isinstance(exc, HttpProcessingError) else []
    reason = lines[0].rstrip(":")[:_DETAIL_CHARS_MAX] if lines else "refused by the parser"
    if "too many headers" in reason.lower():
        reason += " (the limit is server.header_count_max)"
    return "bad-http-request", f"malformed HTTP request: {reason}"


class ProblemServer(web.Server):
    connections_max = 0  # 0: no cap
    _refused_logged = 0.0
    # Connections accepted whose TLS handshake has not ended (gateway.web.tls_accept):
    # aiohttp counts a connection only once it is handed its protocol, after the handshake.
    handshaking = 0
    refused = 0  # connections closed as they were accepted, since the start
    on_refused: Callable[[], None]  # told of each (the refusals metric)

    # Connections the cap counts that are not this server's (a front's send lane's).
    others: Callable[[], int]

    # The loop takes any protocol from its factory; aiohttp declares only its own.
    def __call__(self) -> asyncio.Protocol:  # type: ignore[override]
        return accepted(self, self.handler)

    def refuses(self) -> bool:
        """Whether a new connection is over the cap (logged once a minute)."""
        if not self.connections_max:
            return False
        held = self.open_count()
        if held < self.connections_max:
            return False
        self.refused += 1
        self.on_refused()
        now = time.monotonic()
        if now - self._refused_logged >= _REFUSED_LOG_EVERY_S:
            self._refused_logged = now
            server_log.warning("%d connections open: new ones are closed at once "
                               "(server.connections_max)", held)
        return True

    def open_count(self) -> int:
        """Connections open now: aiohttp's, the send lane's, and TLS ones not yet through
        their handshake."""
        return len(self._connections) + self.others() + self.handshaking

    def handler(self) -> RequestHandler:
        """A connection's protocol, whatever the cap (a connection the lane passes on)."""
        return _ProblemRequestHandler(self, loop=self._loop, **self._kwargs)


def accepted(server: ProblemServer, make: Callable[[], asyncio.Protocol]) -> asyncio.Protocol:
    """The protocol of a connection just accepted: closed at once over the cap, else
    ``make``'s."""
    return Refused() if server.refuses() else make()


class ServingSite(web.SockSite):
    """The listening socket of a serving process. ``make``: a connection's protocol (the
    runner's server's handler when None; a front's send lane gives its own), made once the
    cap has let the connection in. Over TLS, connections are accepted by a ``TlsAcceptor``
    (counted by the cap from their accept, their handshakes bounded by
    ``handshake_timeout``) rather than by the loop's TLS server, which makes the handshake
    before anything of ours sees the connection."""

    def __init__(self, runner: web.BaseRunner, sock: socket.socket, *,
                 ssl_context: ssl.SSLContext | None, handshake_timeout: float,
                 make: Callable[[], asyncio.Protocol] | None = None) -> None:
        super().__init__(runner, sock, ssl_context=ssl_context)
        self._handshake_timeout = handshake_timeout
        self._make = make

    async def start(self) -> None:
        await web.BaseSite.start(self)  # (SockSite's would hand TLS to the loop)
        server = self._runner.server
        assert isinstance(server, ProblemServer)
        make = self._make or server.handler
        if self._ssl_context is None:
            self._server = await asyncio.get_running_loop().create_server(
                lambda: accepted(server, make), sock=self._sock, backlog=self._backlog)
        else:
            self._server = TlsAcceptor(server, make, self._sock, self._ssl_context,
                                       self._handshake_timeout, self._backlog)


class Refused(asyncio.Protocol):
    """A connection over the cap: closed as it is accepted, so that its descriptor is free
    again at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()


_REFUSED_LOG_EVERY_S = 60.0


def _none() -> int:
    return 0


def _nothing() -> None:
    """No one told of a refusal (one process and each front wire the metric's count)."""


class ProblemAppRunner(web.AppRunner):
    """``web.AppRunner`` whose connections answer parse errors with problem+json, and whose
    server closes a connection over ``connections_max`` (0: no cap) as it is accepted."""

    def __init__(self, app: web.Application, *, connections_max: int = 0,
                 **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self._connections_max = connections_max

    @property
    def connections_max(self) -> int:
        """The connections its server keeps open at most (0: no cap)."""
        return self._connections_max

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # The app's server as aiohttp builds it (the app started and frozen, its handler
        # arguments), only making _ProblemRequestHandler connections.
        server.__class__ = ProblemServer
        assert isinstance(server, ProblemServer)
        server.connections_max = self._connections_max
        server.others = _none
        server.on_refused = _nothing
        return server


def raise_file_limit() -> int:
    """Raise the soft open-file limit to the hard one (at most ``_FILES_WANTED`` when that
    is unlimited): the soft limit now, ``resource.RLIM_INFINITY`` for none."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _FILES_WANTED if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError) as exc:  # a container may forbid it: the cap follows
            server_log.info("open-file limit left at %d: %s", soft, exc)
    return soft


def connections_cap(connections_max: int, processes: int) -> int:
    """The connections one serving process keeps open at most: its share of
    ``server.connections_max``, and at most half its open-file limit (raised to the hard
    limit first). Each connection holds a descriptor: without a cap, clients that open
    connections and send nothing would leave the store none for its own files, which stops
    it (a checkpoint that cannot open its file fail-stops the store)."""
    soft = raise_file_limit()
    share = max(1, connections_max // processes)  # rounded down: the shares keep the cap
    if soft == resource.RLIM_INFINITY:
        return share
    cap = min(share, max(_CONNECTIONS_MIN, soft // 2))  # never over its share
    if cap < share:
        server_log.warning("open-file limit %d: this process keeps at most %d connections "
                           "(its share of server.connections_max is %d)", soft, cap, share)
    return cap


_FILES_WANTED = 65_536  # the soft open-file limit asked for when the hard one is unlimited
_CONNECTIONS_MIN = 16


def app_runner(app: web.Application, settings: Settings, *,
               handler_cancellation: bool = False, sharing: int = 1,
               serving: bool = True) -> ProblemAppRunner:
    """The runner of ``app`` with the server section's limits (one process, or each front).

    ``handler_cancellation``: a handler is cancelled when its client hangs up (a front's:
    its command is cancelled at the owner, and a long poll there ends without taking a
    message; one process's handlers finish what they started).
    ``sharing``: the processes that share ``server.connections_max`` (the fronts).
    ``serving``: False for a store owner, which takes no connections (no cap of its own).

    On a stop, aiohttp gives the requests in flight its shutdown timeout to finish, then
    cancels them and gives them that timeout again: half of ``server.shutdown_grace`` each,
    so that a stop takes at most the grace."""
    server = settings.server
    return ProblemAppRunner(
        app,
        connections_max=connections_cap(server.connections_max, sharing) if serving else 0,
        handle_signals=False,
        shutdown_timeout=server.shutdown_grace / 2,
        handler_cancellation=handler_cancellation,
        access_log=access_log if settings.log.access else None,
        keepalive_timeout=server.keepalive_timeout,
        max_headers=server.header_count_max,
        max_field_size=server.header_bytes_max,
        max_line_size=server.header_bytes_max,
        # Bodies are decoded by the gate (gateway.web.body_coding), strictly: aiohttp takes
        # a gzip stream cut short as whole.
        auto_decompress=False,
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
