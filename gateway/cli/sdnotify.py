"""systemd's notify protocol (``Type=notify``), spoken directly: one datagram per state change
to ``$NOTIFY_SOCKET``, no libsystemd.

READY=1 once the store is recovered and the gateway accepts work, WATCHDOG=1 at half of
``$WATCHDOG_USEC`` while the loop runs and the store takes writes (so systemd restarts a gateway
whose loop is stuck or whose store failed), STOPPING=1 when shutdown begins, STATUS= lines for
``systemctl status``. Without ``$NOTIFY_SOCKET`` every call does nothing.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable, Mapping

from gateway.logs import server_log

__all__ = ["Notifier"]


class Notifier:
    """Sends notify datagrams; ``watchdog_s`` is the ping period (0: no watchdog)."""

    def __init__(self, environ: Mapping[str, str] = os.environ) -> None:
        address = environ.get("NOTIFY_SOCKET", "")
        # An abstract socket is written "@name": the name starts with a NUL byte.
        self._address = "\0" + address[1:] if address.startswith("@") else address
        self._sock: socket.socket | None = None
        if self._address:
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            self._sock.setblocking(False)
        usec = environ.get("WATCHDOG_USEC", "")
        pid = environ.get("WATCHDOG_PID", "")
        mine = not pid or (pid.isdigit() and int(pid) == os.getpid())
        self.watchdog_s = int(usec) / 2e6 if usec.isdigit() and int(usec) > 0 and mine else 0.0

    @property
    def enabled(self) -> bool:
        return self._sock is not None

    def send(self, *fields: str) -> None:
        """One datagram of ``KEY=value`` lines; a failure is logged, never raised (systemd
        going away must not stop the gateway)."""
        if self._sock is None:
            return
        try:
            self._sock.sendto("\n".join(fields).encode(), self._address)
        except OSError as exc:
            server_log.warning("sd_notify to %s failed: %s", self._address.lstrip("\0"), exc)

    async def watchdog(self, healthy: Callable[[], bool]) -> None:
        """Ping while ``healthy()``; runs until cancelled."""
        if not self.watchdog_s or self._sock is None:
            return
        while True:
            if healthy():
                self.send("WATCHDOG=1")
            await asyncio.sleep(self.watchdog_s)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
