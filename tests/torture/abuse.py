"""Abuse: thousands of idle connections, slow-loris clients that never finish their headers
or bodies, oversized headers and bodies — while a normal client keeps sending. The normal
client is served within a second, memory stays bounded, and the abusers get 4xx or are cut."""

from __future__ import annotations

import socket
import statistics
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.helpers import GatewayProcess

QUEUE = "private$/t_abuse"


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _normal(url: str) -> float:
    """One ordinary send; its latency in seconds."""
    started = time.monotonic()
    request = urllib.request.Request(f"{url}/v1/queues/{QUEUE}/messages", data=b"normal",
                                     method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 201
    return time.monotonic() - started


def _status(url: str, data: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(f"{url}/v1/queues/{QUEUE}/messages", data=data,
                                     method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except (ConnectionError, urllib.error.URLError):
        return 0  # cut off: also a refusal


def run(data_dir: Path, idle: int = 3000, slow: int = 200) -> dict[str, Any]:
    config = data_dir.parent / "abuse.toml"
    config.write_text('[server]\nbody_timeout = "2s"\nrequest_body_max = "1MiB"\n')
    gateway = GatewayProcess(data_dir, extra_args=["--config", str(config)])
    gateway.wait_ready()
    sockets: list[socket.socket] = []
    try:
        urllib.request.urlopen(urllib.request.Request(f"{gateway.url}/v1/queues/{QUEUE}",
                                                      data=b"{}", method="PUT"), timeout=10)
        baseline = [_normal(gateway.url) for _ in range(20)]
        rss_before = _rss_kib(gateway.proc.pid)
        for _ in range(idle):  # connected, silent
            sockets.append(socket.create_connection(("127.0.0.1", gateway.port), timeout=5))
        for index in range(slow):  # slow loris: half a header, or a body that never comes
            sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=5)
            if index % 2:
                sock.sendall(b"POST /v1/queues/" + QUEUE.encode() + b"/messages HTTP/1.1\r\n"
                             b"Host: x\r\nX-Slow: ")
            else:
                sock.sendall(b"POST /v1/queues/" + QUEUE.encode() + b"/messages HTTP/1.1\r\n"
                             b"Host: x\r\nContent-Length: 100000\r\n\r\npartial")
            sockets.append(sock)
        under_abuse = [_normal(gateway.url) for _ in range(50)]
        oversized = {
            "header": _status(gateway.url, b"x", {"Mq-Label": "l" * 20_000}),
            "headers_count": _status(gateway.url, b"x",
                                     {f"X-H{i}": "v" for i in range(300)}),
            "body": _status(gateway.url, b"b" * (2 << 20), {}),
        }
        rss_after = _rss_kib(gateway.proc.pid)
        time.sleep(3)  # past body_timeout: the slow bodies are answered 408 and closed
        assert gateway.proc.poll() is None, "the gateway died"
        after_timeouts = [_normal(gateway.url) for _ in range(20)]
    finally:
        for sock in sockets:
            sock.close()
        gateway.stop()
    worst = max(under_abuse + after_timeouts)
    report = {"scenario": "abuse", "idle_connections": idle, "slow_clients": slow,
              "normal_p50_ms_before": round(statistics.median(baseline) * 1000, 1),
              "normal_p50_ms_under_abuse": round(statistics.median(under_abuse) * 1000, 1),
              "normal_max_ms_under_abuse": round(worst * 1000, 1),
              "oversized_statuses": oversized, "rss_kib_before": rss_before,
              "rss_kib_under_abuse": rss_after,
              "rss_kib_per_idle_connection": round((rss_after - rss_before) / (idle + slow), 2)}
    assert worst < 1.0, report
    assert all(400 <= s < 500 or s == 0 for s in oversized.values()), report
    assert rss_after - rss_before < 200 * 1024, report
    return report
