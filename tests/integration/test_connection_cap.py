"""Connections that send nothing cannot take the store's file descriptors: a serving
process keeps at most ``server.connections_max`` connections (and at most half its open-file
limit), closing more as they are accepted. Without that, a few hundred idle connections on a
process limited to 256 files made the next checkpoint fail ("Too many open files") and the
store stop all writes."""

from __future__ import annotations

import http.client
import json
import os
import resource
import socket
import time
from pathlib import Path

from tests.helpers import GatewayProcess, http_get

_FILES = 256


def _few_files() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (_FILES, _FILES))


def _wait_until_flooded(proc: GatewayProcess) -> None:
    """Until the gateway has taken the flood: it says it closes new connections (the cap),
    or, with no cap, its descriptors are all but spent. An upper bound only."""
    deadline = time.monotonic() + 120
    while ("new ones are closed at once (server.connections_max)" not in proc.log()
           and _descriptors(proc) < _FILES - 4):
        assert time.monotonic() < deadline, proc.log()[-2000:]
        time.sleep(0.05)


def _descriptors(proc: GatewayProcess) -> int:
    return len(os.listdir(f"/proc/{proc.proc.pid}/fd"))


def _wait_until_closed(proc: GatewayProcess, descriptors: int) -> None:
    """Until the gateway has closed the flood's connections (its descriptors are back to
    ``descriptors``): until then it would close a new one as it accepts it. An upper bound
    only."""
    deadline = time.monotonic() + 120
    while _descriptors(proc) > descriptors:
        assert time.monotonic() < deadline, (_descriptors(proc), descriptors)
        time.sleep(0.05)


def test_idle_connections_leave_the_store_its_files(tmp_path: Path) -> None:
    proc = GatewayProcess(tmp_path / "data", extra_args=["--workers", "1"], preexec=_few_files)
    proc.wait_ready()
    held: list[socket.socket] = []
    try:
        # Opened before the flood, as an operator's session would be.
        admin = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=120)
        admin.request("PUT", "/v1/queues/q", body=b"{}")
        made = admin.getresponse()
        assert (made.status, bool(made.read())) == (201, True)
        before = _descriptors(proc)
        for _ in range(2 * _FILES):
            connection = socket.create_connection(("127.0.0.1", proc.port), timeout=30)
            connection.sendall(b"GET /v1/queues HTTP/1.1\r\nHost: x\r\n")  # never finished
            held.append(connection)
        _wait_until_flooded(proc)
        # A checkpoint opens files of its own: an online backup makes one now.
        admin.request("POST", "/v1/admin/backup", body=json.dumps(
            {"dest": str(tmp_path / "backup")}).encode(),
            headers={"Content-Type": "application/json"})
        answer = admin.getresponse()
        assert answer.status == 200, answer.read()[:500]
        admin.close()
    finally:
        for connection in held:
            connection.close()
    _wait_until_closed(proc, before)
    status, _, body = http_get(proc.url + "/readyz")
    assert status == 200, body[:500]
    assert proc.stop() == 0
    assert "fail-stopped" not in proc.log()
