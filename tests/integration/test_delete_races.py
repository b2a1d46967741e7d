"""Deleting or changing a queue while sends to it are on their way (found from outside: a
send, a batch or a transaction's send racing a DELETE left its message stored in the deleted
queue, to come back at the next start in a recovered queue no partner can reach, and the
transaction's commit answered 500; a send racing a PUT that changes ``transactional`` stored
a message of the other kind). Each round sends and deletes (or changes) at once; whatever the
order, every answer is a clean one and nothing outlives the queue."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Callable
from typing import Any

from gateway.settings import Settings
from tests.helpers import ready_client

ROUNDS = 12


async def _sends(client: Any, queue: str, tx: str) -> list[int]:
    path = f"/v1/queues/{queue}/messages"
    batch = {"messages": [{"queue": queue, "body_base64": base64.b64encode(b"b").decode()}]}
    answers = await asyncio.gather(
        client.post(path, data=b"in tx", headers={"Mq-Transaction": tx}),
        client.post(path, data=b"single"),
        client.post("/v1/batch", json=batch),
        client.delete(f"/v1/queues/{queue}"))
    return [a.status for a in answers]


async def test_a_delete_racing_sends_leaves_nothing_behind(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    settings = settings_factory()
    client = await ready_client(aiohttp_client, settings)
    for n in range(ROUNDS):
        queue = f"private$/race_{n}"
        assert (await client.put(f"/v1/queues/{queue}",
                                 json={"transactional": True})).status == 201
        tx = (await (await client.post("/v1/transactions")).json())["id"]
        *sent, deleted = await _sends(client, queue, tx)
        assert deleted in (204, 409), (n, sent, deleted)
        assert all(s in (201, 202, 404, 409) for s in sent), (n, sent, deleted)
        committed = await client.post(f"/v1/transactions/{tx}/commit")
        assert committed.status in (200, 404), await committed.text()
        if deleted == 409:  # the transaction sent to it: now it may go
            assert (await client.delete(f"/v1/queues/{queue}")).status in (204, 409)
    await client.close()
    client = await ready_client(aiohttp_client, settings)
    names = [q["path"] for q in (await (await client.get("/v1/queues")).json())["queues"]]
    assert not [n for n in names if "recovered" in n], names


async def test_a_change_of_transactional_racing_sends_keeps_each_kind_in_its_queue(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    client = await ready_client(aiohttp_client, settings_factory())
    for n in range(ROUNDS):
        queue = f"private$/flip_{n}"
        before = n % 2 == 0
        assert (await client.put(f"/v1/queues/{queue}",
                                 json={"transactional": before})).status == 201
        sent, changed = await asyncio.gather(
            client.post(f"/v1/queues/{queue}/messages", data=b"m",
                        headers={"Idempotency-Key": f"k{n}"}),
            client.put(f"/v1/queues/{queue}", json={"transactional": not before}))
        assert sent.status in (201, 400), await sent.text()
        assert changed.status in (200, 409), await changed.text()
        shown = await (await client.get(f"/v1/queues/{queue}")).json()
        page = await (await client.get(f"/v1/queues/{queue}/messages")).json()
        for message in page["messages"]:
            assert message["properties"]["transactional"] == shown["transactional"], (n, shown)
