"""Sends addressed by format name: local resolution, several destinations, refusals."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gateway.settings import Settings
from tests.helpers import ready_client

PROBLEM = "application/problem+json"


@pytest.fixture
async def client(aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> Any:
    test_client = await ready_client(aiohttp_client,
                                     settings_factory(server__names=["gw.example.com"]))
    for name, tx in (("private$/a", True), ("private$/b", True), ("plain", False),
                     ("acks", False)):
        await test_client.put(f"/v1/queues/{name}", json={"transactional": tx})
    return test_client


async def _count(client: Any, queue: str) -> int:
    return int((await (await client.get(f"/v1/queues/{queue}")).json())["messages"])


@pytest.mark.parametrize("destination", [
    "DIRECT=HTTP://gw.example.com/msmq/plain",
    "DIRECT=HTTPS://GW.EXAMPLE.COM:8443/MSMQ\\PLAIN",
    "DIRECT=OS:.\\plain",
    "DIRECT=HTTP://localhost/msmq/plain",
])
async def test_local_format_names_reach_the_queue(client: Any, destination: str) -> None:
    response = await client.post("/v1/messages", data=b"x",
                                 headers={"Mq-Destination": destination})
    assert response.status == 201, await response.text()
    assert [m["queue"] for m in (await response.json())["messages"]] == ["plain"]
    assert await _count(client, "plain") == 1


async def test_several_destinations_in_one_transaction(client: Any) -> None:
    destination = ("DIRECT=OS:.\\private$\\a,DIRECT=HTTP://gw.example.com/msmq/private$/b,"
                   "DIRECT=OS:.\\plain")
    response = await client.post("/v1/messages", data=b"x", headers={
        "Mq-Destination": destination, "Mq-Admin-Queue": "acks",
        "Mq-Acknowledge": "MQMSG_ACKNOWLEDGMENT_FULL_REACH_QUEUE"})
    assert response.status == 201
    body = await response.json()
    assert [m["queue"] for m in body["messages"]] == ["private$/a", "private$/b"]
    assert body["dead_lettered"] == [{"queue": "plain",
                                      "class": "MQMSG_CLASS_NACK_NOT_TRANSACTIONAL_Q"}]
    assert await _count(client, "plain") == 0
    dead = await (await client.get("/v1/queues/system$;deadxact/messages")).json()
    assert [m["class"] for m in dead["messages"]] == ["MQMSG_CLASS_NACK_NOT_TRANSACTIONAL_Q"]
    acks = await (await client.get("/v1/queues/acks/messages")).json()
    assert [m["class"] for m in acks["messages"]] == ["MQMSG_CLASS_NACK_NOT_TRANSACTIONAL_Q"]


async def test_format_name_sends_inside_an_explicit_transaction(client: Any) -> None:
    tx = (await (await client.post("/v1/transactions")).json())["id"]
    response = await client.post("/v1/messages", data=b"x", headers={
        "Mq-Destination": "DIRECT=OS:.\\private$\\a,DIRECT=OS:.\\private$\\b",
        "Mq-Transaction": tx})
    assert response.status == 202
    assert await _count(client, "private$/a") == 0
    await client.post(f"/v1/transactions/{tx}/commit")
    assert (await _count(client, "private$/a"), await _count(client, "private$/b")) == (1, 1)


@pytest.mark.parametrize("headers, status, fragment", [
    ({}, 400, "Mq-Destination"),
    ({"Mq-Destination": "orders"}, 400, "expected DIRECT="),
    ({"Mq-Destination": "DIRECT=TCP:10.1.2.3\\plain"}, 422, "not on this"),
    ({"Mq-Destination": "DIRECT=OS:.\\nowhere"}, 404, "no queue"),
])
async def test_refusals_store_nothing(client: Any, headers: dict[str, str], status: int,
                                      fragment: str) -> None:
    response = await client.post("/v1/messages", data=b"x", headers=headers)
    assert response.status == status
    assert response.headers["Content-Type"] == PROBLEM
    assert fragment in (await response.json(content_type=PROBLEM))["detail"]
    assert await _count(client, "plain") == 0


async def test_inbound_redirection_maps_a_logical_address_to_the_physical_queue(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], tmp_path: Any) -> None:
    """M01-style: partners address a logical URL; the message lands in the internal queue."""
    mapping = tmp_path / "mapping"
    mapping.mkdir()
    (mapping / "in.xml").write_text(
        '<redirections xmlns="msmq-queue-redirections.xml">'
        "<redirection><from>https://www.northwindtraders.com/msmq/orderq</from>"
        "<to>private$/internal_orders</to></redirection>"
        "<redirection><from>https://www.northwindtraders.com/msmq/other*</from>"
        "<to>https://localhost/msmq/plain</to></redirection></redirections>")
    client = await ready_client(aiohttp_client, settings_factory(mapping__dir=str(mapping)))
    await client.put("/v1/queues/private$/internal_orders", json={})
    await client.put("/v1/queues/plain", json={})
    response = await client.post("/v1/messages", data=b"o", headers={
        "Mq-Destination": "DIRECT=HTTPS://www.northwindtraders.com/msmq/OrderQ"})
    assert response.status == 201, await response.text()
    assert [m["queue"] for m in (await response.json())["messages"]] == [
        "private$/internal_orders"]
    response = await client.post("/v1/messages", data=b"p", headers={
        "Mq-Destination": "DIRECT=HTTPS://www.northwindtraders.com/msmq/other_things"})
    assert [m["queue"] for m in (await response.json())["messages"]] == ["plain"]
    unmapped = await client.post("/v1/messages", data=b"x", headers={
        "Mq-Destination": "DIRECT=HTTPS://www.northwindtraders.com/msmq/unknown"})
    assert unmapped.status == 201  # not redirected: waits for its link to the remote host
    links = (await (await client.get("/v1/links")).json())["links"]
    assert [link["destination"] for link in links] == [
        "https://www.northwindtraders.com/msmq/unknown"]
