"""Exactly-once in-order SRMP streams end to end: out of order and duplicated posts end up
once and in order, a stream receipt reaches the sender's sendReceiptsTo, and the position
survives a restart (MQInSeqs checkpoint + position records)."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from dataclasses import replace
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway.web.appkeys import STATE_KEY
from gateway.queues.internal import STREAMS_QUEUE
from gateway.srmp.eod import SNAPSHOT_PART_STREAMS
from gateway.settings import Settings
from gateway.srmp.codec import parse_request
from gateway.srmp.model import Kind
from gateway.srmp.receipts import ORDER_ACK_ACTION
from tests.helpers import ready_client
from tests.srmp_client import STREAM_ID, post, stream_message

ORDERS = "http://gw/msmq/private$/orders"
OTHER_STREAM = STREAM_ID.rsplit("\\", 1)[0] + "\\77"


@pytest.fixture
async def receipts(aiohttp_server: Any) -> Any:
    """A stand-in for the sender's order queue: records what is posted to it."""
    got: list[tuple[str, bytes, str]] = []

    async def take(request: web.Request) -> web.Response:
        got.append((request.path, await request.read(), request.headers["Content-Type"]))
        return web.Response(status=200)

    app = web.Application()
    app.router.add_post("/{tail:.*}", take)
    server = await aiohttp_server(app)
    server.got = got
    return server


@pytest.fixture
def settings_factory(settings_factory: Callable[..., Settings], receipts: Any
                     ) -> Callable[..., Settings]:
    """Every gateway here may post receipts to the stand-in sender (an allowed address)."""
    def make(**overrides: object) -> Settings:
        overrides.setdefault("outbound__allow", [str(receipts.make_url("/"))])
        return settings_factory(**overrides)
    return make


async def _gateway(aiohttp_client: Any, settings_factory: Callable[..., Settings],
                   checkpoint_interval: str = "100ms") -> Any:
    client = await ready_client(aiohttp_client, settings_factory(
        server__names=["gw"], srmp__stream_checkpoint_interval=checkpoint_interval,
        srmp__reorder_wait="200ms"))
    await client.put("/v1/queues/private$/orders", json={"transactional": True})
    return client


async def _bodies(client: Any) -> list[bytes]:
    found = await (await client.get("/v1/queues/private$/orders/messages")).json()
    return [base64.b64decode(m["body_base64"]) for m in found["messages"]]


async def _last_ordinal(server: Any, want: int = 3, timeout: float = 10.0) -> int:
    deadline = asyncio.get_running_loop().time() + timeout
    best = 0
    while asyncio.get_running_loop().time() < deadline:
        for path, raw, ctype in server.got:
            message = parse_request(ctype, raw)
            assert path == "/msmq/private$/order_queue$" and ctype == "text/xml"
            assert message.envelope.kind == Kind.STREAM_RECEIPT
            assert message.envelope.path.action == ORDER_ACK_ACTION
            assert message.envelope.path.rev_via == ORDERS
            receipt = message.envelope.stream_receipt
            assert receipt is not None and receipt.stream_id in (STREAM_ID, OTHER_STREAM)
            if receipt.stream_id == STREAM_ID:
                best = max(best, receipt.last_ordinal)
        if best >= want:
            return best
        await asyncio.sleep(0.05)
    return best


async def test_out_of_order_and_duplicates_end_up_once_in_order(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], receipts: Any) -> None:
    client = await _gateway(aiohttp_client, settings_factory)
    to = str(receipts.make_url("/msmq/private$/order_queue$"))
    for n in (2, 1, 1, 3, 2, 3, 2):
        response = await post(client, stream_message(ORDERS, b"m%d" % n, n, receipts_to=to))
        assert response.status == 200 and await response.read() == b""
    assert await _bodies(client) == [b"m1", b"m2", b"m3"]
    assert await _last_ordinal(receipts) == 3
    metrics = await (await client.get("/metrics")).text()
    assert 'entrepot_srmp_messages_total{kind="user",outcome="stored"} 3.0' in metrics
    assert 'entrepot_srmp_messages_total{kind="user",outcome="duplicate"} 2.0' in metrics
    assert 'entrepot_srmp_messages_total{kind="user",outcome="out_of_order"} 2.0' in metrics
    assert 'entrepot_srmp_receipts_sent_total{kind="stream_receipt",result="sent"}' in metrics


