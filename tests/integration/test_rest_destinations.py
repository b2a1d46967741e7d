"""Sends addressed by format name: local resolution, several destinations, refusals."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from gateway.settings import Settings
from tests.helpers import REPO_ROOT, ready_client

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


async def test_the_copies_are_listed_in_the_destination_order(client: Any) -> None:
    destination = ("DIRECT=OS:.\\plain,DIRECT=HTTP://remote.invalid/msmq/q,DIRECT=OS:.\\acks,"
                   "DIRECT=HTTP://other.invalid/msmq/r")
    response = await client.post("/v1/messages", data=b"x",
                                 headers={"Mq-Destination": destination})
    assert response.status == 201, await response.text()
    queues = [m["queue"] for m in (await response.json())["messages"]]
    assert [q.lower() for q in queues] == ["plain", "http://remote.invalid/msmq/q", "acks",
                                           "http://other.invalid/msmq/r"]


# ---- the table in docs/rest-api.md of transactions and plain destinations, row by row ----

_QUEUES = {"t": ["private$/a", "private$/b"], "p": ["plain", "acks"]}


def _transaction_table() -> list[tuple[str, str, str]]:
    """(Mq-Transaction, destination letters, answer) of each row of the table that follows
    ``<!-- transactional-destinations -->`` in docs/rest-api.md."""
    text = (REPO_ROOT / "docs" / "rest-api.md").read_text()
    lines = text[text.index("<!-- transactional-destinations -->"):].splitlines()[1:]
    rows = []
    for line in lines[2:]:  # after the header and its rule
        if not line.startswith("|"):
            break
        tx, destinations, answer = (cell.strip() for cell in line.strip("|").split("|"))
        for letters in re.findall(r"`([tp,]+)`", destinations):
            rows.append((tx, letters, answer))
    return rows


def _destination(letters: str) -> list[str]:
    seen = {"t": 0, "p": 0}
    queues = []
    for letter in letters.split(","):
        queues.append(_QUEUES[letter][seen[letter]])
        seen[letter] += 1
    return queues


async def test_the_documented_transaction_table_is_what_the_gateway_does(client: Any) -> None:
    rows = _transaction_table()
    assert {tx for tx, _, _ in rows} == {"a transaction id", "`single`", "absent", "`none`"}
    for tx, letters, answer in rows:
        queues = _destination(letters)
        headers = {"Mq-Destination": ",".join(
            "DIRECT=OS:.\\" + q.replace("/", "\\") for q in queues)}
        if tx == "a transaction id":
            headers["Mq-Transaction"] = (await (await client.post(
                "/v1/transactions")).json())["id"]
        elif tx != "absent":
            headers["Mq-Transaction"] = tx.strip("`")
        before = {q: await _count(client, q) for q in _QUEUES["t"] + _QUEUES["p"]}
        response = await client.post("/v1/messages", data=b"x", headers=headers)
        where = (tx, letters, answer, await response.text())
        assert response.status == int(answer[:3]), where
        if response.status >= 400:
            problem = await response.json(content_type=PROBLEM)
            assert problem["type"].endswith(re.findall(r"`(MQMSG_CLASS_\w+)`", answer)[0]), where
            assert {q: await _count(client, q) for q in before} == before, where
            continue
        dead = [q for q in queues if q in _QUEUES["p"]] if "dead-lettered" in answer else []
        body = await response.json()
        if response.status == 201:
            assert [d["queue"] for d in body["dead_lettered"]] == dead, where
            assert [m["queue"] for m in body["messages"]] == [
                q for q in queues if q not in dead], where
        else:
            assert body["queues"] == queues, where
        for q in before:
            stored = 1 if response.status == 201 and q in queues and q not in dead else 0
            assert await _count(client, q) == before[q] + stored, where
