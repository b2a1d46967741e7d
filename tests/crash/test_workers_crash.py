"""kill -9 of one process of a gateway with ``server.workers = 2`` while clients send: a
front killed loses no acknowledged message and the gateway keeps serving (the owner starts
the front again); the owner killed ends the fronts, and a restart has every acknowledged
message."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from gateway.auth.tls import create_self_signed
from tests.helpers import GatewayProcess, front_pids, http_get, http_request

_QUEUE = "crash"


def _is_front(pid: int) -> bool:
    try:
        return b"gateway.fronts.front" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return False


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> None:
    """Wait for an event (the long timeout only bounds a failure on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.05)


def start_workers(data: Path) -> GatewayProcess:
    """A gateway of two fronts around the owner, once both fronts serve."""
    gateway = GatewayProcess(data, extra_args=("--workers", "2"))
    gateway.wait_ready()  # and both fronts serve
    return gateway


async def _sender(url: str, worker: int, acked: set[bytes], stop: asyncio.Event,
                  refused: set[int]) -> None:
    """Sends until ``stop``; a refused or cut connection is tried again on a new one; the
    statuses of the answers other than 201 go into ``refused``."""
    number = 0
    while not stop.is_set():
        async with aiohttp.ClientSession() as session:
            while not stop.is_set():
                number += 1
                body = f"{worker}:{number}".encode()
                try:
                    async with session.post(f"{url}/v1/queues/{_QUEUE}/messages",
                                            data=body) as response:
                        if response.status == 201:
                            acked.add(body)
                        else:
                            refused.add(response.status)
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    await asyncio.sleep(0.05)
                    break


def stored(url: str) -> set[bytes]:
    bodies: set[bytes] = set()
    after = 0
    while True:
        status, _, raw = http_get(f"{url}/v1/queues/{_QUEUE}/messages?after={after}"
                                  "&limit=1000")
        assert status == 200
        page = json.loads(raw)
        bodies |= {base64.b64decode(m["body_base64"]) for m in page["messages"]}
        if not page["messages"]:
            return bodies
        after = page["next"]


async def _load_until(url: str, acked: set[bytes], event: Callable[[], bool],
                      then: Callable[[], None], until: Callable[[], bool],
                      refused: set[int] | None = None) -> None:
    """Eight senders; ``then()`` once ``event()`` holds; stop once ``until()`` holds."""
    stop = asyncio.Event()
    statuses = refused if refused is not None else set()
    tasks = [asyncio.create_task(_sender(url, w, acked, stop, statuses)) for w in range(8)]
    while not event():
        await asyncio.sleep(0.02)
    then()
    deadline = time.monotonic() + 120  # bounds a failure only
    try:
        while not until():
            assert time.monotonic() < deadline, "not within 120 s: the awaited event"
            await asyncio.sleep(0.02)
    finally:
        stop.set()
        await asyncio.gather(*tasks)


@pytest.mark.crash
@pytest.mark.timeout(300)
def test_a_front_killed_under_load_loses_nothing_acknowledged(tmp_path: Path) -> None:
    gateway = start_workers(tmp_path / "data")
    assert http_request(f"{gateway.url}/v1/queues/{_QUEUE}", method="PUT", body=b"{}") == 201
    fronts = front_pids(gateway.proc.pid)
    assert len(fronts) == 2
    acked: set[bytes] = set()
    at_kill: list[int] = []

    def kill_front() -> None:
        at_kill.append(len(acked))
        os.kill(fronts[0], signal.SIGKILL)

    def served_on() -> bool:
        # Both fronts again (the killed one started anew), and sends answered since.
        now = front_pids(gateway.proc.pid)
        return (len(now) == 2 and fronts[0] not in now and gateway.log().count("serving pid=")
                >= 3 and len(acked) >= at_kill[0] + 300)

    asyncio.run(_load_until(gateway.url, acked, lambda: len(acked) >= 300, kill_front,
                            served_on))
    assert "front 0 exited (killed by SIGKILL)" in gateway.log() or (
        "front 1 exited (killed by SIGKILL)" in gateway.log())
    lost = acked - stored(gateway.url)
    assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {sorted(lost)[:3]}"
    assert gateway.stop() == 0


