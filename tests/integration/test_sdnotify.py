"""systemd integration: the notify protocol through a fake ``NOTIFY_SOCKET`` (READY=1 after
recovery, WATCHDOG=1 pings, STOPPING=1 at shutdown). The unit file itself:
test_systemd_unit.py."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from gateway.cli.sdnotify import Notifier
from tests.helpers import GatewayProcess, http_get

# Run again in one process (server.workers = 1) by make test (ENTREPOT_TEST_WORKERS).
pytestmark = pytest.mark.workers


def _receive(sock: socket.socket, until: str, timeout: float = 20.0) -> list[str]:
    """Datagrams (as text) until one containing ``until`` arrives."""
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            got.append(sock.recv(4096).decode())
        except TimeoutError:
            break
        if until in got[-1]:
            return got
    raise AssertionError(f"no {until!r} in {got}")


def test_notify_ready_watchdog_stopping(tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        gw = GatewayProcess(tmp_path / "data", env={"NOTIFY_SOCKET": str(path),
                                                     "WATCHDOG_USEC": "200000"})
        try:
            before_ready = _receive(sock, "READY=1")
            assert http_get(gw.url + "/readyz")[0] == 200, "READY=1 means it serves"
            assert any("STATUS=" in m for m in before_ready)
            pings = _receive(sock, "WATCHDOG=1")
            pings += _receive(sock, "WATCHDOG=1")
            assert sum("WATCHDOG=1" in m for m in pings) >= 2
        finally:
            assert gw.stop() == 0
        assert any("STOPPING=1" in m for m in _receive(sock, "STOPPING=1"))


def test_without_notify_socket_nothing_is_sent() -> None:
    notifier = Notifier({})
    assert not notifier.enabled and notifier.watchdog_s == 0
    notifier.send("READY=1")  # no socket: nothing happens, nothing raised


def test_watchdog_for_another_pid_is_ignored() -> None:
    notifier = Notifier({"NOTIFY_SOCKET": "@x", "WATCHDOG_USEC": "1000000",
                         "WATCHDOG_PID": "1"})
    assert notifier.watchdog_s == 0
    notifier.close()
