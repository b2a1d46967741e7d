"""Two limits that protect others from a flood, each on a controlled clock: bulk requeue of
dead letters goes at most 500 messages a second, and a link whose stream receipts stop
coming resends only the oldest window's worth, and only once the resend wait has passed."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web

import gateway.outbound.link
import gateway.queues.redrive
from gateway.web.appkeys import STATE_KEY
from gateway.queues.batch import send_batch
from gateway.msmq.classes import MessageClass
from gateway.msmq.message import MessageProperties
from gateway.settings import Settings
from gateway.srmp.codec import parse_request
from gateway.srmp.eod_sender import SenderStream
from tests.helpers import ready_client


async def _settled(check: Callable[[], bool], what: str) -> None:
    """Wait until ``check()`` holds; the budget is an upper bound only (a hang)."""
    for _ in range(3000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


async def test_bulk_requeue_moves_at_most_500_a_second(
        aiohttp_client: Any, settings_factory: Callable[..., Settings],
        monkeypatch: pytest.MonkeyPatch) -> None:
    client = await ready_client(aiohttp_client, settings_factory())
    assert (await client.put("/v1/queues/big", json={})).status == 201
    state = client.server.app[STATE_KEY]
    qm = state.serving().queue_manager
    total = 1000
    await send_batch(qm, [("big", b"m%d" % i, MessageProperties(journal="deadletter"))
                          for i in range(total)])
    queue = qm.queue("big")
    await qm.finish(queue, list(qm.store.first_records(queue.queue_id, 0, total)),
                    ack=MessageClass.NACK_RECEIVE_TIMEOUT,
                    dead_letter=MessageClass.NACK_RECEIVE_TIMEOUT)
    # The redrive's clock moves only when it sleeps (moving takes no time on it).
    clock = [1000.0]

    async def sleep(seconds: float) -> None:
        clock[0] += seconds
        await asyncio.sleep(0)

    monkeypatch.setattr(gateway.queues.redrive, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(gateway.queues.redrive, "asyncio", SimpleNamespace(sleep=sleep))
    moves: list[tuple[float, int]] = []  # (clock, messages moved so far)
    move = state.serving().redrive._move

    async def counted(*args: Any) -> Any:
        moved = await move(*args)
        moves.append((clock[0] - 1000.0, (moves[-1][1] if moves else 0) + len(moved)))
        return moved

    monkeypatch.setattr(state.serving().redrive, "_move", counted)
    response = await client.post("/v1/queues/system$;deadletter/requeue",
                                 json={"limit": total})
    assert response.status == 200, await response.text()
    assert (await response.json())["requeued"] == total
    # By any time t, at most 500 t messages (and the first batch, a tenth of a second's).
    assert moves and moves[-1][1] == total
    assert all(done <= 500 * t + 50 for t, done in moves), moves
    assert qm.store.count(queue.queue_id) == total


async def test_a_link_without_receipts_resends_only_a_window_after_the_wait(
        aiohttp_client: Any, settings_factory: Callable[..., Settings],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A receiver that takes every message (200) and never sends a stream receipt.
    received: list[int] = []

    async def take(request: web.Request) -> web.Response:
        message = parse_request(request.headers["Content-Type"], await request.read())
        assert message.envelope.stream is not None
        received.append(message.envelope.stream.current)
        return web.Response()

    receiver = web.Application()
    receiver.router.add_post("/msmq/{tail:.*}", take)
    peer = await aiohttp_client(receiver)
    # The link's clock stands still unless the test moves it.
    clock = [5000.0]
    monkeypatch.setattr(gateway.outbound.link, "time",
                        SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
    decisions: list[tuple[float, int]] = []  # every resend_due the link asked: (now, how many)
    resend_due = SenderStream.resend_due

    def watched(self: SenderStream, now: float, schedule: tuple[float, ...], limit: int
                ) -> int:
        again = resend_due(self, now, schedule, limit)
        decisions.append((now, again))
        return again

    monkeypatch.setattr(SenderStream, "resend_due", watched)
    client = await ready_client(aiohttp_client, settings_factory(
        links__resend=["1h"], links__window=4, links__retry_max="200ms"))
    destination = f"DIRECT=HTTP://127.0.0.1:{peer.port}/msmq/private$/orders"
    for n in range(20):
        response = await client.post("/v1/messages", data=b"m%02d" % n, headers={
            "Mq-Destination": destination, "Mq-Transaction": "single"})
        assert response.status == 201, await response.text()
    links = client.server.app[STATE_KEY].serving().links
    await _settled(lambda: len(links.links) == 1, "the link started")
    [link] = links.links.values()

    def idle() -> bool:
        return (link.stream is not None and not link.stream.to_send()
                and not link._inflight)

    await _settled(lambda: sorted(received) == list(range(1, 21)) and idle(),
                   "all 20 sent once")

    async def step_at(now: float) -> int:
        """Move the clock, wake the link, and return what its next resend decision was."""
        clock[0] = now
        asked = len(decisions)
        link.queue.arrived.set()
        await _settled(lambda: any(at == now for at, _ in decisions[asked:]),
                       f"the link looked for resends at {now}")
        return max(again for at, again in decisions[asked:] if at == now)

    assert await step_at(5000.0 + 3599.0) == 0  # the wait (1 h) has not passed
    assert len(received) == 20
    assert await step_at(5000.0 + 3600.0) == 4
    await _settled(lambda: len(received) >= 24 and idle(), "the resend round sent")
    assert received[20:] == [1, 2, 3, 4]  # the oldest window's worth, not all 20
    assert link.stream is not None and link.stream.round == 1
