"""The listening socket and its TLS context, for one process or for each front."""

from __future__ import annotations

import errno
import socket
import ssl

from gateway.auth.tls import server_context
from gateway.errors import StartupError
from gateway.settings import Settings

__all__ = ["bind", "tls_context"]


def tls_context(settings: Settings) -> ssl.SSLContext | None:
    """Raises: StartupError naming the files that cannot be loaded."""
    server = settings.server
    if not server.tls_cert:
        return None
    try:
        return server_context(server.tls_cert, server.tls_key, server.tls_client_ca)
    except (OSError, ssl.SSLError) as exc:
        raise StartupError(f"TLS: cannot load server.tls_cert {server.tls_cert} / "
                           f"server.tls_key {server.tls_key}: {exc}") from exc


def bind(host: str, port: int, *, reuse_port: bool = False, listen: bool = True
         ) -> socket.socket:
    """A socket bound to ``host:port`` (listening unless ``listen=False``).

    ``reuse_port``: front processes each listen on the port and the kernel spreads new
    connections over them (SO_REUSEPORT); the owner holds it bound, not listening, so that no
    other program takes it while fronts restart.

    Raises:
        StartupError: the address is in use or cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
        if listen:
            sock.listen(1024)
    except OSError as exc:
        sock.close()
        address = f"[{host}]:{port}" if family == socket.AF_INET6 else f"{host}:{port}"
        if exc.errno == errno.EADDRINUSE:
            raise StartupError(f"cannot listen on {address}: address already in use") from exc
        raise StartupError(f"cannot listen on {address}: {exc.strerror or exc}") from exc
    sock.setblocking(False)
    return sock
