"""Accepting TLS connections ourselves: each is counted by the cap on connections from its
accept, closed at once over the cap, and its handshake bounded.

Why not the loop's TLS server (``create_server(ssl=...)``): the loop makes the handshake
before any of our code sees the connection, so a connection over the cap could not be closed
as it is accepted, and one that never sends its ClientHello would hold a descriptor,
uncounted, for the loop's 60 s: a flood of those could spend every descriptor of the
process, the store's included. Here the listening socket is read by ``TlsAcceptor``; an
accepted socket over the cap is closed at once, any other is counted in ``handshaking``
until ``loop.connect_accepted_socket`` has made its handshake (within
``server.tls_handshake_timeout``) and handed it to its protocol.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
import time
from collections.abc import Callable
from typing import Protocol

__all__ = ["TlsAcceptor"]

log = logging.getLogger("gateway.server")

# Accepted per wake-up of the listening socket, at most: the loop serves the others too.
_ACCEPTS_PER_WAKE = 64
# Out of descriptors (or kernel memory): accepting stops for this long, as asyncio's does.
_RETRY_S = 1.0
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
_LOG_EVERY_S = 60.0


class Cap(Protocol):
    """The cap on connections (gateway.web.http_server.ProblemServer)."""

    handshaking: int

    def refuses(self) -> bool: ...


class TlsAcceptor(asyncio.AbstractServer):
    """Serves ``sock`` over TLS with ``context``: what ``create_server`` would, for aiohttp's
    site (``close``, ``sockets``), with each connection counted by ``cap`` from its accept.
    ``make`` gives a connection's protocol (made as the connection is let in, connected once
    its handshake has ended)."""

    def __init__(self, cap: Cap, make: Callable[[], asyncio.Protocol], sock: socket.socket,
                 context: ssl.SSLContext, handshake_timeout: float, backlog: int) -> None:
        self._loop = asyncio.get_running_loop()
        self._cap = cap
        self._make = make
        self._sock = sock
        self._context = context
        self._timeout = handshake_timeout
        self._handshakes: set[asyncio.Task[None]] = set()
        self._serving = True
        self._closed = asyncio.Event()
        self._out_logged = 0.0
        self.sockets = (sock,)
        sock.setblocking(False)
        sock.listen(backlog)
        self._loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(_ACCEPTS_PER_WAKE):
            try:
                conn, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    self._pause(exc)
                    return
                continue  # one connection's own failure (ECONNABORTED): the next one
            if self._cap.refuses():
                conn.close()
                continue
            self._cap.handshaking += 1
            task = self._loop.create_task(self._handshake(conn))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    def _pause(self, exc: OSError) -> None:
        """Out of descriptors: the pending connections wait in the backlog a while."""
        now = time.monotonic()
        if now - self._out_logged >= _LOG_EVERY_S:
            self._out_logged = now
            log.warning("cannot accept connections for %.0f s: %s", _RETRY_S, exc)
        self._loop.remove_reader(self._sock.fileno())
        self._loop.call_later(_RETRY_S, self._resume)

    def _resume(self) -> None:
        if self._serving:
            self._loop.add_reader(self._sock.fileno(), self._accept)

    async def _handshake(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(
                self._make, conn, ssl=self._context, ssl_handshake_timeout=self._timeout)
        except OSError as exc:  # the client's: no ClientHello in time, a bad one, gone
            log.debug("TLS handshake not made: %s", exc)
        finally:
            self._cap.handshaking -= 1

    def close(self) -> None:
        """Stop accepting; handshakes not ended are dropped."""
        if not self._serving:
            return
        self._serving = False
        self._closed.set()
        self._loop.remove_reader(self._sock.fileno())
        self._sock.close()
        for task in self._handshakes:
            task.cancel()

    async def wait_closed(self) -> None:
        await asyncio.gather(*self._handshakes, return_exceptions=True)

    def get_loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def is_serving(self) -> bool:
        return self._serving

    async def start_serving(self) -> None:
        """Serving already (from construction)."""

    async def serve_forever(self) -> None:
        """Until ``close``."""
        await self._closed.wait()
