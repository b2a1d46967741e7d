"""Parked long polls (``POST .../receive?wait=N`` on an empty queue) against a real gateway:
they have their own cap (``server.long_polls_max``) and a per-partner share, a poll beyond
either is answered at once (503, Retry-After, a ``too-many-long-polls`` problem), and
neither they nor a full in-flight cap ever keep ``/healthz``, ``/readyz`` or ``/metrics``
from answering."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import signal
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.helpers import GatewayProcess

# Run again in one process (server.workers = 1) by make test (ENTREPOT_TEST_WORKERS).
pytestmark = pytest.mark.workers

LONG_POLLS_MAX = 8  # a partner's share: max(1, 8 // 4) = 2
IN_FLIGHT_MAX = 16
ADMIN = {"Authorization": "Bearer root-key"}
ACME = {"Authorization": "Bearer acme-key"}
GLOBEX = {"Authorization": "Bearer globex-key"}
EVENT_BOUND_S = 60.0  # how long a wait for an event may take before the test gives up


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    config = tmp_path / "entrepot.toml"
    queues = "".join(f'[[queues]]\npath = "private$/lp_{n}"\n'
                     for n in ("a", "b", "c", "ready", "send"))
    config.write_text(f"""
[server]
concurrent_requests_max = {IN_FLIGHT_MAX}
long_polls_max = {LONG_POLLS_MAX}
body_timeout = "1h"
[auth]
admin_key_sha256 = "{_sha('root-key')}"
[[partners]]
name = "acme"
api_key_sha256 = "{_sha('acme-key')}"
send = ["private$/lp_*"]
receive = ["private$/lp_a"]
[[partners]]
name = "globex"
api_key_sha256 = "{_sha('globex-key')}"
send = ["private$/lp_*"]
receive = ["private$/lp_b"]
{queues}""")
    proc = GatewayProcess(tmp_path / "data", extra_args=["--config", str(config)])
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    # Each long poll needs its own connection: no per-host limit.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:
        yield client


async def _poll(session: aiohttp.ClientSession, gateway: GatewayProcess, queue: str,
                headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
    async with session.post(f"{gateway.url}/v1/queues/private$/{queue}/receive?wait=60",
                            headers=headers) as response:
        return response.status, dict(response.headers), await response.read()


async def _send(session: aiohttp.ClientSession, gateway: GatewayProcess, queue: str,
                body: bytes) -> int:
    async with session.post(f"{gateway.url}/v1/queues/private$/{queue}/messages",
                            data=body, headers=ADMIN) as response:
        return response.status


async def _status(session: aiohttp.ClientSession, url: str) -> int:
    async with session.get(url, headers=ADMIN) as response:
        await response.read()
        return response.status


async def _gauge(session: aiohttp.ClientSession, gateway: GatewayProcess, name: str) -> float:
    async with session.get(gateway.url + "/metrics", headers=ADMIN) as response:
        assert response.status == 200, await response.text()
        text = await response.text()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


async def _until_parked(session: aiohttp.ClientSession, gateway: GatewayProcess,
                        count: int, bound_s: float = EVENT_BOUND_S) -> None:
    """Wait for the event "``count`` long polls are parked" (the gateway's own gauge)."""
    deadline = time.monotonic() + bound_s
    while await _gauge(session, gateway, "entrepot_http_long_polls_parked") != count:
        assert time.monotonic() < deadline, f"never {count} parked long polls"
        await asyncio.sleep(0.05)


async def _until_in_flight(session: aiohttp.ClientSession, gateway: GatewayProcess,
                           count: int) -> None:
    """Wait for the event "``count`` requests in flight" besides the /metrics asking."""
    deadline = time.monotonic() + EVENT_BOUND_S
    while await _gauge(session, gateway, "entrepot_http_requests_in_flight") != count + 1:
        assert time.monotonic() < deadline, f"never {count} requests in flight"
        await asyncio.sleep(0.05)


def _refused_as_long_poll(answer: tuple[int, dict[str, str], bytes]) -> None:
    status, headers, body = answer
    assert status == 503, (status, body)
    assert headers["Content-Type"] == "application/problem+json"
    assert int(headers["Retry-After"]) >= 1
    assert json.loads(body)["type"].endswith("/too-many-long-polls"), body


async def test_long_polls_beyond_the_cap_are_refused_and_the_rest_is_served(
        gateway: GatewayProcess, session: aiohttp.ClientSession) -> None:
    attempts = 3 * LONG_POLLS_MAX
    polls = [asyncio.create_task(_poll(session, gateway, "lp_c", ADMIN))
             for _ in range(attempts)]
    # The excess is answered at once; the rest stay parked.
    deadline = time.monotonic() + EVENT_BOUND_S
    while sum(p.done() for p in polls) < attempts - LONG_POLLS_MAX:
        assert time.monotonic() < deadline, "the long polls over the cap were not answered"
        await asyncio.sleep(0.05)
    await _until_parked(session, gateway, LONG_POLLS_MAX)
    for refused in [p for p in polls if p.done()]:
        _refused_as_long_poll(refused.result())
    for path in ("/healthz", "/readyz", "/metrics"):
        assert await _status(session, gateway.url + path) == 200, path
    assert await _send(session, gateway, "lp_send", b"a normal send") == 201
    # A long poll that finds a message waiting never parks: the full cap does not refuse it.
    assert await _send(session, gateway, "lp_ready", b"waiting") == 201
    status, _, body = await _poll(session, gateway, "lp_ready", ADMIN)
    assert status == 200 and len(json.loads(body)["messages"]) == 1
    # The parked polls are still served: one message each.
    parked = [p for p in polls if not p.done()]
    for n in range(LONG_POLLS_MAX):
        assert await _send(session, gateway, "lp_c", b"m%d" % n) == 201
    for status, _, body in await asyncio.gather(*parked):
        assert status == 200 and len(json.loads(body)["messages"]) == 1
    await _until_parked(session, gateway, 0)


def _slow_body(gateway: GatewayProcess) -> socket.socket:
    """A request that stays in flight: its declared body never comes."""
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=30)
    sock.sendall(b"POST /v1/queues/private$/lp_send/messages HTTP/1.1\r\nHost: x\r\n"
                 b"Authorization: Bearer root-key\r\nContent-Length: 10\r\n\r\n")
    return sock


