"""Every message the gateway stores is written by gateway.queues.sending.

A spy on ``sending.commit`` and ``commit_each`` records the queue of each message record
they write, while REST, batch, format-name, transactional, SRMP (plain and stream) sends and
the acknowledgements they ask for go through the real application. Each queue must then hold exactly the records
the spy saw: a send path that composed and committed its records on its own would leave a
message the spy never saw.
"""

from __future__ import annotations

import base64
import collections
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from gateway.queues import sending
from gateway.settings import Settings
from store.message_store import MessageStore
from store.records import StoredRecord
from tests.helpers import ready_client
from tests.srmp_client import post, stream_message, user_message

QUEUES = {"plain": False, "acks": False, "private$/a": True, "private$/simpleq": False,
          "private$/orders": True}
ACK = {"Mq-Admin-Queue": "acks", "Mq-Acknowledge": "MQMSG_ACKNOWLEDGMENT_FULL_REACH_QUEUE"}


@pytest.fixture
def written(monkeypatch: pytest.MonkeyPatch) -> collections.Counter[str]:
    """Queue name -> message records written through ``sending.commit``."""
    seen: collections.Counter[str] = collections.Counter()
    real = sending.commit

    async def commit(store: MessageStore, sends: Sequence[sending.Send],
                     **options: Any) -> list[StoredRecord]:
        made = await real(store, sends, **options)
        seen.update(queue.path.display for queue, _ in sends if queue is not None)
        return made

    real_each = sending.commit_each

    async def commit_each(store: MessageStore, sends: Sequence[sending.Send],
                          arrived: Any) -> list[Any]:
        made = await real_each(store, sends, arrived)
        seen.update(queue.path.display for (queue, _), record in zip(sends, made)
                    if queue is not None and isinstance(record, StoredRecord))
        return made

    monkeypatch.setattr(sending, "commit", commit)
    monkeypatch.setattr(sending, "commit_each", commit_each)
    return seen


@pytest.fixture
async def client(aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> Any:
    test_client = await ready_client(aiohttp_client, settings_factory(
        server__names=["gw.example.com", "machine1"]))
    for name, transactional in QUEUES.items():
        response = await test_client.put(f"/v1/queues/{name}",
                                         json={"transactional": transactional})
        assert response.status == 201, await response.text()
    return test_client


async def _stored(client: Any) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for name in QUEUES:
        answer = await (await client.get(f"/v1/queues/{name}")).json()
        if answer["messages"]:
            counts[name] = int(answer["messages"])
    return counts


async def _rest(client: Any) -> None:
    response = await client.post("/v1/queues/plain/messages", data=b"r", headers=ACK)
    assert response.status == 201, await response.text()


async def _batch(client: Any) -> None:
    item = {"body_base64": base64.b64encode(b"b").decode()}
    response = await client.post("/v1/batch", json={"messages": [
        {"queue": "plain", **item}, {"queue": "private$/a", **item}]})
    assert response.status == 201, await response.text()


async def _format_name(client: Any) -> None:
    response = await client.post("/v1/messages", data=b"f", headers={
        "Mq-Destination": "DIRECT=OS:.\\private$\\a,DIRECT=HTTP://gw.example.com/msmq/plain",
        **ACK})
    assert response.status == 201, await response.text()


async def _transaction(client: Any) -> None:
    tx = (await (await client.post("/v1/transactions")).json())["id"]
    response = await client.post("/v1/queues/private$/a/messages", data=b"t",
                                 headers={"Mq-Transaction": tx})
    assert response.status in (201, 202), await response.text()
    assert (await client.post(f"/v1/transactions/{tx}/commit")).status == 200


async def _srmp(client: Any) -> None:
    request = user_message("http://machine1/msmq/private$/simpleq", b"s", ordinal=1)
    assert (await post(client, request)).status == 200


async def _srmp_stream(client: Any) -> None:
    request = stream_message("http://machine1/msmq/private$/orders", b"o", 1,
                             receipts_to="http://sender.example/msmq/order_queue$")
    assert (await post(client, request)).status == 200


@pytest.mark.parametrize("send", [_rest, _batch, _format_name, _transaction, _srmp,
                                  _srmp_stream])
async def test_every_stored_message_was_written_by_sending(
        client: Any, written: collections.Counter[str],
        send: Callable[[Any], Any]) -> None:
    await send(client)
    stored = await _stored(client)
    assert stored, "the send stored nothing"
    assert stored == {name: written[name] for name in stored}, (stored, written)


async def test_acknowledgements_are_written_by_sending(
        client: Any, written: collections.Counter[str]) -> None:
    await _rest(client)
    await _format_name(client)
    stored = await _stored(client)
    assert stored["acks"] == 2 and written["acks"] == 2, (stored, written)
