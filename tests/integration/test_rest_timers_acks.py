"""Time-to-be-received expiry into the dead-letter queues, and acknowledgement messages."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable
from typing import Any

from gateway.web.appkeys import STATE_KEY
from gateway.settings import Settings
from tests.helpers import ready_client


async def _client(aiohttp_client: Any, settings: Settings) -> Any:
    return await ready_client(aiohttp_client, settings)


async def _messages(client: Any, queue: str) -> list[dict[str, Any]]:
    page = await (await client.get(f"/v1/queues/{queue}/messages?limit=1000")).json()
    result: list[dict[str, Any]] = page["messages"]
    return result


async def _wait_for(client: Any, queue: str, count: int, timeout: float = 30.0
                    ) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = await _messages(client, queue)
        if len(found) >= count:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError(f"{queue} never held {count} messages")


async def _until_empty(client: Any, queue: str, timeout: float = 30.0) -> None:
    """Wait for the event "``queue`` holds nothing" (its last deadline may come a little
    after the others' on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while await _messages(client, queue):
        assert time.monotonic() < deadline, f"{queue} still holds messages"
        await asyncio.sleep(0.05)


async def test_receive_timeout_lands_in_the_right_dead_letter_queue_on_time(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    client = await _client(aiohttp_client, settings_factory())
    await client.put("/v1/queues/plain", json={})
    await client.put("/v1/queues/private$/tx", json={"transactional": True})
    sent_at = time.time()
    plain = await (await client.post("/v1/queues/plain/messages", data=b"p", headers={
        "Mq-Time-To-Be-Received": "0.5", "Mq-Journal": "deadletter"})).json()
    tx = await (await client.post("/v1/queues/private$/tx/messages", data=b"t", headers={
        "Mq-Time-To-Be-Received": "0.5", "Mq-Journal": "deadletter"})).json()
    await client.post("/v1/queues/plain/messages", data=b"gone", headers={
        "Mq-Time-To-Be-Received": "0.5"})
    [dead] = await _wait_for(client, "system$;deadletter", 1)
    # A timer at the deadline, not a periodic scan; generous for a loaded machine.
    late = time.time() - sent_at - 0.5
    assert late < 10.0, f"dead-lettered {late:.2f}s after the deadline"
    assert dead["id"] == plain["id"]
    assert dead["class"] == "MQMSG_CLASS_NACK_RECEIVE_TIMEOUT"
    assert dead["properties"]["source_queue"] == "plain"
    assert base64.b64decode(dead["body_base64"]) == b"p"
    [dead_tx] = await _wait_for(client, "system$;deadxact", 1)
    assert dead_tx["id"] == tx["id"]
    await _until_empty(client, "plain")  # "gone" was sent last: its deadline comes last
    await _until_empty(client, "private$/tx")
    assert len(await _messages(client, "system$;deadletter")) == 1, "no deadletter asked: gone"


async def test_deadlines_of_messages_gone_are_dropped_and_the_rest_still_expire(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    client = await _client(aiohttp_client, settings_factory())
    await client.put("/v1/queues/plain", json={})
    expiry = client.server.app[STATE_KEY].serving().queue_manager.expiry
    for _ in range(30):
        await client.post("/v1/queues/plain/messages", data=b"x",
                          headers={"Mq-Time-To-Be-Received": "3600"})
    received = await (await client.post("/v1/queues/plain/receive?max=30")).json()
    assert len(received["messages"]) == 30 and len(expiry) == 30, "received: entries stay"
    expiry.compact_at = 20  # the next deadline brings a compaction
    await client.post("/v1/queues/plain/messages", data=b"late", headers={
        "Mq-Time-To-Be-Received": "0.3", "Mq-Journal": "deadletter"})
    [dead] = await _wait_for(client, "system$;deadletter", 1)
    assert base64.b64decode(dead["body_base64"]) == b"late"
    assert len(expiry) == 0


async def test_timers_survive_a_restart(aiohttp_client: Any,
                                        settings_factory: Callable[..., Settings]) -> None:
    settings = settings_factory()
    first = await _client(aiohttp_client, settings)
    await first.put("/v1/queues/q", json={})
    await first.post("/v1/queues/q/messages", data=b"x", headers={
        "Mq-Time-To-Be-Received": "1.5", "Mq-Journal": "deadletter"})
    await first.close()
    second = await _client(aiohttp_client, settings)
    assert len(await _messages(second, "q")) == 1
    [dead] = await _wait_for(second, "system$;deadletter", 1)
    assert dead["class"] == "MQMSG_CLASS_NACK_RECEIVE_TIMEOUT"
    assert await _messages(second, "q") == []


async def test_acknowledgements_reach_the_admin_queue(aiohttp_client: Any,
                                                      settings_factory: Callable[..., Settings]
                                                      ) -> None:
    client = await _client(aiohttp_client, settings_factory())
    await client.put("/v1/queues/acks", json={})
    await client.put("/v1/queues/work", json={})
    headers = {"Mq-Admin-Queue": "acks", "Mq-Label": "job",
               "Mq-Acknowledge": str(0x01 | 0x02 | 0x08)}
    first = await (await client.post("/v1/queues/work/messages", data=b"1",
                                     headers=headers)).json()
    second = await (await client.post("/v1/queues/work/messages", data=b"2",
                                      headers=headers)).json()
    await client.post("/v1/queues/work/receive")
    await client.post("/v1/queues/work/purge")
    acks = await _wait_for(client, "acks", 4)
    seen = [(a["class"], a["correlation_id"]) for a in acks]
    assert seen == [("MQMSG_CLASS_ACK_REACH_QUEUE", first["id"]),
                    ("MQMSG_CLASS_ACK_REACH_QUEUE", second["id"]),
                    ("MQMSG_CLASS_ACK_RECEIVE", first["id"]),
                    ("MQMSG_CLASS_NACK_Q_PURGED", second["id"])]
    assert base64.b64decode(acks[1]["body_base64"]) == b""
    assert base64.b64decode(acks[3]["body_base64"]) == b"2", "negative acks carry the body"
    assert all(a["label"] == "job" for a in acks)


async def test_queue_deletion_and_expiry_send_negative_acks(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    client = await _client(aiohttp_client, settings_factory())
    await client.put("/v1/queues/acks", json={})
    await client.put("/v1/queues/doomed", json={})
    headers = {"Mq-Admin-Queue": "acks", "Mq-Acknowledge": "MQMSG_ACKNOWLEDGMENT_NACK_RECEIVE"}
    deleted = await (await client.post("/v1/queues/doomed/messages", data=b"d",
                                       headers=headers)).json()
    await client.delete("/v1/queues/doomed")
    await client.put("/v1/queues/slow", json={})
    expired = await (await client.post("/v1/queues/slow/messages", data=b"e", headers={
        **headers, "Mq-Time-To-Be-Received": "0.3"})).json()
    acks = await _wait_for(client, "acks", 2)
    assert [(a["class"], a["correlation_id"]) for a in acks] == [
        ("MQMSG_CLASS_NACK_Q_DELETED", deleted["id"]),
        ("MQMSG_CLASS_NACK_RECEIVE_TIMEOUT", expired["id"])]


async def test_dead_letters_are_requeued_by_id_and_by_filter(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    from urllib.parse import quote

    client = await _client(aiohttp_client, settings_factory())
    await client.put("/v1/queues/src", json={})
    await client.put("/v1/queues/other", json={})
    sent = [await (await client.post("/v1/queues/src/messages", data=b"%d" % i, headers={
        "Mq-Time-To-Be-Received": "0.2", "Mq-Journal": "deadletter"})).json() for i in range(4)]
    dead = await _wait_for(client, "system$;deadletter", 4)
    response = await client.post(
        f"/v1/queues/system$;deadletter/messages/{quote(dead[0]['id'], safe='')}/requeue",
        json={})
    assert response.status == 200
    assert (await response.json())["queue"] == "src"
    [back] = await _messages(client, "src")
    assert back["id"] == sent[0]["id"] and back["class"] == "MQMSG_CLASS_NORMAL"
    assert "dead_letter_class" not in back["properties"]
    await asyncio.sleep(0.5)
    assert len(await _messages(client, "src")) == 1, "a requeued message has no old deadline"
    response = await client.post("/v1/queues/system$;deadletter/requeue", json={
        "class": "MQMSG_CLASS_NACK_RECEIVE_TIMEOUT", "source_queue": "src", "queue": "other",
        "limit": 2})
    assert (await response.json()) == {"requeued": 2}
    assert len(await _messages(client, "other")) == 2
    assert len(await _messages(client, "system$;deadletter")) == 1
    none = await client.post("/v1/queues/system$;deadletter/requeue",
                             json={"class": "MQMSG_CLASS_NACK_Q_PURGED"})
    assert (await none.json()) == {"requeued": 0}
    refused = await client.post("/v1/queues/src/requeue", json={})
    assert refused.status == 400
    bad = await client.post("/v1/queues/system$;deadletter/requeue", json={"after": "yesterday"})
    assert bad.status == 400


async def test_a_deadline_tracked_twice_expires_its_message_once(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    """A message placed twice in the delivery order (a late commit seen again) has two
    deadline entries: they expire it once, and the batch does not fail on the second."""
    client = await _client(aiohttp_client, settings_factory())
    await client.put("/v1/queues/plain", json={})
    qm = client.server.app[STATE_KEY].serving().queue_manager
    queue = qm.queue("plain")
    sent = await (await client.post("/v1/queues/plain/messages", data=b"p", headers={
        "Mq-Time-To-Be-Received": "1", "Mq-Journal": "deadletter"})).json()
    record = qm.store.record(queue.queue_id, sent["seq"])
    qm.expiry.track(queue, record.seq, record.expires_ms)  # the second entry
    [dead] = await _wait_for(client, "system$;deadletter", 1)
    assert dead["id"] == sent["id"]
    assert await _messages(client, "plain") == []
    for _ in range(100):  # nothing left to retry
        if not len(qm.expiry):
            break
        await asyncio.sleep(0.05)
    assert len(qm.expiry) == 0


async def test_an_admin_queue_named_by_a_format_name_of_this_gateway_gets_its_acks(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    """MSMQ senders name the admin queue by a format name: one that names this gateway (its
    own host names, "." for this machine) is the local queue, for the acknowledgement as for
    the check when it was sent; it was answered 201 and the acknowledgement dropped."""
    settings = settings_factory(server__names=["machine2"])
    client = await _client(aiohttp_client, settings)
    await client.put("/v1/queues/private$/acks", json={})
    await client.put("/v1/queues/work", json={})
    names = ["DIRECT=OS:.\\private$\\acks", "DIRECT=OS:localhost\\private$\\acks",
             "DIRECT=HTTP://machine2/msmq/private$/acks",
             f"DIRECT=HTTP://127.0.0.1:{settings.server.port}/msmq/private$/acks"]
    sent = []
    for name in names:
        answer = await client.post("/v1/queues/work/messages", data=b"x", headers={
            "Mq-Admin-Queue": name,
            "Mq-Acknowledge": "MQMSG_ACKNOWLEDGMENT_FULL_REACH_QUEUE"})
        assert answer.status == 201, (name, await answer.text())
        sent.append((await answer.json())["id"])
    acks = await _wait_for(client, "private$/acks", len(names))
    assert sorted(a["correlation_id"] for a in acks) == sorted(sent)
    assert {a["class"] for a in acks} == {"MQMSG_CLASS_ACK_REACH_QUEUE"}