async def test_health_is_never_refused_by_a_full_in_flight_cap(
        gateway: GatewayProcess, session: aiohttp.ClientSession) -> None:
    polls = [asyncio.create_task(_poll(session, gateway, "lp_c", ADMIN))
             for _ in range(LONG_POLLS_MAX)]
    await _until_parked(session, gateway, LONG_POLLS_MAX)
    slow = [_slow_body(gateway) for _ in range(IN_FLIGHT_MAX)]
    try:
        # Parked long polls do not take in-flight slots; the slow bodies take them all.
        await _until_in_flight(session, gateway, LONG_POLLS_MAX + IN_FLIGHT_MAX)
        async with session.post(f"{gateway.url}/v1/queues/private$/lp_send/messages",
                                data=b"over the cap", headers=ADMIN) as response:
            assert response.status == 503
            assert (await response.json(content_type="application/problem+json")
                    )["type"].endswith("/overloaded")
        for path in ("/healthz", "/readyz", "/metrics"):
            assert await _status(session, gateway.url + path) == 200, path
    finally:
        for sock in slow:
            sock.close()
    await _until_in_flight(session, gateway, LONG_POLLS_MAX)
    for n in range(LONG_POLLS_MAX):
        assert await _send(session, gateway, "lp_c", b"m%d" % n) == 201
    assert all(status == 200 for status, _, _ in await asyncio.gather(*polls))