async def test_gap_bridged_by_previous(aiohttp_client: Any,
                                       settings_factory: Callable[..., Settings],
                                       receipts: Any) -> None:
    client = await _gateway(aiohttp_client, settings_factory)
    to = str(receipts.make_url("/msmq/private$/order_queue$"))
    await post(client, stream_message(ORDERS, b"m1", 1, receipts_to=to))
    await post(client, stream_message(ORDERS, b"m3", 3, receipts_to=to))  # no <previous>
    await post(client, stream_message(ORDERS, b"m3", 3, receipts_to=to, previous=1))
    assert await _bodies(client) == [b"m1", b"m3"]
    assert await _last_ordinal(receipts) == 3


async def test_position_survives_a_restart(aiohttp_client: Any,
                                           settings_factory: Callable[..., Settings],
                                           receipts: Any, tmp_path: Path) -> None:
    to = str(receipts.make_url("/msmq/private$/order_queue$"))
    client = await _gateway(aiohttp_client, settings_factory)
    for n in (1, 2):
        await post(client, stream_message(ORDERS, b"m%d" % n, n, receipts_to=to))
    streams = client.server.app[STATE_KEY].serving().streams
    await streams.checkpoint()  # MQInSeqs now holds position 2
    await post(client, stream_message(ORDERS, b"m3", 3, receipts_to=to))  # a position record
    await client.close()
    storage = tmp_path / "data" / "storage"
    assert (storage / "MQInSeqs.lg1").stat().st_size or (storage / "MQInSeqs.lg2").stat().st_size

    again = await ready_client(aiohttp_client, settings_factory(server__names=["gw"]))
    for n in (2, 3):  # retransmissions after the restart
        assert (await post(again, stream_message(ORDERS, b"dup", n, receipts_to=to))).status \
            == 200
    await post(again, stream_message(ORDERS, b"m4", 4, receipts_to=to))
    assert await _bodies(again) == [b"m1", b"m2", b"m3", b"m4"]


async def test_positions_are_held_by_the_messages_and_written_before_one_leaves(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], receipts: Any) -> None:
    """A stored stream message holds its stream's position: no position record is written
    with it. Receiving it writes the position first (one record, whatever the batch), and the
    stream checkpoint removes the records it covers."""
    to = str(receipts.make_url("/msmq/private$/order_queue$"))
    client = await _gateway(aiohttp_client, settings_factory, checkpoint_interval="1h")
    state = client.server.app[STATE_KEY]
    store = state.serving().queue_manager.store
    positions = state.serving().queue_manager.internal(STREAMS_QUEUE).queue_id
    for n in (1, 2, 3):
        assert (await post(client, stream_message(ORDERS, b"m%d" % n, n,
                                                  receipts_to=to))).status == 200
    assert store.count(positions) == 0
    assert len(state.serving().streams.held) == 3
    response = await client.post("/v1/queues/private$/orders/receive?max=2")
    assert [base64.b64decode(m["body_base64"]) for m in (await response.json())["messages"]] \
        == [b"m1", b"m2"]
    assert store.count(positions) == 1, "the position (3) is written before m1 and m2 go"
    assert len(state.serving().streams.held) == 0
    await client.post("/v1/queues/private$/orders/receive?max=1")
    assert store.count(positions) == 1, "already written: nothing more to write"
    assert (await post(client, stream_message(ORDERS, b"dup", 3, receipts_to=to))).status \
        == 200
    await post(client, stream_message(ORDERS, b"m4", 4, receipts_to=to))
    await state.serving().streams.checkpoint()
    assert store.count(positions) == 0
    assert len(state.serving().streams.held) == 0
    assert await _bodies(client) == [b"m4"]


