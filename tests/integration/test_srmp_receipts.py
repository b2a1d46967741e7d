"""Delivery and commitment receipts asked for by SRMP senders whose admin queues are on other
hosts: kept in the outbox in the same commit as their cause, posted as SRMP receipts (V05/V07
shapes), retried through 5xx, removed once answered."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web

from gateway.settings import Settings
from gateway.srmp.codec import SrmpMessage, parse_request
from gateway.srmp.model import Kind, Services, Stream, objectid_from_base64
from tests.helpers import ready_client
from tests.srmp_client import SENDER_QM, STREAM_ID, post, user_message

TO = "http://gw/msmq/plain"


@pytest.fixture
async def sender_side(aiohttp_server: Any) -> Any:
    """The sender's admin queues: answers 503 to the first ``fail_first`` posts."""
    got: list[SrmpMessage] = []
    state = {"fail_first": 0, "posts": 0}

    async def take(request: web.Request) -> web.Response:
        state["posts"] += 1
        if state["posts"] <= state["fail_first"]:
            return web.Response(status=503)
        got.append(parse_request(request.headers["Content-Type"], await request.read()))
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/{tail:.*}", take)
    server = await aiohttp_server(app)
    server.got, server.state = got, state
    return server


async def _gateway(aiohttp_client: Any, settings_factory: Callable[..., Settings],
                   sender: Any = None) -> Any:
    """The gateway; receipts may go to ``sender``'s server (an allowed outbound address)."""
    allow = [str(sender.make_url("/"))] if sender is not None else []
    client = await ready_client(aiohttp_client, settings_factory(server__names=["gw"],
                                                                 outbound__allow=allow))
    await client.put("/v1/queues/plain", json={})
    return client


async def _wait_for(server: Any, count: int, timeout: float = 10.0) -> list[SrmpMessage]:
    deadline = asyncio.get_running_loop().time() + timeout
    while len(server.got) < count and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
    return list(server.got)


async def test_delivery_receipt_posted_and_retried_through_5xx(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], sender_side: Any) -> None:
    sender_side.state["fail_first"] = 2
    client = await _gateway(aiohttp_client, settings_factory, sender_side)
    receipts_url = str(sender_side.make_url("/msmq/private$/receipts"))
    req = user_message(TO, b"x", ordinal=77, label="order 7",
                       services=Services(durable=True, delivery_receipt_to=receipts_url))
    assert (await post(client, req)).status == 200
    [receipt] = await _wait_for(sender_side, 1)
    env = receipt.envelope
    assert env.kind == Kind.DELIVERY_RECEIPT and env.delivery_receipt is not None
    assert env.delivery_receipt.id == f"uuid:77@{SENDER_QM}"
    assert env.path.to == receipts_url and env.path.rev_via == TO
    assert env.label == "order 7" and env.msmq is not None and env.msmq.message_class == 2
    assert env.msmq.correlation is not None
    assert objectid_from_base64(env.msmq.correlation) == (SENDER_QM, 77)
    assert sender_side.state["posts"] == 3
    await asyncio.sleep(0.3)
    assert len(sender_side.got) == 1  # removed from the outbox once answered


@pytest.mark.parametrize("how,decision,klass", [
    ("receive", "positive", 16384),
    ("purge", "negative", 0xC001),
])
async def test_commitment_receipts_when_the_message_leaves(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], sender_side: Any,
        how: str, decision: str, klass: int) -> None:
    client = await _gateway(aiohttp_client, settings_factory, sender_side)
    url = str(sender_side.make_url("/msmq/private$/deliverydone"))
    services = Services(durable=True, commitment_receipt_to=url, positive_only=True,
                        negative_only=True)
    assert (await post(client, user_message(TO, b"x", ordinal=5, services=services))).status \
        == 200
    if how == "receive":
        response = await client.post("/v1/queues/plain/receive")
    else:
        response = await client.post("/v1/queues/plain/purge")
    assert response.status == 200, await response.text()
    [receipt] = await _wait_for(sender_side, 1)
    commitment = receipt.envelope.commitment_receipt
    assert receipt.envelope.kind == Kind.COMMITMENT_RECEIPT and commitment is not None
    assert commitment.decision == decision and commitment.id == f"uuid:5@{SENDER_QM}"
    assert receipt.envelope.msmq is not None and receipt.envelope.msmq.message_class == klass


async def test_a_stream_message_asking_for_a_delivery_receipt_gets_one(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], sender_side: Any) -> None:
    """Stored by the stream sequencer, not the plain path: its acknowledgement goes in the
    same commit as the message."""
    client = await _gateway(aiohttp_client, settings_factory, sender_side)
    await client.put("/v1/queues/private$/orders", json={"transactional": True})
    receipts_url = str(sender_side.make_url("/msmq/private$/receipts"))
    to = "http://gw/msmq/private$/orders"
    stream = Stream(STREAM_ID, 1, None, str(sender_side.make_url("/msmq/order_queue$")))
    req = user_message(to, b"x", ordinal=1001, stream=stream,
                       services=Services(durable=True, delivery_receipt_to=receipts_url))
    response = await post(client, req)
    assert response.headers["Mq-Stream-Verdict"] == "stored"
    found = [m for m in await _wait_for(sender_side, 1) if m.envelope.kind
             == Kind.DELIVERY_RECEIPT]
    assert found, [m.envelope.kind for m in sender_side.got]
    receipt = found[0].envelope.delivery_receipt
    assert receipt is not None and receipt.id == f"uuid:1001@{SENDER_QM}"


async def test_a_receipt_address_in_upper_case_is_written_as_windows_writes_it(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], sender_side: Any) -> None:
    """A sender may write ``HTTP://`` in ``sendTo``: the receipt's ``<to>`` says ``http://``
    as in the spec's receipts (V05, V07)."""
    client = await _gateway(aiohttp_client, settings_factory, sender_side)
    receipts_url = str(sender_side.make_url("/msmq/private$/receipts"))
    shouted = "HTTP" + receipts_url[len("http"):]
    req = user_message(TO, b"x", ordinal=78, services=Services(
        durable=True, delivery_receipt_to=shouted))
    assert (await post(client, req)).status == 200
    [receipt] = await _wait_for(sender_side, 1)
    assert receipt.envelope.path.to == receipts_url
