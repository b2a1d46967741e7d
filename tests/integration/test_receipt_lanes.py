"""Receipts take the links' path: outbound redirection, one back-off per destination, a visible
lane in ``GET /v1/links``, the metrics and the status page, and one WARNING per failing
period.

The picture is the mirror of the core scenario: ``machine1`` (an internal sender whose name
does not resolve here) is reached through a relay (a mapping outbound redirection); its
stream receipt and its delivery receipt must go through the relay too, addressed to
``machine1`` unchanged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway.settings import Settings
from gateway.srmp.codec import SrmpMessage, parse_request
from gateway.srmp.model import Kind, Services, Stream
from tests.helpers import free_port, ready_client
from tests.srmp_client import STREAM_ID, post, user_message

MACHINE1 = "http://machine1"
ORDER_ACKS = f"{MACHINE1}/msmq/private$/order_queue$"
ADMIN = f"{MACHINE1}/msmq/private$/receipts"
ORDERS = "http://gw/msmq/private$/orders"


class _Relay:
    """The relay gateway machine1 is reached through: records what it takes; answers 503
    while ``state["down"]``."""

    def __init__(self, server: Any, got: list[tuple[str, SrmpMessage]],
                 state: dict[str, Any]) -> None:
        self.server, self.got, self.state = server, got, state

    def make_url(self, path: str) -> Any:
        return self.server.make_url(path)


def _relay_app() -> tuple[web.Application, list[tuple[str, SrmpMessage]], dict[str, Any]]:
    got: list[tuple[str, SrmpMessage]] = []
    state = {"down": False, "refused": 0}

    async def take(request: web.Request) -> web.Response:
        body = await request.read()
        if state["down"]:
            state["refused"] += 1
            return web.Response(status=503)
        got.append((request.path, parse_request(request.headers["Content-Type"], body)))
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/{tail:.*}", take)
    return app, got, state


@pytest.fixture
async def relay(aiohttp_server: Any) -> _Relay:
    app, got, state = _relay_app()
    return _Relay(await aiohttp_server(app), got, state)


async def _gateway(aiohttp_client: Any, settings_factory: Callable[..., Settings],
                   relay_url: str, tmp_path: Path, **overrides: Any) -> Any:
    mapping = tmp_path / "mapping"
    mapping.mkdir()
    (mapping / "out.xml").write_text(
        '<outbound_redirections xmlns="msmq_outbound_mapping.xml"><redirection>'
        f"<destination>{MACHINE1}/*</destination>"
        f"<through>{relay_url}</through></redirection>"
        "</outbound_redirections>")
    # Many attempts: a stream receipt must outlive the relay's outage in this test (a real
    # sender would resend its message and get a new one).
    client = await ready_client(aiohttp_client, settings_factory(
        server__names=["gw"], mapping__dir=str(mapping), links__retry_max="200ms",
        srmp__receipt_attempts=1000, **overrides))
    await client.put("/v1/queues/private$/orders", json={"transactional": True})
    return client


async def _send_from_machine1(client: Any) -> None:
    """A stream message from machine1 asking for a delivery receipt."""
    stream = Stream(STREAM_ID, 1, None, ORDER_ACKS)
    request = user_message(ORDERS, b"order", ordinal=1001, stream=stream,
                           services=Services(durable=True, delivery_receipt_to=ADMIN))
    response = await post(client, request)
    assert response.headers["Mq-Stream-Verdict"] == "stored", await response.text()


async def _until(check: Callable[[], Any], timeout: float = 30.0) -> Any:
    """Poll ``check`` until it is truthy (the timeout is an upper bound only)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await check()
        if result or asyncio.get_running_loop().time() > deadline:
            return result
        await asyncio.sleep(0.05)


def _kinds(relay: Any) -> dict[Kind, tuple[str, str]]:
    """Kind -> (the relay's request path, the envelope's ``<to>``) of what reached it."""
    return {m.envelope.kind: (path, m.envelope.path.to) for path, m in relay.got}