async def test_one_partner_cannot_take_every_long_poll_slot(
        gateway: GatewayProcess, session: aiohttp.ClientSession) -> None:
    share = max(1, LONG_POLLS_MAX // 4)
    acme = [asyncio.create_task(_poll(session, gateway, "lp_a", ACME)) for _ in range(share)]
    await _until_parked(session, gateway, share)
    over = await _poll(session, gateway, "lp_a", ACME)
    _refused_as_long_poll(over)
    assert "acme" in json.loads(over[2])["detail"]
    # The other partner still gets its share.
    globex = [asyncio.create_task(_poll(session, gateway, "lp_b", GLOBEX))
              for _ in range(share)]
    await _until_parked(session, gateway, 2 * share)
    _refused_as_long_poll(await _poll(session, gateway, "lp_b", GLOBEX))
    # The admin has no share, only the overall cap.
    admin = [asyncio.create_task(_poll(session, gateway, "lp_c", ADMIN))
             for _ in range(LONG_POLLS_MAX - 2 * share)]
    await _until_parked(session, gateway, LONG_POLLS_MAX)
    _refused_as_long_poll(await _poll(session, gateway, "lp_c", ADMIN))
    for queue, tasks in (("lp_a", acme), ("lp_b", globex), ("lp_c", admin)):
        for n in range(len(tasks)):
            assert await _send(session, gateway, queue, b"m%d" % n) == 201
        assert all(status == 200 for status, _, _ in await asyncio.gather(*tasks))
    # Slots are given back: acme parks again.
    again = asyncio.create_task(_poll(session, gateway, "lp_a", ACME))
    await _until_parked(session, gateway, 1)
    assert await _send(session, gateway, "lp_a", b"last") == 201
    assert (await again)[0] == 200


@pytest.mark.parametrize("in_transaction", [False, True], ids=["plain", "transaction"])
async def test_a_poll_whose_client_hung_up_takes_nothing(
        gateway: GatewayProcess, session: aiohttp.ClientSession, in_transaction: bool) -> None:
    # With fronts the owner sees the same when the front holding the poll dies
    # (tests/crash/test_workers_crash.py).
    queue = "lp_tx" if in_transaction else "lp_b"
    tx = b""
    if in_transaction:
        async with session.put(f"{gateway.url}/v1/queues/private$/lp_tx",
                               json={"transactional": True}, headers=ADMIN) as response:
            assert response.status == 201
        async with session.post(f"{gateway.url}/v1/transactions", headers=ADMIN) as response:
            tx = b"Mq-Transaction: " + (await response.json())["id"].encode() + b"\r\n"
    sock = socket.create_connection(("127.0.0.1", gateway.port), timeout=30)
    sock.sendall(b"POST /v1/queues/private$/" + queue.encode() + b"/receive?wait=60 HTTP/1.1"
                 b"\r\nHost: x\r\nAuthorization: Bearer root-key\r\n" + tx
                 + b"Content-Length: 0\r\n\r\n")
    await _until_parked(session, gateway, 1)
    sock.close()
    # The poll ends and gives its slot back without waiting for a message or its 60 s.
    await _until_parked(session, gateway, 0, bound_s=30.0)
    async with session.post(f"{gateway.url}/v1/queues/private$/{queue}/messages",
                            data=b"kept", headers=ADMIN) as response:
        assert response.status == 201
    async with session.post(f"{gateway.url}/v1/queues/private$/{queue}/receive",
                            headers=ADMIN) as response:
        got = await response.json()
    assert [base64.b64decode(m["body_base64"]) for m in got["messages"]] == [b"kept"]


@pytest.mark.parametrize("end", ["commit", "abort"])
async def test_a_poll_in_a_transaction_that_ends_takes_nothing(
        gateway: GatewayProcess, session: aiohttp.ClientSession, end: str) -> None:
    """A receive waiting in a transaction that is committed or aborted meanwhile ends with
    a conflict: a message that arrives later is for the next receiver, not reserved for a
    transaction nobody can end any more."""
    queue = f"{gateway.url}/v1/queues/private$/lp_end_{end}"
    async with session.put(queue, json={"transactional": True}, headers=ADMIN) as response:
        assert response.status == 201
    async with session.post(f"{gateway.url}/v1/transactions", headers=ADMIN) as response:
        tx = (await response.json())["id"]

    async def poll() -> tuple[int, dict[str, object]]:
        async with session.post(f"{queue}/receive?wait=60",
                                headers={**ADMIN, "Mq-Transaction": tx}) as response:
            return response.status, await response.json(content_type=None)

    waiting = asyncio.ensure_future(poll())
    await _until_parked(session, gateway, 1)
    async with session.post(f"{gateway.url}/v1/transactions/{tx}/{end}",
                            headers=ADMIN) as response:
        assert response.status == 200, await response.text()
    async with session.post(f"{queue}/messages", data=b"later", headers=ADMIN) as response:
        assert response.status == 201
    status, answer = await asyncio.wait_for(waiting, EVENT_BOUND_S)
    assert status == 409 and tx in str(answer["detail"]), answer
    async with session.post(f"{queue}/receive", headers=ADMIN) as response:
        got = await response.json()
    assert [base64.b64decode(m["body_base64"]) for m in got["messages"]] == [b"later"]


async def test_a_stop_answers_parked_polls_at_once(gateway: GatewayProcess,
                                                  session: aiohttp.ClientSession) -> None:
    """SIGTERM ends parked receives as if their wait had run out (200, no message), so
    that their clients poll again elsewhere, instead of holding the stop for its whole
    grace and then losing their connections without an answer."""
    polls = [asyncio.ensure_future(_poll(session, gateway, "lp_a", ACME)) for _ in range(2)]
    await _until_parked(session, gateway, 2)
    gateway.proc.send_signal(signal.SIGTERM)
    for status, _, body in await asyncio.gather(*polls):
        assert (status, json.loads(body)) == (200, {"messages": []})
    assert await asyncio.get_running_loop().run_in_executor(None, gateway.stop) == 0
