"""A signed request captured before a restart cannot be sent again after it (both modes:
make test runs it again with one process). A clean stop keeps the nonces used within the
replay window; after a crash, which keeps nothing, a signature made before the start is
refused. A request signed after the restart is taken."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from pathlib import Path

import pytest

from gateway.auth.hmac_sig import sign
from tests.helpers import GatewayProcess, exchange, front_pids

pytestmark = pytest.mark.workers

SECRET = b"the shared secret of partner s, 40 bytes"
PATH = "/v1/queues/private$/signed_in/messages"


def _start(root: Path, port: int = 0) -> GatewayProcess:
    (root / "s.secret").write_bytes(SECRET)
    (root / "entrepot.toml").write_text(f"""[auth]
admin_key_sha256 = "{hashlib.sha256(b'admin').hexdigest()}"
[[partners]]
name = "s"
hmac_secret_file = "{root / 's.secret'}"
send = ["private$/signed_*"]
[[queues]]
path = "private$/signed_in"
""")
    gateway = GatewayProcess(root / "data", port=port,
                             env={"ENTREPOT_CONFIG": str(root / "entrepot.toml")})
    gateway.wait_ready()
    return gateway


def _signed_send(body: bytes, method: str = "POST", path: str = PATH, ahead: int = 0) -> bytes:
    """The request's bytes, as a partner sends them (and an attacker may capture them);
    ``ahead``: the signer's clock runs this many seconds ahead of the gateway's."""
    ts, nonce = int(time.time()) + ahead, f"nonce-{time.monotonic_ns()}"
    headers = [("Content-Type", "application/octet-stream")]
    auth = sign(SECRET, method, path, ts, nonce, body, "s", headers=headers)
    return (f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            f"Authorization: {auth}\r\nContent-Type: application/octet-stream\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _next_second() -> None:
    time.sleep(1.05 - time.time() % 1)


def _send(gateway: GatewayProcess, request: bytes) -> bytes:
    return exchange(gateway.port, request)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGKILL], ids=["clean", "crash"])
def test_a_request_signed_before_a_restart_is_not_taken_again(tmp_path: Path,
                                                              stop: int) -> None:
    gateway = _start(tmp_path)
    captured = _signed_send(b"once")
    try:
        assert _send(gateway, captured).startswith(b"HTTP/1.1 201 ")
        assert _send(gateway, captured).startswith(b"HTTP/1.1 401 ")  # a replay, as ever
        fronts = front_pids(gateway.proc.pid)
        _next_second()  # a restart takes longer than the rest of its second
    finally:
        gateway.stop(stop)
    while any(_alive(pid) for pid in fronts):  # a killed owner's fronts follow it
        time.sleep(0.05)
    gateway = _start(tmp_path, gateway.port)
    try:
        replayed = _send(gateway, captured)
        assert replayed.startswith(b"HTTP/1.1 401 "), replayed
        assert (b"already used" if stop == signal.SIGTERM else b"signed before") in replayed
        _next_second()  # after a crash, the start's own second is refused too
        assert _send(gateway, _signed_send(b"fresh")).startswith(b"HTTP/1.1 201 ")
    finally:
        gateway.stop()


def test_a_nonce_is_used_up_whichever_front_a_replay_reaches(tmp_path: Path) -> None:
    """Fronts check signatures themselves and have the owner, which holds the nonces, use
    each one up: a replay is refused on every connection (each may reach another front), on
    a route the fronts answer (a send) and on one the owner runs as an operation (a queue's
    settings), also when it claims that a front has taken its nonce already."""
    gateway = _start(tmp_path)
    try:
        for captured in (_signed_send(b"once"),
                         _signed_send(b"", "GET", "/v1/queues/private$/signed_in")):
            first = _send(gateway, captured)
            assert first.startswith((b"HTTP/1.1 201 ", b"HTTP/1.1 200 ")), first
            claimed = captured.replace(b"\r\n\r\n", b"\r\nEntrepot-Front-Nonce-Taken: 1"
                                       b"\r\nEntrepot-Front-Throttled: 1\r\n\r\n", 1)
            for replay in [captured] * 6 + [claimed] * 6:
                replayed = _send(gateway, replay)
                assert replayed.startswith(b"HTTP/1.1 401 "), replayed
                assert b"already used" in replayed, replayed
        sent = json.loads(_send(gateway, _signed_send(
            b"", "GET", "/v1/queues/private$/signed_in")).partition(b"\r\n\r\n")[2])
        assert sent["messages"] == 1
    finally:
        gateway.stop()


def test_a_signature_ahead_of_the_clock_is_not_taken_again_after_a_crash(
        tmp_path: Path) -> None:
    """A partner whose clock runs a minute ahead: its request captured before a crash
    carries a time after the restart, and is refused all the same; its next request, signed
    past its mark, is taken."""
    gateway = _start(tmp_path)
    captured = _signed_send(b"ahead", ahead=60)
    try:
        assert _send(gateway, captured).startswith(b"HTTP/1.1 201 ")
        fronts = front_pids(gateway.proc.pid)
    finally:
        gateway.stop(signal.SIGKILL)
    while any(_alive(pid) for pid in fronts):
        time.sleep(0.05)
    gateway = _start(tmp_path, gateway.port)
    try:
        replayed = _send(gateway, captured)
        assert replayed.startswith(b"HTTP/1.1 401 "), replayed
        assert b"clock ahead of the gateway" in replayed, replayed
        assert _send(gateway, _signed_send(b"next", ahead=75)).startswith(b"HTTP/1.1 201 ")
        queue = json.loads(_send(gateway, _signed_send(
            b"", "GET", "/v1/queues/private$/signed_in", ahead=76)).partition(b"\r\n\r\n")[2])
        assert queue["messages"] == 2
    finally:
        gateway.stop()


@pytest.mark.parametrize("ahead", [0, 60])
def test_a_crashs_refusals_outlive_the_clean_stop_after_it(tmp_path: Path, ahead: int) -> None:
    """Crash, start, stop cleanly, start: what the crash left unknown stays refused (the
    clean stop saves the limits the start after the crash set, as well as its nonces), a
    signature on time or one ahead of the clock."""
    gateway = _start(tmp_path)
    captured = [_signed_send(b"captured", ahead=ahead)]
    try:
        assert all(_send(gateway, c).startswith(b"HTTP/1.1 201 ") for c in captured)
        fronts = front_pids(gateway.proc.pid)
    finally:
        gateway.stop(signal.SIGKILL)
    while any(_alive(pid) for pid in fronts):
        time.sleep(0.05)
    _start(tmp_path, gateway.port).stop()
    gateway = _start(tmp_path, gateway.port)
    try:
        for replay in captured:
            replayed = _send(gateway, replay)
            assert replayed.startswith(b"HTTP/1.1 401 "), replayed
    finally:
        gateway.stop()
