"""Time-to-be-received expiry: a heap of deadlines and one task, never a scan of the queues.

The heap is filled at start from the records (their deadline is stored with them, so timers
survive restarts) and on each arrival. At a deadline the message is removed — to the
dead-letter queue when its journal level is ``deadletter``, with class NACK_RECEIVE_TIMEOUT,
and with a negative acknowledgement when its level asks (``QueueManager.finish``).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
from typing import TYPE_CHECKING

from gateway.errors import ProblemError
from gateway.logs import server_log
from gateway.msmq.classes import MessageClass
from store.records import StoredRecord

if TYPE_CHECKING:
    from gateway.queue_manager import Queue, QueueManager

__all__ = ["Expiry"]

_WAIT_S_MAX = 60.0
_RETRY_BUSY_MS = 1000
_RETRY_FAILED_MS = 5000


class Expiry:
    """The deadlines of one queue manager."""

    def __init__(self, qm: QueueManager) -> None:
        self._qm = qm
        self._deadlines: list[tuple[int, int, int]] = []  # (deadline ms, queue, sequence)
        self._changed = asyncio.Event()

    def track(self, queue: Queue, record: StoredRecord) -> None:
        if record.expires_ms and not queue.is_dead_letter and not queue.path.journal:
            entry = (record.expires_ms, queue.queue_id, record.seq)
            earliest = not self._deadlines or entry < self._deadlines[0]
            heapq.heappush(self._deadlines, entry)
            if earliest:
                self._changed.set()

    def _due(self, now_ms: int) -> dict[int, list[StoredRecord]]:
        due: dict[int, list[StoredRecord]] = {}
        store = self._qm.store
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            _, queue_id, seq = heapq.heappop(self._deadlines)
            queue = self._qm.queue_by_id_or_none(queue_id)
            record = store.record(queue_id, seq)
            if queue is None or record is None:
                continue  # received, deleted or purged meanwhile
            if seq in queue.reserved:  # a receive holds it: look again shortly
                heapq.heappush(self._deadlines, (now_ms + _RETRY_BUSY_MS, queue_id, seq))
                continue
            due.setdefault(queue_id, []).append(record)
        return due

    async def run(self) -> None:
        """Expire what is due, then sleep until the next deadline (runs until cancelled)."""
        while True:
            now_ms = int(time.time() * 1000)
            for queue_id, records in self._due(now_ms).items():
                await self._expire(queue_id, records, now_ms)
            self._changed.clear()
            wait_s = _WAIT_S_MAX
            if self._deadlines:
                wait_s = min(wait_s, max(0.0, (self._deadlines[0][0] - now_ms) / 1000))
            # Wake at the next deadline, or earlier when an earlier one arrives.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), wait_s)

    async def _expire(self, queue_id: int, records: list[StoredRecord], now_ms: int) -> None:
        queue = self._qm.queue_by_id(queue_id)
        if queue.pin is not None:  # a log for its range consumers: retention removes them
            records = [r for r in records if r.seq < queue.pin]
            if not records:
                return
        queue.reserved.update(r.seq for r in records)
        try:
            await self._qm.finish(queue, records, ack=MessageClass.NACK_RECEIVE_TIMEOUT,
                                  dead_letter=MessageClass.NACK_RECEIVE_TIMEOUT)
        except ProblemError as exc:  # store full or stopped: try again later
            server_log.error("expiry of %d messages in %s failed: %s", len(records),
                             queue.path.display, exc.detail)
            for record in records:
                heapq.heappush(self._deadlines, (now_ms + _RETRY_FAILED_MS, queue_id,
                                                 record.seq))
        finally:
            queue.reserved.difference_update(r.seq for r in records)