async def test_a_large_table_is_checkpointed_a_piece_per_loop_iteration(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    """Other work runs while the stream checkpoint builds its document (it held the loop
    56-62 ms at 100,000 streams), and the document read back has every stream."""
    client = await _gateway(aiohttp_client, settings_factory, checkpoint_interval="1h")
    streams = client.server.app[STATE_KEY].serving().streams
    count = 3 * SNAPSHOT_PART_STREAMS + 1
    streams.table.restore(None, [json.dumps(
        {"id": f"uid:big\\{n}", "queue": "private$/orders", "seq": n, "ack": n, "to": "",
         "via": ORDERS}).encode() for n in range(1, count + 1)], now=time.monotonic())
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    store = streams.store
    save = store.save_stream_state
    ticks_at_save: list[int] = []

    async def saving(payload: bytes) -> None:
        ticks_at_save.append(ticks)
        await save(payload)

    store.save_stream_state = saving
    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    before = ticks
    await streams.checkpoint()
    ticker.cancel()
    assert ticks_at_save[0] - before >= 4, "the loop turned between the pieces"
    await client.close()
    again = await ready_client(aiohttp_client, settings_factory(server__names=["gw"]))
    table = again.server.app[STATE_KEY].serving().streams.table
    assert len(table) == count
    found = table.get((f"uid:big\\{count}", "private$/orders"))
    assert found is not None and found.incoming_seq == count


async def test_a_start_finds_positions_held_only_by_queued_messages(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], receipts: Any) -> None:
    """A stop without the stream checkpoint (as a crash leaves it): the positions of the
    messages stored after the last checkpoint come back from the messages themselves, with
    their receipt URL, and retransmissions are duplicates; after a receive they come back
    from the position record written before it."""
    to = str(receipts.make_url("/msmq/private$/order_queue$"))
    client = await _gateway(aiohttp_client, settings_factory, checkpoint_interval="1h")
    state = client.server.app[STATE_KEY]
    await post(client, stream_message(ORDERS, b"m1", 1, receipts_to=to))
    await state.serving().streams.checkpoint()  # MQInSeqs holds 1; m2 and m3 hold 3
    other = stream_message(ORDERS, b"x1", 1, receipts_to=to, stream_id=OTHER_STREAM)
    assert (await post(client, other)).status == 200
    for n in (2, 3):
        await post(client, stream_message(ORDERS, b"m%d" % n, n, receipts_to=to))

    async def no_checkpoint() -> None:
        return None

    state.serving().streams.checkpoint = no_checkpoint  # type: ignore[method-assign]
    await client.close()

    again = await ready_client(aiohttp_client, settings_factory(server__names=["gw"]))
    streams = again.server.app[STATE_KEY].serving().streams
    assert len(streams.held) == 3, "x1, m2 and m3 hold their positions"
    assert streams.table.get((STREAM_ID, "private$/orders")).incoming_seq == 3
    assert streams.table.get((OTHER_STREAM, "private$/orders")).incoming_seq == 1
    for n in (1, 2, 3):  # retransmissions after the start
        assert (await post(again, stream_message(ORDERS, b"dup", n, receipts_to=to))).status \
            == 200
    assert await _bodies(again) == [b"m1", b"x1", b"m2", b"m3"]
    assert await _last_ordinal(receipts, want=3) == 3, "receipts go to the stored URL"
    response = await again.post("/v1/queues/private$/orders/receive?max=4")
    assert len((await response.json())["messages"]) == 4
    again.server.app[STATE_KEY].serving().streams.checkpoint = no_checkpoint  # type: ignore[method-assign]
    await again.close()

    third = await ready_client(aiohttp_client, settings_factory(server__names=["gw"]))
    streams = third.server.app[STATE_KEY].serving().streams
    assert streams.table.get((STREAM_ID, "private$/orders")).incoming_seq == 3
    assert (await post(third, stream_message(ORDERS, b"dup", 3, receipts_to=to))).status == 200
    await post(third, stream_message(ORDERS, b"m4", 4, receipts_to=to))
    assert await _bodies(third) == [b"m4"]


