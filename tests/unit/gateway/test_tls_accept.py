"""The TLS acceptor on a real loopback socket: a connection counts from its accept until its
handshake ends (or fails, or times out), one over the cap is closed before any handshake,
and accepting pauses, without losing the connections waiting, when descriptors run out."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import uvloop

from gateway.auth.tls import create_self_signed
from gateway.web.tls_accept import TlsAcceptor

Run = Callable[[Coroutine[Any, Any, None]], None]


class _Cap:
    def __init__(self) -> None:
        self.handshaking = 0
        self.full = False
        self.seen: list[int] = []  # the count at each accept

    def refuses(self) -> bool:
        self.seen.append(self.handshaking)
        return self.full


class _Echo(asyncio.Protocol):
    """Answers each piece of data with itself, in upper case."""

    made: Callable[[], None] = staticmethod(lambda: None)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # (uvloop's TLS one is no subclass)
        self.made()

    def data_received(self, data: bytes) -> None:
        self.transport.write(data.upper())


class _OutOfFiles(socket.socket):
    """A listening socket whose first accept finds no descriptor left."""

    failures = 1

    def accept(self) -> tuple[socket.socket, object]:
        if self.failures:
            self.failures -= 1
            raise OSError(errno.EMFILE, "Too many open files")
        return super().accept()


@pytest.fixture
def contexts(tmp_path: Path) -> Iterator[tuple[ssl.SSLContext, ssl.SSLContext]]:
    cert, key = create_self_signed(tmp_path, common_name="localhost", names=["127.0.0.1"],
                                   days=1)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(cert))
    yield server, client


@contextlib.asynccontextmanager
async def _serving(cap: _Cap, make: Callable[[], asyncio.Protocol], context: ssl.SSLContext,
                   *, timeout: float = 30.0, kind: type[socket.socket] = socket.socket
                   ) -> AsyncIterator[int]:
    """An acceptor on a loopback socket of ``kind``: its port."""
    sock = kind(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    acceptor = TlsAcceptor(cap, make, sock, context, timeout, 16)
    try:
        yield sock.getsockname()[1]
    finally:
        acceptor.close()
        await acceptor.wait_closed()


async def _closed(raw: socket.socket) -> bool:
    """Whether the other end closed ``raw`` (end of stream, or a reset after an alert),
    waiting for it; ``raw`` is closed."""
    raw.settimeout(60)
    try:
        return await asyncio.to_thread(raw.recv, 100) == b"" or \
            await asyncio.to_thread(raw.recv, 100) == b""  # (a TLS alert first)
    except ConnectionResetError:
        return True
    finally:
        raw.close()


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, None]], None]:
    """Runs a test's scenario on both loops (the gateway serves on uvloop)."""
    return uvloop.run if request.param == "uvloop" else asyncio.run


async def _until(check: object) -> None:
    """Until ``check()`` is true (an upper bound only: the test's timeout)."""
    assert callable(check)
    while not check():
        await asyncio.sleep(0.01)


def test_a_connection_counts_until_its_handshake_ends(
        run: Run, contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    run(_counts_until_its_handshake_ends(*contexts))


async def _counts_until_its_handshake_ends(server_ctx: ssl.SSLContext,
                                           client_ctx: ssl.SSLContext) -> None:
    cap, made = _Cap(), []

    def make() -> asyncio.Protocol:
        echo = _Echo()
        echo.made = lambda: made.append(cap.handshaking)  # connected: the handshake done
        return echo

    async with _serving(cap, make, server_ctx) as port:
        # Connected, no ClientHello yet: counted.
        raw = socket.create_connection(("127.0.0.1", port))
        await _until(lambda: cap.handshaking == 1)
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
        writer.write(b"ping")
        assert await reader.readexactly(4) == b"PING"
        assert made == [2] and cap.handshaking == 1  # the silent one still counts
        # A broken handshake is let go at once, and no longer counted.
        raw.sendall(b"GET / HTTP/1.1\r\n\r\n")
        await _until(lambda: cap.handshaking == 0)
        assert await _closed(raw)
        writer.close()
        await writer.wait_closed()


def test_a_handshake_not_ended_in_time_is_closed(
        run: Run, contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    run(_not_ended_in_time(contexts[0]))


async def _not_ended_in_time(server_ctx: ssl.SSLContext) -> None:
    cap = _Cap()
    async with _serving(cap, _Echo, server_ctx, timeout=0.2) as port:
        raw = socket.create_connection(("127.0.0.1", port))
        await _until(lambda: cap.handshaking == 1)
        # Its 0.2 s, not the loop's own 60 s: a bound far above the one asked for.
        await asyncio.wait_for(_until(lambda: cap.handshaking == 0), 30)
        assert await _closed(raw)


def test_over_the_cap_a_connection_is_closed_before_any_handshake(
        run: Run, contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    run(_over_the_cap(contexts[0]))


async def _over_the_cap(server_ctx: ssl.SSLContext) -> None:
    cap, made = _Cap(), []
    cap.full = True
    async with _serving(cap, lambda: made.append(1) or _Echo(), server_ctx) as port:
        raw = socket.create_connection(("127.0.0.1", port))
        # No ClientHello sent: the close comes from the cap, not from a handshake.
        assert await _closed(raw)
        assert made == [] and cap.handshaking == 0 and cap.seen == [0]


def test_out_of_descriptors_the_waiting_connections_are_taken_later(
        run: Run, contexts: tuple[ssl.SSLContext, ssl.SSLContext],
        caplog: pytest.LogCaptureFixture) -> None:
    run(_taken_later(*contexts))
    assert "cannot accept connections" in caplog.text


async def _taken_later(server_ctx: ssl.SSLContext, client_ctx: ssl.SSLContext) -> None:
    cap = _Cap()
    async with _serving(cap, _Echo, server_ctx, kind=_OutOfFiles) as port:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
        writer.write(b"late")
        assert await reader.readexactly(4) == b"LATE"
        writer.close()
        await writer.wait_closed()


def test_serve_forever_ends_when_the_acceptor_is_closed(
        run: Run, contexts: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    run(_serve_forever(contexts[0]))


async def _serve_forever(server_ctx: ssl.SSLContext) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    acceptor = TlsAcceptor(_Cap(), _Echo, sock, server_ctx, 30.0, 16)
    serving = asyncio.create_task(acceptor.serve_forever())
    await asyncio.sleep(0)
    assert not serving.done() and acceptor.is_serving()
    acceptor.close()
    await serving
    await acceptor.wait_closed()
    assert not acceptor.is_serving() and sock.fileno() == -1
