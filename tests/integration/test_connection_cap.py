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
import ssl
import time
from pathlib import Path

import pytest

from tests.helpers import GatewayProcess, http_get, tls_server_config

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


def _connection_metrics(admin: http.client.HTTPConnection) -> tuple[float, float]:
    """``entrepot_http_connections`` and ``entrepot_http_connections_refused_total``."""
    admin.request("GET", "/metrics")
    answer = admin.getresponse()
    text = answer.read().decode()
    assert answer.status == 200, text[:500]
    values = dict(line.rsplit(" ", 1) for line in text.splitlines()
                  if line.startswith("entrepot_http_connections"))
    return (float(values["entrepot_http_connections"]),
            float(values["entrepot_http_connections_refused_total"]))


def _back_up(admin: http.client.HTTPConnection, dest: Path) -> None:
    """A checkpoint opens files of its own: an online backup makes one now."""
    admin.request("POST", "/v1/admin/backup", body=json.dumps({"dest": str(dest)}).encode(),
                  headers={"Content-Type": "application/json"})
    answer = admin.getresponse()
    assert answer.status == 200, answer.read()[:500]


def _pids(proc: GatewayProcess) -> list[int]:
    """The gateway's processes: itself and its fronts."""
    pid = proc.proc.pid
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return [pid, *(int(child) for child in children)]


def _descriptors_of(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _all_descriptors(proc: GatewayProcess) -> int:
    return sum(_descriptors_of(pid) for pid in _pids(proc))


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
        # /metrics shows the connections held (the cap: half the 256 files) and refused.
        held_now, refused = _connection_metrics(admin)
        assert _FILES // 2 - 8 <= held_now <= _FILES // 2 and refused >= 1, (held_now, refused)
        _back_up(admin, tmp_path / "backup")
        admin.close()
    finally:
        for connection in held:
            connection.close()
    _wait_until_closed(proc, before)
    status, _, body = http_get(proc.url + "/readyz")
    assert status == 200, body[:500]
    assert proc.stop() == 0
    assert "fail-stopped" not in proc.log()


@pytest.mark.parametrize("workers", [1, 2])
def test_tls_handshakes_that_never_end_count_and_time_out(tmp_path: Path, workers: int) -> None:
    """Over TLS a connection that never sends its ClientHello is counted from the moment it
    is accepted, and closed once ``server.tls_handshake_timeout`` has passed: a flood of them
    cannot spend the process's descriptors, and is let go even while its sender keeps its
    sockets open."""
    config = tmp_path / "entrepot.toml"
    config.write_text(tls_server_config(tmp_path, "flood") + 'tls_handshake_timeout = "2s"\n')
    cert = tmp_path / "server" / "cert.pem"
    proc = GatewayProcess(tmp_path / "data", cafile=cert, preexec=_few_files,
                          extra_args=["--config", str(config), "--workers", str(workers)])
    proc.wait_ready()
    context = ssl.create_default_context(cafile=str(cert))
    held: list[socket.socket] = []
    try:
        admin = http.client.HTTPSConnection("127.0.0.1", proc.port, timeout=120,
                                            context=context)
        admin.request("PUT", "/v1/queues/q", body=b"{}")
        made = admin.getresponse()
        assert (made.status, bool(made.read())) == (201, True)
        before = _all_descriptors(proc)
        for _ in range(2 * _FILES):
            held.append(socket.create_connection(("127.0.0.1", proc.port), timeout=30))
        _wait_until_flooded(proc)
        # Each serving process keeps within its cap (half its open-file limit).
        assert max(_descriptors_of(pid) for pid in _pids(proc)) < _FILES - 4
        # /metrics counts the connections refused (those held: the plain-HTTP test, as
        # these time out on their own).
        assert _connection_metrics(admin)[1] >= 1
        if workers == 1:  # the store's own process: its files stay within reach
            _back_up(admin, tmp_path / "backup")
        admin.close()
        # The flood's sockets are still open here: the gateway closes its ends, after its
        # 2 s (a bound well under the loop's own 60 s, which would take twice this wait).
        deadline = time.monotonic() + 30
        while _all_descriptors(proc) > before - 1:
            assert time.monotonic() < deadline, (_all_descriptors(proc), before)
            time.sleep(0.05)
        status, _, body = http_get(proc.url + "/readyz", cafile=cert)
        assert status == 200, body[:500]
    finally:
        for connection in held:
            connection.close()
    assert proc.stop() == 0
    assert "fail-stopped" not in proc.log()
    assert "Too many open files" not in proc.log()


@pytest.mark.parametrize("workers", [1, 2])
def test_a_limit_too_low_for_the_store_is_told_at_start(tmp_path: Path, workers: int) -> None:
    """The store keeps about three descriptors a data segment: a start whose open-file
    limit (less the connections the process may hold) cannot cover its quotas says so; one
    that can says nothing. A store owner with fronts takes no connections: no cap of its
    own is computed (nor logged) there."""
    small = tmp_path / "small.toml"
    small.write_text('[store]\nmachine_quota = "16MiB"\nmachine_journal_quota = "16MiB"\n')
    for config, told in ((None, True), (small, False)):
        data = tmp_path / f"data-{told}"
        proc = GatewayProcess(data, preexec=_few_files, extra_args=[
            "--workers", str(workers), *(["--config", str(config)] if config else [])])
        proc.wait_ready()
        assert proc.stop() == 0
        log = proc.log()
        # 16 GiB of quotas in 4 MiB segments: 4096 of them, three descriptors each, and 64.
        assert ("and the store may need 12352" in log) is told, log
        assert "share of server.connections_max is 10000" not in log or workers == 1, log