async def test_final_stream_receipt_when_a_dead_letter_message_leaves(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], receipts: Any) -> None:
    """docs/srmp.md, "Final stream receipts": <DeadLetter/> asks for a final stream receipt
    (streamReceipt + commitmentReceipt) when the message leaves the queue: positive when
    read."""
    client = await _gateway(aiohttp_client, settings_factory)
    to = str(receipts.make_url("/msmq/private$/order_queue$"))
    request = stream_message(ORDERS, b"m1", 1, receipts_to=to)
    request = replace(request, body=request.body.replace(
        b"<Priority>0</Priority>", b"<Priority>0</Priority><DeadLetter/>"))
    assert (await post(client, request)).status == 200
    assert await _last_ordinal(receipts, want=1) == 1
    response = await client.post("/v1/queues/private$/orders/receive")
    assert response.status == 200 and len((await response.json())["messages"]) == 1
    deadline = asyncio.get_running_loop().time() + 10
    finals: list[Any] = []
    while not finals and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.05)
        parsed = [parse_request(ctype, raw) for _, raw, ctype in receipts.got]
        finals = [m for m in parsed if m.envelope.kind == Kind.FINAL_STREAM_RECEIPT]
    [final] = finals
    env = final.envelope
    assert env.stream_receipt is not None and env.stream_receipt.last_ordinal == 1
    assert env.commitment_receipt is not None
    assert env.commitment_receipt.decision == "positive"
    assert env.commitment_receipt.id.startswith("uuid:1001@")
    # Its Correlation is the original's OBJECTID, as on every receipt (docs/srmp.md, "Message
    # types and receipts").
    from gateway.srmp.model import objectid_to_base64
    ordinal, guid = env.commitment_receipt.id[len("uuid:"):].split("@")
    assert env.msmq is not None
    assert env.msmq.correlation == objectid_to_base64(guid, int(ordinal))


async def test_concurrent_out_of_order_arrivals_are_put_in_order(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], receipts: Any) -> None:
    """A sender with a window of messages in flight: they overtake each other on the way;
    the receiver waits for the ones before and stores them in order, many per commit."""
    import random

    client = await ready_client(aiohttp_client, settings_factory(
        server__names=["gw"], srmp__reorder_wait="5s"))
    await client.put("/v1/queues/private$/orders", json={"transactional": True})
    to = str(receipts.make_url("/msmq/private$/order_queue$"))
    numbers = list(range(1, 81))
    random.Random(7).shuffle(numbers)
    responses = await asyncio.gather(*(
        post(client, stream_message(ORDERS, b"m%02d" % n, n, receipts_to=to))
        for n in numbers))
    assert {r.status for r in responses} == {200}
    assert await _bodies(client) == [b"m%02d" % n for n in range(1, 81)]
    assert await _last_ordinal(receipts, want=80) == 80


async def test_a_position_written_before_a_removal_counts_for_what_it_says(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], receipts: Any) -> None:
    """The table moves on while a position record is on its way to disk: what counts as
    written is the position the record holds, not the table's newer one."""
    to = str(receipts.make_url("/msmq/private$/order_queue$"))
    client = await _gateway(aiohttp_client, settings_factory, checkpoint_interval="1h")
    state = client.server.app[STATE_KEY]
    store, streams = state.serving().queue_manager.store, state.serving().streams
    orders = state.serving().queue_manager.queue("private$/orders").queue_id
    await post(client, stream_message(ORDERS, b"m1", 1, receipts_to=to))
    [first] = list(store.records(orders))
    real_commit, gate = store.commit, asyncio.Event()

    async def held_back(*args: Any, **kwargs: Any) -> Any:
        made = await real_commit(*args, **kwargs)
        await gate.wait()
        return made

    store.commit = held_back  # type: ignore[method-assign]
    writing = asyncio.create_task(streams.before_removal([first]))
    await asyncio.sleep(0.05)  # position 1 is on disk, its commit not yet back
    store.commit = real_commit  # type: ignore[method-assign]
    await post(client, stream_message(ORDERS, b"m2", 2, receipts_to=to))
    gate.set()
    await writing
    [_, second] = list(store.records(orders))
    assert streams.held.to_write([second]) == {(STREAM_ID, "private$/orders")}