async def _lane(client: Any) -> dict[str, Any] | None:
    links = (await (await client.get("/v1/links")).json())["links"]
    return next((x for x in links if x.get("kind") == "receipts"
                 and x["destination"] == MACHINE1), None)


async def test_receipts_for_a_redirected_sender_go_through_the_relay(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], relay: Any,
        tmp_path: Path) -> None:
    client = await _gateway(aiohttp_client, settings_factory,
                           str(relay.make_url('/msmq')), tmp_path)
    await _send_from_machine1(client)

    async def both() -> bool:
        return {Kind.STREAM_RECEIPT, Kind.DELIVERY_RECEIPT} <= _kinds(relay).keys()

    assert await _until(both), _kinds(relay)
    kinds = _kinds(relay)
    assert kinds[Kind.STREAM_RECEIPT] == ("/msmq", ORDER_ACKS)
    assert kinds[Kind.DELIVERY_RECEIPT] == ("/msmq", ADMIN)

    async def settled() -> dict[str, Any] | None:
        lane = await _lane(client)
        return lane if lane is not None and lane["backlog"] == 0 and lane["sent"] >= 2 else None

    lane = await _until(settled)
    assert lane is not None, await _lane(client)
    assert lane["state"] == "active" and lane["retries"] == 0 and lane["last_error"] == ""


async def test_a_failing_receipt_lane_is_visible_logged_once_and_drains(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], relay: Any,
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway")
    relay.state["down"] = True
    client = await _gateway(aiohttp_client, settings_factory,
                           str(relay.make_url('/msmq')), tmp_path)
    await _send_from_machine1(client)

    async def failing() -> dict[str, Any] | None:
        lane = await _lane(client)
        return lane if (lane is not None and lane["backlog"] == 2 and lane["retries"] >= 4
                        and relay.state["refused"] >= 4) else None

    lane = await _until(failing)
    assert lane is not None, await _lane(client)
    assert lane["state"] == "inactive" and "503" in lane["last_error"], lane
    assert lane["id"]
    metrics = await (await client.get("/metrics")).text()
    assert f'entrepot_link_backlog{{destination="{MACHINE1}"}} 2.0' in metrics, metrics
    assert f'entrepot_link_state{{destination="{MACHINE1}",state="inactive"}} 1.0' in metrics
    assert f'entrepot_link_retries_total{{destination="{MACHINE1}"}}' in metrics
    status = await (await client.get("/ui/status.json")).json()
    assert [x["destination"] for x in status["links"] if x.get("kind") == "receipts"] == [
        MACHINE1]
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING
                and MACHINE1 in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "back-off" in warnings[0].getMessage()

    relay.state["down"] = False

    async def drained() -> dict[str, Any] | None:
        lane = await _lane(client)
        return lane if (lane is not None and lane["backlog"] == 0
                        and len(_kinds(relay)) == 2) else None

    lane = await _until(drained)
    assert lane is not None, (await _lane(client), _kinds(relay))
    assert lane["state"] == "active" and lane["sent"] == 2
    assert lane["last_error"] == "", lane  # recovered: no error shown as current
    assert _kinds(relay) == {Kind.STREAM_RECEIPT: ("/msmq", ORDER_ACKS),
                             Kind.DELIVERY_RECEIPT: ("/msmq", ADMIN)}
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING
                and MACHINE1 in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    metrics = await (await client.get("/metrics")).text()
    assert f'entrepot_link_backlog{{destination="{MACHINE1}"}} 0.0' in metrics