@pytest.mark.crash
@pytest.mark.timeout(300)
def test_the_owner_killed_ends_the_fronts_and_a_restart_has_everything(
        tmp_path: Path) -> None:
    gateway = start_workers(tmp_path / "data")
    assert http_request(f"{gateway.url}/v1/queues/{_QUEUE}", method="PUT", body=b"{}") == 201
    fronts = front_pids(gateway.proc.pid)
    acked: set[bytes] = set()
    refused: set[int] = set()

    def fronts_gone() -> bool:
        return not any(_is_front(pid) for pid in fronts)

    asyncio.run(_load_until(gateway.url, acked, lambda: len(acked) >= 300,
                            lambda: gateway.proc.send_signal(signal.SIGKILL), fronts_gone,
                            refused))
    assert len(acked) >= 300
    # A send waiting on the owner when it died may have been stored: it gets no answer
    # (its connection closed), never an error that says it failed. One sent after is 503.
    assert refused <= {503}, refused
    again = start_workers(tmp_path / "data")
    gateway.stop()
    lost = acked - stored(again.url)
    assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {sorted(lost)[:3]}"
    assert again.stop() == 0


def _holder(fronts: list[int], client: socket.socket, port: int) -> int:
    """The front process holding the server end of ``client``'s connection."""
    local = client.getsockname()[1]
    wanted = f"0100007F:{port:04X} 0100007F:{local:04X}"
    inode = next(line.split()[9] for line in Path("/proc/net/tcp").read_text().splitlines()
                 if wanted in line)
    for pid in fronts:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) == f"socket:[{inode}]":
                    return pid
    raise AssertionError(f"no front holds the connection from port {local}")


@pytest.mark.crash
def test_a_front_killed_with_a_parked_poll_takes_no_message(
        tmp_path: Path, request: pytest.FixtureRequest) -> None:
    gateway = start_workers(tmp_path / "data")
    assert http_request(f"{gateway.url}/v1/queues/{_QUEUE}", method="PUT", body=b"{}") == 201
    client = socket.create_connection(("127.0.0.1", gateway.port), timeout=30)
    request.addfinalizer(client.close)
    client.sendall(f"POST /v1/queues/{_QUEUE}/receive?wait=60 HTTP/1.1\r\nHost: x\r\n"
                   "Content-Length: 0\r\n\r\n".encode())

    def parked() -> float:
        text = http_get(gateway.url + "/metrics")[2].decode()
        return next(float(line.split()[1]) for line in text.splitlines()
                    if line.startswith("entrepot_http_long_polls_parked "))

    wait_for(lambda: parked() == 1, "the poll parked")
    os.kill(_holder(front_pids(gateway.proc.pid), client, gateway.port), signal.SIGKILL)
    # Started again: by then the owner has long seen the dead front's connections close.
    wait_for(lambda: gateway.log().count("serving pid=") >= 3, "the front started again")
    assert http_request(f"{gateway.url}/v1/queues/{_QUEUE}/messages", body=b"kept") == 201
    wait_for(lambda: parked() == 0, "the poll woke and ended")
    assert stored(gateway.url) == {b"kept"}
    assert gateway.stop() == 0


@pytest.mark.crash
def test_fronts_that_cannot_start_again_stop_the_gateway(tmp_path: Path) -> None:
    cert, key = create_self_signed(tmp_path / "tls", common_name="localhost",
                                   names=["127.0.0.1"], days=2)
    config = tmp_path / "entrepot.toml"
    config.write_text(f'[server]\ntls_cert = "{cert}"\ntls_key = "{key}"\n')
    gateway = GatewayProcess(tmp_path / "data", cafile=cert,
                             extra_args=("--config", str(config), "--workers", "2"))
    gateway.wait_ready()
    key.unlink()  # a front started now cannot load its TLS key
    for pid in front_pids(gateway.proc.pid):
        os.kill(pid, signal.SIGKILL)
    wait_for(lambda: gateway.proc.poll() is not None, "the owner gave up and stopped")
    assert gateway.proc.returncode == 1
    assert "could not start 5 times in a row" in gateway.log()
    assert gateway.stop() == 1


@pytest.mark.crash
@pytest.mark.timeout(300)
def test_a_stop_under_load_answers_what_it_took_and_loses_nothing(tmp_path: Path) -> None:
    """SIGTERM while eight clients send (through the fronts' send lanes): the gateway
    stops with exit 0, every send it answered 201 is there after a restart, and none was
    answered anything but 201 (a send it could no longer take gets its connection closed,
    which a client tries again)."""
    gateway = start_workers(tmp_path / "data")
    assert http_request(f"{gateway.url}/v1/queues/{_QUEUE}", method="PUT", body=b"{}") == 201
    acked: set[bytes] = set()
    refused: set[int] = set()
    asyncio.run(_load_until(gateway.url, acked, lambda: len(acked) >= 300,
                            lambda: gateway.proc.send_signal(signal.SIGTERM),
                            lambda: gateway.proc.poll() is not None, refused))
    assert gateway.proc.returncode == 0, gateway.log()[-3000:]
    assert refused <= {503}, refused
    again = start_workers(tmp_path / "data")
    lost = acked - stored(again.url)
    assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {sorted(lost)[:3]}"
    assert again.stop() == 0
