"""Start and stop the processes a scenario measures: ceilings and real entrepot gateways."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
_PIDS: dict[str, int] = {}  # base URL -> process id, while it runs


def started_pid(url: str) -> int | None:
    """The process id of the server running at ``url`` if it was started here."""
    return _PIDS.get(url)


def pid_of(url: str) -> int:
    """The process id of the server running at ``url`` (started here)."""
    return _PIDS[url]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url + "/readyz", timeout=1) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.05)
    raise RuntimeError(f"{url} not ready within {timeout_s}s")


@contextlib.contextmanager
def _process(args: list[str], url: str) -> Iterator[str]:
    proc = subprocess.Popen(args, cwd=REPO_ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    _PIDS[url] = proc.pid
    try:
        wait_ready(url, proc)
        yield url
    finally:
        del _PIDS[url]
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def ceiling(mode: str) -> Iterator[str]:
    """A ceiling server (``nostore`` or ``fsync``); yields its base URL."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="entrepot-ceiling-", dir=_scratch()) as tmp:
        args = [sys.executable, "-m", "bench.ceiling", "--mode", mode, "--port", str(port),
                "--dir", tmp]
        with _process(args, f"http://127.0.0.1:{port}") as url:
            yield url


@contextlib.contextmanager
def gateway(extra_args: tuple[str, ...] = (), port: int = 0, workers: int = 1
            ) -> Iterator[str]:
    """A real ``entrepot serve`` on a fresh data directory, of ``workers`` processes
    (server.workers; one unless a scenario says otherwise, whatever the machine's default);
    yields its base URL."""
    port = port or free_port()
    with tempfile.TemporaryDirectory(prefix="entrepot-bench-", dir=_scratch()) as tmp:
        args = [sys.executable, "-m", "gateway", "serve", "--listen", f"127.0.0.1:{port}",
                "--data-dir", str(Path(tmp) / "data"), "--log-level", "warning",
                "--workers", str(workers), *extra_args]
        with _process(args, f"http://127.0.0.1:{port}") as url:
            yield url


def _scratch() -> str:
    """Benchmarks write where the data would live (same disk as the repo), not on tmpfs."""
    path = REPO_ROOT / "var" / "bench"
    path.mkdir(parents=True, exist_ok=True)
    return os.fspath(path)
