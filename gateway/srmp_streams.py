"""Incoming exactly-once streams: the EOD receiver table (gateway.srmp.eod) made durable, and
its stream receipts sent.

Durability: a stream's position is a small record in an internal queue, written in the same
atomic store commit as the message that moves it, so a crash can never keep a message and lose
its position, which would let a retransmission in twice. The record it supersedes is not
removed in that commit (a commit that only sends is a grouped commit, without a QMLog entry:
SRMP stream sends +2-12% in three A/B runs) but later, with the others that are stale: every
few seconds the whole table is checkpointed to ``MQInSeqs.lg1``/``.lg2`` (ping-pong) and the
position records it covers are removed. At start the checkpoint is loaded and the highest
position of each stream wins, whichever records are left.

Messages of one stream are decided and stored one at a time (a lock per stream key), which is
what keeps them in order; different streams do not wait for each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from gateway.internal_queues import STREAMS_QUEUE
from gateway.logs import server_log
from gateway.metrics import Metrics
from gateway.queue_manager import QueueManager
from gateway.receipt_sender import MessageIds, ReceiptSender
from gateway.srmp.eod import StreamKey, StreamTable, Verdict
from gateway.srmp.model import Stream
from gateway.srmp.receipts import stream_receipt
from store.records import SendSpec, StoredRecord

__all__ = ["IncomingStreams", "STALE_MAX"]

STALE_MAX = 10_000  # superseded position records waiting; more bring the checkpoint forward


class IncomingStreams:
    def __init__(self, qm: QueueManager, sender: ReceiptSender, ids: MessageIds,
                 metrics: Metrics, *,
                 streams_max: int, checkpoint_interval_s: float) -> None:
        self.qm = qm
        self.store = qm.store
        self.sender = sender
        self.metrics = metrics
        self.checkpoint_interval_s = checkpoint_interval_s
        self.queue = qm.internal(STREAMS_QUEUE)
        self.table = StreamTable(streams_max=streams_max)
        self.ids = ids
        self._records: dict[StreamKey, StoredRecord] = {}
        self._locks: dict[StreamKey, tuple[asyncio.Lock, int]] = {}
        self._wake = asyncio.Event()
        self._dirty = False
        self._stale: list[StoredRecord] = []
        self._checkpoint_due = asyncio.Event()
        self._restore()

    def _restore(self) -> None:
        """Checkpoint + position records; several records for one key (a crash between a
        checkpoint and its clean-up) keep the newest, the others are removed later."""
        positions: list[bytes] = []
        for record in self.store.records(self.queue.queue_id):
            raw = self.store.read(record)
            doc = json.loads(raw)
            key = (str(doc["id"]), str(doc["queue"]))
            older = self._records.get(key)
            if older is not None:
                self._stale.append(older)
            self._records[key] = record
            positions.append(raw)
        self.table.restore(self.store.stream_state, positions, now=time.monotonic())
        self.metrics.srmp_streams.set(len(self.table))
        if len(self.table):
            server_log.info("incoming streams restored: %d", len(self.table))

    def hold(self, key: StreamKey) -> _Hold:
        """Serialise the messages of one stream: ``async with streams.hold(key):``."""
        return _Hold(self._locks, key)

    def decide(self, key: StreamKey, stream: Stream) -> Verdict:
        return self.table.decide(key, stream)

    def rejected(self, key: StreamKey) -> None:
        self.table.rejected(key, now=time.monotonic())
        self._wake.set()

    def position(self, key: StreamKey, stream: Stream, queue_url: str, receipts_to: str
                 ) -> SendSpec:
        """The position record to commit with the message."""
        return SendSpec(self.queue.queue_id, self.table.position_after(
            key, stream, queue_url=queue_url, receipts_to=receipts_to))

    def accepted(self, key: StreamKey, stream: Stream, queue_url: str,
                 record: StoredRecord) -> None:
        """After the commit: the table moves and a receipt is scheduled."""
        self.table.accepted(key, stream, queue_url=queue_url, now=time.monotonic())
        superseded = self._records.get(key)
        if superseded is not None:
            self._stale.append(superseded)
            if len(self._stale) >= STALE_MAX:
                self._checkpoint_due.set()
        self._records[key] = record
        self._dirty = True
        self._wake.set()
        self.metrics.srmp_streams.set(len(self.table))

    # ---- background work -----------------------------------------------------------------

    async def run_receipts(self) -> None:
        """Send each stream receipt when it falls due (coalesced by the table)."""
        while True:
            self._wake.clear()
            due_at = self.table.next_due()
            timeout = None if due_at is None else max(0.0, due_at - time.monotonic())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)
            now = time.time()
            for due in self.table.due(time.monotonic()):
                envelope = stream_receipt(stream_id=due.stream_id, last_ordinal=due.last_ordinal,
                                          send_to=due.send_to, queue_url=due.queue_url,
                                          qm_guid=self.qm.qm_guid, ordinal=self.ids.next(),
                                          now_s=int(now))
                self.sender.submit(due.send_to, envelope, "stream-receipt")

    async def run_checkpoints(self) -> None:
        """Every ``checkpoint_interval_s``, or sooner when ``STALE_MAX`` records wait."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._checkpoint_due.wait(), self.checkpoint_interval_s)
            self._checkpoint_due.clear()
            if self._dirty or self._stale:
                await self.checkpoint()

    async def checkpoint(self) -> None:
        """Save the table to MQInSeqs, then drop the position records it covers."""
        self._dirty = False
        covered = dict(self._records)
        await self.store.save_stream_state(self.table.snapshot())
        gone, self._stale = self._stale, []
        for key, record in covered.items():
            async with self.hold(key):
                if self._records.get(key) is record:
                    del self._records[key]
                    gone.append(record)
        for start in range(0, len(gone), 1000):
            await self.store.remove(gone[start:start + 1000])


class _Hold:
    """The per-stream lock, shared while anyone waits for it (a class, not an
    asynccontextmanager: its generator machinery was ~2% of the loop under stream load)."""

    __slots__ = ("_locks", "_key", "_lock")

    def __init__(self, locks: dict[StreamKey, tuple[asyncio.Lock, int]], key: StreamKey) -> None:
        self._locks = locks
        self._key = key

    async def __aenter__(self) -> None:
        lock, users = self._locks.get(self._key, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[self._key] = (lock, users + 1)
        self._lock = lock
        try:
            await lock.acquire()
        except BaseException:
            self._leave()
            raise

    async def __aexit__(self, *exc_info: object) -> None:
        self._lock.release()
        self._leave()

    def _leave(self) -> None:
        lock, users = self._locks[self._key]
        if users == 1:
            del self._locks[self._key]
        else:
            self._locks[self._key] = (lock, users - 1)
