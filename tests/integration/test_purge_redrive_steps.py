"""Purge, bulk requeue and lookup by a kept id on big queues work in steps: the event loop turns
between them, the queue is never listed whole, and what happens meanwhile (arrivals, receives)
is respected."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from gateway.msmq.classes import MessageClass
from gateway.msmq.message import MessageProperties
from gateway.queues import sending
from gateway.queues.batch import send_batch
from gateway.queues.errors import QueueError
from gateway.queues.manager import QueueManager
from gateway.queues.purge import STEP
from gateway.queues.redrive import SCAN_STEP, Redrive, RedriveFilter
from gateway.queues.seen_ids import SCAN_STEP as ID_SCAN_STEP
from gateway.queues.seen_ids import SeenIds
from gateway.settings import Settings
from gateway.web.appkeys import STATE_KEY
from tests.helpers import ready_client

DEAD = "system$;deadletter"


async def _qm(aiohttp_client: Any, settings: Settings) -> QueueManager:
    client = await ready_client(aiohttp_client, settings)
    assert (await client.put("/v1/queues/big", json={})).status in (200, 201)
    qm: QueueManager = client.server.app[STATE_KEY].serving().queue_manager
    return qm


async def _fill(qm: QueueManager, count: int, properties: MessageProperties) -> None:
    for start in range(0, count, 250):
        await send_batch(qm, [("big", b"m%d" % i, properties)
                              for i in range(start, min(count, start + 250))])


def _lanes(qm: QueueManager) -> list[int]:
    return [seq for lane in qm.queue("big").order for seq in lane]


async def test_purge_goes_in_steps_and_spares_what_arrives_meanwhile(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    qm = await _qm(aiohttp_client, settings_factory())
    total = 2 * STEP + 500
    await _fill(qm, total, MessageProperties())
    asked: list[int] = []
    first_records = qm.store.first_records

    def spy(queue_id: int, after: int, limit: int) -> Any:
        asked.append(limit)
        return first_records(queue_id, after, limit)

    def whole(queue_id: int) -> Any:
        raise AssertionError("the purge listed the whole queue")

    qm.store.first_records = spy  # type: ignore[method-assign]
    qm.store.records = whole  # type: ignore[method-assign]
    purge = asyncio.create_task(qm.purge("big"))
    await asyncio.sleep(0)  # the purge has fixed its end and is committing its first step
    [late] = await send_batch(qm, [("big", b"late", MessageProperties())])
    # A receive meanwhile never gets a message whose removal is being committed.
    taken = await qm.receive("big", max_messages=10, wait_s=0)
    assert all(m.seq > STEP for m in taken), [m.seq for m in taken]
    purged = await purge
    assert purged + len(taken) == total
    assert asked and max(asked) <= STEP and len(asked) >= 3
    assert qm.store.count(qm.queue("big").queue_id) == 1
    assert _lanes(qm) == [late.seq], "the lanes keep only the message that came later"
    peeked = qm.peek("big")
    assert peeked is not None and peeked.body == b"late"


async def test_purge_spares_a_send_in_flight_when_it_starts(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    """A send numbered before the purge starts and stored while it runs arrives meanwhile:
    it stays, though its sequence is below those the purge removes in its later steps."""
    qm = await _qm(aiohttp_client, settings_factory())
    queue = qm.queue("big")
    await _fill(qm, STEP + 10, MessageProperties())
    seq = sending.reserve(qm.store, queue)  # in flight from now
    await _fill(qm, STEP, MessageProperties())
    purge = asyncio.create_task(qm.purge("big"))
    await asyncio.sleep(0)  # the purge has fixed its end and is committing its first step
    await sending.commit(qm.store, [sending.message(queue, MessageProperties(), b"in flight",
                                                    seq=seq)], arrived=qm.arrived)
    assert await purge == 2 * STEP + 10
    assert qm.store.count(queue.queue_id) == 1
    peeked = qm.peek("big")
    assert peeked is not None and (peeked.seq, peeked.body) == (seq, b"in flight")


async def test_purge_leaves_a_message_being_received_in_its_place(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    qm = await _qm(aiohttp_client, settings_factory())
    await _fill(qm, 30, MessageProperties())
    queue = qm.queue("big")
    [held] = await qm.wait_and_take(queue, 1, 0)
    assert await qm.purge("big") == 29
    qm.release(queue, held, removed=False)
    assert _lanes(qm) == [held.seq]
    [again] = await qm.receive("big", max_messages=5, wait_s=0)
    assert again.seq == held.seq


async def _turns_during(work: Awaitable[Any]) -> tuple[Any, int]:
    """``work``'s result and how many times the event loop turned while it ran."""
    turns = 0
    stop = False

    async def ticker() -> None:
        nonlocal turns
        while not stop:
            turns += 1
            await asyncio.sleep(0)

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    try:
        result = await work
    finally:
        stop = True
        await ticking
    return result, turns - 1


async def test_lookup_by_a_forgotten_sender_id_reads_the_queue_in_steps(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    qm = await _qm(aiohttp_client, settings_factory())
    qm.seen_ids = SeenIds(limit=1)
    total = 2 * ID_SCAN_STEP + 100
    ids = ["{0b5f6c1e-2a7d-4c39-9a51-7e0c2d4b8f13}\\%d" % n for n in range(total)]
    for start in range(0, total, 250):
        await send_batch(qm, [("big", b"m%d" % n, MessageProperties(message_id=ids[n]))
                              for n in range(start, min(total, start + 250))])
    found, turns = await _turns_during(qm.get("big", ids[-2]))
    assert found.body == b"m%d" % (total - 2) and found.message_id == ids[-2]
    assert turns >= 2, "the loop turned while the queue was read"
    assert (await qm.get("big", ids[-2])).seq == found.seq  # remembered now
    with pytest.raises(QueueError) as missing:
        await qm.get("big", "{0b5f6c1e-2a7d-4c39-9a51-7e0c2d4b8f13}\\99999")
    assert missing.value.status_hint == 404


async def test_bulk_requeue_decodes_in_steps_with_the_loop_turning(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    qm = await _qm(aiohttp_client, settings_factory())
    total = 2 * SCAN_STEP + 200
    await _fill(qm, total, MessageProperties(journal="deadletter"))
    queue = qm.queue("big")
    records = list(qm.store.first_records(queue.queue_id, 0, total))
    # Only the newest 100 become dead letters of the class the requeue looks for.
    split = total - 100
    await qm.finish(queue, records[:split], ack=MessageClass.NACK_RECEIVE_TIMEOUT,
                    dead_letter=MessageClass.NACK_RECEIVE_TIMEOUT)
    await qm.finish(queue, records[split:], ack=MessageClass.NACK_Q_PURGED,
                    dead_letter=MessageClass.NACK_Q_PURGED)
    redrive = Redrive(qm, rate_per_s=1000)
    chosen, during = await _turns_during(redrive._choose(qm.queue(DEAD), RedriveFilter(
        message_class=MessageClass.NACK_Q_PURGED.msmq_name, limit=60)))
    assert during >= 2, "the loop turned while dead letters were decoded"
    assert len(chosen) == 60
    bodies = [qm.decode(qm.queue(DEAD), r).body for r in chosen]
    assert bodies == [b"m%d" % i for i in range(split, split + 60)]
    moved = await redrive.bulk(DEAD, RedriveFilter(
        message_class=MessageClass.NACK_Q_PURGED.msmq_name, limit=60), "big")
    assert moved == 60
    assert qm.store.count(queue.queue_id) == 60
