"""Shared helpers: free loopback ports and the real ``entrepot serve`` process."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from gateway.fronts.cpus import usable_cpus

REPO_ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(url: str, timeout: float = 5.0, *, cafile: Path | None = None
             ) -> tuple[int, dict[str, str], bytes]:
    """GET without raising on 4xx/5xx (https verified against ``cafile``)."""
    context = ssl.create_default_context(cafile=str(cafile)) if cafile else None
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def http_request(url: str, *, method: str = "POST", body: bytes = b"",
                 headers: dict[str, str] | None = None, timeout: float = 30.0) -> int:
    """The status of one request, without raising on 4xx/5xx (the answer's body is read)."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.read()
        return int(exc.code)


def front_pids(owner: int) -> list[int]:
    """The front processes (server.workers) among ``owner``'s children."""
    pids = []
    for task in Path(f"/proc/{owner}/task").iterdir():
        for child in (task / "children").read_text().split():
            with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                if b"gateway.fronts.front" in Path(f"/proc/{child}/cmdline").read_bytes():
                    pids.append(int(child))
    return sorted(pids)


class GatewayProcess:
    """``entrepot serve`` in a child process on a loopback port, stopped by PID. One a test
    left running (an assertion failed before its stop) is stopped after the test
    (tests/conftest.py), so it cannot load the machine for the tests after it."""

    running: set[GatewayProcess] = set()

    def __init__(self, data_dir: Path, *, extra_args: Sequence[str] = (),
                 env: dict[str, str] | None = None, cwd: Path | None = None,
                 cafile: Path | None = None, port: int = 0, log_dir: Path | None = None,
                 preexec: Callable[[], None] | None = None) -> None:
        self.port = port or free_port()
        self.cafile = cafile
        self.url = f"{'https' if cafile else 'http'}://127.0.0.1:{self.port}"
        self.data_dir = data_dir
        self.log_path = (log_dir or data_dir.parent) / f"gateway-{self.port}.log"
        # ENTREPOT_TEST_WORKERS runs every real gateway of a test run with that many front
        # processes (server.workers); a test's own --workers comes after it and wins.
        workers = os.environ.get("ENTREPOT_TEST_WORKERS", "")
        args = [sys.executable, "-m", "gateway", "serve",
                "--listen", f"127.0.0.1:{self.port}", "--data-dir", str(data_dir),
                *(["--workers", workers] if workers else []), *extra_args]
        given = [a for a in args if a.startswith("--workers=")] or [
            args[i + 1] for i, a in enumerate(args[:-1]) if a == "--workers"]
        # Fronts to wait for (a --workers in a config file is not seen: such a test waits
        # for them itself).
        self.fronts = int(given[-1].partition("=")[2] or given[-1]) if given else 0
        self.fronts = self.fronts or usable_cpus()  # server.workers = 0: one per usable CPU
        # Appended: a gateway restarted on the same port keeps the log of its earlier life.
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            args, stdout=self._log, stderr=subprocess.STDOUT, cwd=cwd or REPO_ROOT,
            env={**os.environ, **(env or {})}, preexec_fn=preexec,
        )
        GatewayProcess.running.add(self)

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"gateway exited {self.proc.returncode}: {self.log()}")
            with contextlib.suppress(OSError):  # not listening yet
                if (http_get(self.url + "/readyz", timeout=1.0, cafile=self.cafile)[0] == 200
                        and self._fronts_serving()):
                    return
            time.sleep(0.05)
        raise AssertionError(f"gateway not ready in {timeout}s: {self.log()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(5)
        self._log.close()
        GatewayProcess.running.discard(self)
        return code

    def _fronts_serving(self) -> bool:
        """With ``--workers`` N > 1, N front processes run (/readyz waits for them to serve:
        this shows the option took effect)."""
        if self.fronts < 2:
            return True
        count = len(front_pids(self.proc.pid))
        assert count == self.fronts, f"{count} front processes, not {self.fronts}"
        return True

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")


def exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` to 127.0.0.1:``port`` as it is; the answer's bytes until the server
    closes (the request asks for ``Connection: close``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


@contextlib.contextmanager
def serving(root: Path, config: str) -> Iterator[GatewayProcess]:
    """A real gateway on ``config`` (TOML, written to root/entrepot.toml) and a data
    directory under ``root``, ready; stopped when the block ends."""
    (root / "entrepot.toml").write_text(config)
    gateway = GatewayProcess(root / "data", env={"ENTREPOT_CONFIG": str(root / "entrepot.toml")})
    try:
        gateway.wait_ready()
        yield gateway
    finally:
        gateway.stop()


async def ready_client(aiohttp_client: Any, settings: Any) -> Any:
    """An in-process test client of ``make_app(settings)``, once the store is ready."""
    import asyncio

    from gateway.web.app import make_app
    from gateway.web.appkeys import STATE_KEY

    app = make_app(settings)
    client = await aiohttp_client(app)
    for _ in range(3000):  # an upper bound only: a loaded machine may be slow to recover
        if app[STATE_KEY].ready:
            return client
        await asyncio.sleep(0.01)
    raise AssertionError(f"gateway not ready: {app[STATE_KEY].not_ready_reason()}")


def tls_server_config(root: Path, client_name: str) -> str:
    """A self-signed server certificate for 127.0.0.1 (``root/server``), a client certificate
    ``CN=client_name`` (``root/client``) it accepts, and the ``[server]`` TOML lines that serve
    TLS and take client certificates (more ``[server]`` keys may follow)."""
    from gateway.auth.tls import create_self_signed

    cert, key = create_self_signed(root / "server", common_name="localhost",
                                   names=["127.0.0.1"], days=2)
    client_cert, _ = create_self_signed(root / "client", common_name=client_name, names=[],
                                        days=2)
    return (f'[server]\ntls_cert = "{cert}"\ntls_key = "{key}"\n'
            f'tls_client_ca = "{client_cert}"\n')
