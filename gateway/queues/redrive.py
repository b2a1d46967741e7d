"""Dead-letter requeue ("redrive"): move dead letters back to their queue or a chosen one.

As in MSMQ (docs/architecture.md §Queue semantics), only the queue manager puts messages into
the dead-letter queues; applications read, delete — and here requeue — them. A requeued
message is a new message in the target queue (new sequence) that keeps the original id and
properties, loses its dead-letter class, and leaves the dead-letter queue in the same atomic
store commit. Bulk requeue is rate-limited so a redrive never floods a consumer or the disk.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace

from gateway.msmq.classes import MessageClass
from gateway.queues import sending
from gateway.queues.errors import BadRequest
from gateway.queues.manager import Queue, QueueManager, ReceivedMessage
from gateway.queues.pages import pages
from store.records import StoredRecord

__all__ = ["Redrive", "RedriveFilter", "SCAN_STEP"]

_DEAD_EXTRAS = ("dead_letter_class", "source_queue", "dead_lettered_at_ms")
SCAN_STEP = 500  # dead letters decoded per turn of the event loop while choosing


@dataclass(frozen=True, slots=True)
class RedriveFilter:
    """Which dead letters a bulk requeue takes (every field optional)."""

    message_class: str | None = None  # e.g. MQMSG_CLASS_NACK_RECEIVE_TIMEOUT
    source_queue: str | None = None
    after_ms: int = 0
    before_ms: int = 0
    limit: int = 1000

    def matches(self, message: ReceivedMessage) -> bool:
        extra = message.properties.extra
        if self.message_class and extra.get("dead_letter_class") != self.message_class:
            return False
        if self.source_queue and extra.get("source_queue", "").lower() != \
                self.source_queue.replace("\\", "/").lower():
            return False
        at = int(extra.get("dead_lettered_at_ms", "0") or 0)
        if self.after_ms and at < self.after_ms:
            return False
        return not (self.before_ms and at >= self.before_ms)


class Redrive:
    """Requeue from the dead-letter queues at most ``rate_per_s`` messages a second."""

    def __init__(self, qm: QueueManager, *, rate_per_s: float = 500.0) -> None:
        self.qm = qm
        self.rate_per_s = rate_per_s

    def _dead_letter_queue(self, name: str) -> Queue:
        queue = self.qm.queue(name)
        if not queue.is_dead_letter:
            raise BadRequest(f"{queue.path.display!r} is not a dead-letter queue: only "
                             "dead letters are requeued", type_slug="not-a-dead-letter-queue")
        return queue

    def _target(self, message: ReceivedMessage, chosen: str | None) -> Queue:
        name = chosen or message.properties.extra.get("source_queue")
        if not name:
            raise BadRequest(f"message {message.message_id} names no source queue; "
                             "choose one", type_slug="requeue-target-needed")
        return self.qm.check_send(name, transactional=self.qm.queue(name).settings.transactional)

    async def one(self, dead_queue: str, message_id: str, target: str | None) -> ReceivedMessage:
        queue = self._dead_letter_queue(dead_queue)
        record = await self.qm.find(queue, message_id)
        return (await self._move(queue, [record], target))[0]

    async def bulk(self, dead_queue: str, flt: RedriveFilter, target: str | None) -> int:
        queue = self._dead_letter_queue(dead_queue)
        chosen = await self._choose(queue, flt)
        moved = 0
        batch = max(1, int(self.rate_per_s // 10))
        for start in range(0, len(chosen), batch):
            began = time.monotonic()
            # Chosen over several turns of the loop: one may have been removed or taken since.
            records = [r for r in chosen[start: start + batch] if r.seq not in queue.reserved
                       and self.qm.store.record(queue.queue_id, r.seq) is not None]
            if records:
                moved += len(await self._move(queue, records, target))
            # Rate limit: one batch per tenth of a second at most.
            await asyncio.sleep(max(0.0, 0.1 - (time.monotonic() - began)))
        return moved

    async def _choose(self, queue: Queue, flt: RedriveFilter) -> list[StoredRecord]:
        """Up to ``flt.limit`` matching dead letters, oldest first, decoded ``SCAN_STEP`` at
        a time with a turn of the event loop between steps: a filter that matches few of a
        million dead letters decodes them all, which must not stall the loop."""
        chosen: list[StoredRecord] = []
        async for records in pages(self.qm.store, queue.queue_id, SCAN_STEP):
            for record in records:
                if record.seq not in queue.reserved and flt.matches(
                        self.qm.decode(queue, record)):
                    chosen.append(record)
                    if len(chosen) >= flt.limit:
                        return chosen
        return chosen

    async def _move(self, queue: Queue, records: list[StoredRecord], target: str | None
                    ) -> list[ReceivedMessage]:
        for record in records:
            self.qm.check_removable(queue, record.seq)
        queue.reserved.update(r.seq for r in records)
        try:
            specs: list[sending.Send] = []
            moved = []
            for record in records:
                message = self.qm.decode(queue, record)
                destination = self._target(message, target)
                extra = {k: v for k, v in message.properties.extra.items()
                         if k not in _DEAD_EXTRAS}
                # A requeued message starts afresh: no class, no expired deadline.
                props = replace(message.properties, message_class=int(MessageClass.NORMAL),
                                extra=extra, message_id=message.message_id, receive_by_ms=0,
                                transactional=destination.settings.transactional)
                # Durable wherever it came from: it was kept as a dead letter.
                specs.append(sending.message(destination, props, message.body, express=False))
                moved.append(replace(message, queue=destination.path.display,
                                     properties=props))
            await sending.commit(self.qm.store, specs, removes=records, arrived=self.qm.arrived)
            return moved
        finally:
            queue.reserved.difference_update(r.seq for r in records)