async def test_a_receipt_lane_can_be_paused_and_resumed(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], relay: Any,
        tmp_path: Path) -> None:
    client = await _gateway(aiohttp_client, settings_factory,
                           str(relay.make_url('/msmq')), tmp_path)
    await _send_from_machine1(client)
    assert await _until(lambda: _settled_count(relay, 2))
    lane = await _lane(client)
    assert lane is not None
    paused = await client.post(f"/v1/links/{lane['id']}/pause")
    assert paused.status == 200, await paused.text()
    assert (await paused.json())["state"] == "paused"
    # A second message (a new delivery receipt) waits while the lane is paused.
    request = user_message(ORDERS, b"again", ordinal=1002, stream=Stream(STREAM_ID, 2, 1, None),
                           services=Services(durable=True, delivery_receipt_to=ADMIN))
    assert (await post(client, request)).headers["Mq-Stream-Verdict"] == "stored"

    async def waiting() -> bool:
        found = await _lane(client)
        return found is not None and found["backlog"] >= 1 and found["state"] == "paused"

    assert await _until(waiting), await _lane(client)
    assert len(relay.got) == 2
    resumed = await client.post(f"/v1/links/{lane['id']}/resume")
    assert resumed.status == 200 and (await resumed.json())["state"] == "active"
    assert await _until(lambda: _settled_count(relay, 4)), _kinds(relay)


async def _settled_count(relay: Any, count: int) -> bool:
    return len(relay.got) >= count


async def test_receipts_wait_for_a_relay_that_is_not_listening_yet(
        aiohttp_client: Any, aiohttp_server: Any, settings_factory: Callable[..., Settings],
        tmp_path: Path) -> None:
    """The relay closed (connection refused): the lane waits to connect, then drains once
    the relay listens."""
    port = free_port()
    client = await _gateway(aiohttp_client, settings_factory, f"http://127.0.0.1:{port}/msmq",
                            tmp_path)
    await _send_from_machine1(client)

    async def waiting() -> dict[str, Any] | None:
        lane = await _lane(client)
        return lane if (lane is not None and lane["backlog"] == 2
                        and lane["retries"] >= 3) else None

    lane = await _until(waiting)
    assert lane is not None, await _lane(client)
    assert lane["state"] == "waiting to connect", lane
    assert f"127.0.0.1:{port}" in lane["last_error"] and lane["through"].endswith("/msmq")
    app, got, state = _relay_app()
    relay = _Relay(await aiohttp_server(app, port=port), got, state)

    async def drained() -> bool:
        found = await _lane(client)
        return found is not None and found["backlog"] == 0 and len(_kinds(relay)) == 2

    assert await _until(drained), (await _lane(client), _kinds(relay))
    assert _kinds(relay)[Kind.DELIVERY_RECEIPT] == ("/msmq", ADMIN)


async def test_a_newer_stream_receipt_replaces_a_waiting_one(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], relay: Any,
        tmp_path: Path) -> None:
    """Stream receipts are cumulative: while the lane waits, a newer receipt for the same
    stream takes the older one's place, so an outage leaves one per stream, not one per
    acknowledgement."""
    relay.state["down"] = True
    client = await _gateway(aiohttp_client, settings_factory,
                            str(relay.make_url('/msmq')), tmp_path)
    await _send_from_machine1(client)

    async def both_waiting() -> bool:
        lane = await _lane(client)
        return lane is not None and lane["backlog"] == 2 and lane["retries"] >= 1

    assert await _until(both_waiting), await _lane(client)  # the receipt for 1 is waiting
    for current in (2, 3):
        request = user_message(ORDERS, b"more", ordinal=1000 + current,
                               stream=Stream(STREAM_ID, current, current - 1, None))
        assert (await post(client, request)).headers["Mq-Stream-Verdict"] == "stored"

    async def superseded() -> bool:
        metrics = await (await client.get("/metrics")).text()
        lane = await _lane(client)
        return (lane is not None and lane["backlog"] == 2 and
                'entrepot_srmp_receipts_sent_total{kind="stream_receipt",result="superseded"}'
                in metrics)

    assert await _until(superseded), await _lane(client)
    relay.state["down"] = False

    async def drained() -> bool:
        lane = await _lane(client)
        return lane is not None and lane["backlog"] == 0

    assert await _until(drained), await _lane(client)
    stream_receipts = [m.envelope.stream_receipt for _, m in relay.got
                       if m.envelope.kind == Kind.STREAM_RECEIPT]
    assert [(r.stream_id, r.last_ordinal) for r in stream_receipts if r is not None] == [
        (STREAM_ID, 3)]