async def test_a_batch_over_the_quota_sends_back_what_gathered_on_it(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], receipts: Any) -> None:
    """A message committed by its own request (nothing else of its stream on the way) fails
    the queue quota (two of its size do not fit: each is stored as ~7.4 KB) while the next
    ones wait on top of it: it is quota-dropped, they are out of order, the stream stays
    where it was, and once there is room the resends go in in order."""
    to = str(receipts.make_url("/msmq/private$/order_queue$"))
    client = await _gateway(aiohttp_client, settings_factory)
    await client.put("/v1/queues/private$/orders", json={"transactional": True, "quota": 13_000})
    store = client.server.app[STATE_KEY].serving().queue_manager.store
    assert (await post(client, stream_message(ORDERS, b"1" * 5000, 1, receipts_to=to))
            ).headers["Mq-Stream-Verdict"] == "stored"
    real_append, gate = store.append, asyncio.Event()

    async def held_back(*args: Any, **kwargs: Any) -> Any:
        await gate.wait()
        return await real_append(*args, **kwargs)

    store.append = held_back  # type: ignore[method-assign]
    second = asyncio.create_task(post(client, stream_message(ORDERS, b"2" * 5000, 2,
                                                             receipts_to=to)))
    await asyncio.sleep(0.05)  # 2 is committing
    later = [asyncio.create_task(post(client, stream_message(ORDERS, b"%d" % n, n,
                                                             receipts_to=to)))
             for n in (3, 4)]
    await asyncio.sleep(0.05)  # 3 and 4 are decided and wait for 2's commit
    store.append = real_append  # type: ignore[method-assign]
    gate.set()
    assert (await second).headers["Mq-Stream-Verdict"] == "quota_dropped"
    assert [(await t).headers["Mq-Stream-Verdict"] for t in later] == ["out_of_order"] * 2
    assert await _bodies(client) == [b"1" * 5000]
    assert (await client.post("/v1/queues/private$/orders/purge")).status == 200  # room
    for n, body in ((2, b"2" * 5000), (3, b"3"), (4, b"4")):
        assert (await post(client, stream_message(ORDERS, body, n, receipts_to=to))
                ).headers["Mq-Stream-Verdict"] == "stored"
    assert await _bodies(client) == [b"2" * 5000, b"3", b"4"]


async def test_a_checkpoint_refused_for_a_full_disk_is_tried_again(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], receipts: Any) -> None:
    """The checkpoint task outlives a refused checkpoint (DiskFull): the next interval saves
    the positions."""
    from gateway.web.appkeys import STATE_KEY
    from store.errors import DiskFull

    client = await _gateway(aiohttp_client, settings_factory)
    streams = client.server.app[STATE_KEY].serving().streams
    store = streams.store
    real = store.save_stream_state
    refused: list[bytes] = []
    saved = asyncio.Event()

    async def full_once(payload: bytes) -> None:
        if not refused:
            refused.append(payload)
            raise DiskFull("no space left on device (test)")
        await real(payload)
        saved.set()

    store.save_stream_state = full_once
    to = str(receipts.make_url("/msmq/private$/order_queue$"))
    assert (await post(client, stream_message(ORDERS, b"m1", 1, receipts_to=to))).status == 200
    await asyncio.wait_for(saved.wait(), 60)
    assert refused and await _bodies(client) == [b"m1"]
