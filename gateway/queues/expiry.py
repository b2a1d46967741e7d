"""Time-to-be-received expiry: a heap of deadlines and one task, never a scan of the queues.

The heap is filled at start from the records (their deadline is stored with them, so timers
survive restarts) and on each arrival. At a deadline the message is removed — to the
dead-letter queue when its journal level is ``deadletter``, with class NACK_RECEIVE_TIMEOUT,
and with a negative acknowledgement when its level asks (``QueueManager.finish``) — and
counted and logged with its id. A message whose deadline had passed when it arrived (a
sender's clock ahead, or old dates) was stored like any other (expiry is not checked on
receipt, [MC-MQSRM] §3.1.5.1.4) and leaves the same way at once (docs/srmp.md, "Messages
already expired when they arrive").

A message received before its deadline leaves its entry behind (found gone when it falls
due), so when the heap has grown to twice what it held after its last clean-up it is
compacted, a piece per loop iteration (``_compact``).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import time
from collections.abc import KeysView

from gateway.logs import server_log
from gateway.msmq.classes import JournalLevel, MessageClass
from gateway.queues.errors import QueueError
from gateway.queues.model import Queue, QueueHost, ReceivedMessage
from store.records import StoredRecord

__all__ = ["Expiry"]

_WAIT_S_MAX = 60.0
_RETRY_BUSY_MS = 1000
_RETRY_FAILED_MS = 5000
_COMPACT_MIN = 65_536  # deadlines held before the first compaction
_COMPACT_PIECE = 50_000  # deadlines checked per loop iteration while compacting
_LOGGED_PER_BATCH = 100  # expired messages logged one by one per batch; the rest summed up


class Expiry:
    """The deadlines of one queue manager."""

    def __init__(self, qm: QueueHost) -> None:
        self._qm = qm
        self._deadlines: list[tuple[int, int, int]] = []  # (deadline ms, queue, sequence)
        self._changed = asyncio.Event()
        self.compact_at = _COMPACT_MIN
        # Messages expired since start, by outcome (dead_lettered, discarded): a metric.
        self.expired: dict[str, int] = {}

    def __len__(self) -> int:
        """Deadlines held, those of messages already gone included."""
        return len(self._deadlines)

    def track(self, queue: Queue, seq: int, expires_ms: int) -> None:
        if expires_ms and not queue.is_dead_letter and not queue.path.journal:
            entry = (expires_ms, queue.queue_id, seq)
            earliest = not self._deadlines or entry < self._deadlines[0]
            heapq.heappush(self._deadlines, entry)
            if earliest or len(self._deadlines) > self.compact_at:
                self._changed.set()

    def _due(self, now_ms: int) -> dict[int, list[StoredRecord]]:
        due: dict[int, list[StoredRecord]] = {}
        taken: set[tuple[int, int]] = set()
        store = self._qm.store
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            _, queue_id, seq = heapq.heappop(self._deadlines)
            queue = self._qm.queue_by_id_or_none(queue_id)
            record = store.record(queue_id, seq)
            if queue is None or record is None or (queue_id, seq) in taken:
                continue  # received, deleted or purged meanwhile; or a second entry
            if seq in queue.reserved:  # a receive holds it: look again shortly
                heapq.heappush(self._deadlines, (now_ms + _RETRY_BUSY_MS, queue_id, seq))
                continue
            taken.add((queue_id, seq))
            due.setdefault(queue_id, []).append(record)
        return due

    async def run(self) -> None:
        """Expire what is due, then sleep until the next deadline (runs until cancelled)."""
        while True:
            if len(self._deadlines) > self.compact_at:
                await self._compact()
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

    async def _compact(self) -> None:
        """Drop the entries of messages already gone (a busy queue with a one-hour
        time-to-be-received held an hour of its traffic here). Deadlines arriving meanwhile go
        to a fresh heap; one of the old ones falling due meanwhile waits for the end (a few
        ms a piece)."""
        old, self._deadlines = self._deadlines, []
        live: dict[int, KeysView[int]] = {}
        store = self._qm.store
        kept = []
        for start in range(0, len(old), _COMPACT_PIECE):
            for entry in itertools.islice(old, start, start + _COMPACT_PIECE):
                seqs = live.get(entry[1])
                if seqs is None:
                    seqs = live[entry[1]] = store.seqs(entry[1])
                if entry[2] in seqs:
                    kept.append(entry)
            await asyncio.sleep(0)
        kept += self._deadlines
        heapq.heapify(kept)
        self._deadlines = kept
        self.compact_at = max(2 * len(kept), _COMPACT_MIN)
        server_log.debug("expiry deadlines compacted: %d -> %d", len(old), len(kept))

    def _account(self, queue: Queue, gone: list[ReceivedMessage]) -> None:
        """Every expired message is counted and logged with its id: one that leaves no
        dead-letter copy (it did not ask for one) at WARNING, so none vanishes unseen."""
        self._qm.events.count(queue.path.display, "expired", len(gone))
        for n, message in enumerate(gone):
            kept = message.properties.journal == JournalLevel.DEADLETTER.value
            outcome = "dead_lettered" if kept else "discarded"
            self.expired[outcome] = self.expired.get(outcome, 0) + 1
            if n < _LOGGED_PER_BATCH:
                server_log.log(logging.INFO if kept else logging.WARNING,
                               "message %s expired in %s (time-to-be-received passed): %s",
                               message.message_id, queue.path.display,
                               "dead-lettered as MQMSG_CLASS_NACK_RECEIVE_TIMEOUT" if kept
                               else "discarded (no dead-letter copy asked for)")
        if len(gone) > _LOGGED_PER_BATCH:
            server_log.warning("%d more messages expired in %s", len(gone) - _LOGGED_PER_BATCH,
                               queue.path.display)

    async def _expire(self, queue_id: int, records: list[StoredRecord], now_ms: int) -> None:
        queue = self._qm.queue_by_id(queue_id)
        if queue.pin is not None:  # a log for its range consumers: retention removes them
            records = [r for r in records if r.seq < queue.pin]
            if not records:
                return
        queue.reserved.update(r.seq for r in records)
        try:
            gone = await self._qm.finish(queue, records, ack=MessageClass.NACK_RECEIVE_TIMEOUT,
                                         dead_letter=MessageClass.NACK_RECEIVE_TIMEOUT)
            self._account(queue, gone)
        except QueueError as exc:  # store full or stopped: try again later
            server_log.error("expiry of %d messages in %s failed: %s", len(records),
                             queue.path.display, exc.detail)
            for record in records:
                heapq.heappush(self._deadlines, (now_ms + _RETRY_FAILED_MS, queue_id,
                                                 record.seq))
        finally:
            queue.reserved.difference_update(r.seq for r in records)