async def test_receipts_to_a_peer_use_its_tls(
        aiohttp_client: Any, aiohttp_server: Any, tmp_path: Path) -> None:
    """A ``[[peers]]`` destination that wants a client certificate and is verified against its
    own CA gets its receipts as its links get messages: with that TLS."""
    import ssl

    from gateway.auth.tls import create_self_signed
    from gateway.settings import parse_settings

    cert, key = create_self_signed(tmp_path / "server", common_name="localhost",
                                   names=["127.0.0.1"], days=2)
    client_cert, client_key = create_self_signed(tmp_path / "client", common_name="gw",
                                                 names=[], days=2)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    server_tls.verify_mode = ssl.CERT_REQUIRED
    server_tls.load_verify_locations(client_cert)
    app, got, state = _relay_app()
    peer = _Relay(await aiohttp_server(app, ssl=server_tls), got, state)
    admin = str(peer.make_url("/msmq/private$/receipts"))
    assert admin.startswith("https://")
    client = await ready_client(aiohttp_client, parse_settings(
        {"peers": [{"url": str(peer.make_url("/")) + "*", "cafile": str(cert),
                    "client_cert": str(client_cert), "client_key": str(client_key)}]},
        {"store.data_dir": str(tmp_path / "data"), "server.names": ["gw"],
         "links.retry_max": "200ms"}))
    await client.put("/v1/queues/plain", json={})
    request = user_message("http://gw/msmq/plain", b"x", ordinal=9,
                           services=Services(durable=True, delivery_receipt_to=admin))
    assert (await post(client, request)).status == 200

    async def arrived() -> bool:
        return Kind.DELIVERY_RECEIPT in _kinds(peer)

    assert await _until(arrived), await (await client.get("/v1/links")).json()
    assert _kinds(peer)[Kind.DELIVERY_RECEIPT] == ("/msmq/private$/receipts", admin)


async def test_a_failing_destination_does_not_hold_up_receipts_to_others(
        aiohttp_client: Any, aiohttp_server: Any, settings_factory: Callable[..., Settings],
        relay: Any, tmp_path: Path) -> None:
    """Many delivery receipts wait for machine1 (its relay down), all shown in its lane's
    backlog; a receipt for another sender still goes out at once, as one link does not wait
    for another."""
    relay.state["down"] = True
    app, got, state = _relay_app()
    other = _Relay(await aiohttp_server(app), got, state)
    other_admin = str(other.make_url("/msmq/private$/receipts"))
    client = await _gateway(aiohttp_client, settings_factory, str(relay.make_url("/msmq")),
                            tmp_path, outbound__allow=[str(other.make_url("/"))])
    await client.put("/v1/queues/plain", json={})
    waiting = 100  # many: each holds its place in the outbox while it waits
    for n in range(waiting):
        request = user_message("http://gw/msmq/plain", b"x", ordinal=2000 + n,
                               services=Services(durable=True, delivery_receipt_to=ADMIN))
        assert (await post(client, request)).status == 200

    async def all_waiting() -> bool:
        lane = await _lane(client)
        return lane is not None and lane["backlog"] == waiting and lane["retries"] >= 2

    assert await _until(all_waiting), await _lane(client)
    request = user_message("http://gw/msmq/plain", b"y", ordinal=3000,
                           services=Services(durable=True, delivery_receipt_to=other_admin))
    assert (await post(client, request)).status == 200

    async def arrived() -> bool:
        return Kind.DELIVERY_RECEIPT in _kinds(other)

    assert await _until(arrived), await (await client.get("/v1/links")).json()
    relay.state["down"] = False

    async def drained() -> bool:
        lane = await _lane(client)
        return lane is not None and lane["backlog"] == 0 and lane["sent"] == waiting

    assert await _until(drained, timeout=60.0), await _lane(client)
    assert len(relay.got) == waiting
