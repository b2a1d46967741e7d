"""Incoming exactly-once streams: the EOD receiver table (gateway.srmp.eod) made durable, and
its stream receipts sent.

Durability: a stream message carries its stream id and ordinal and is stored flagged
``STREAM``, so the message itself holds its stream's new position (``gateway.inbound.held``):
a crash can never keep a message and lose its position, which would let a retransmission in
twice. Every few seconds the whole table is checkpointed to ``MQInSeqs.lg1``/``.lg2``
(ping-pong) with an LSN mark; before a message still holding a position is removed, that
position is written as a small record in an internal queue (removed again, once stale, by the
next checkpoint). At start the checkpoint, the position records and the queued stream
messages stored since the mark are merged, and the highest position of each stream wins.

Messages of one stream are decided and stored one at a time (a lock per stream key), which is
what keeps them in order; different streams do not wait for each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

from gateway.inbound.held import HeldPositions
from gateway.logs import server_log
from gateway.metrics import Metrics
from gateway.msmq.message import MessageFormatError, decode_payload
from gateway.outbound.receipt_sender import ReceiptSender
from gateway.queues import sending
from gateway.queues.errors import QueueError
from gateway.queues.internal import STREAMS_QUEUE
from gateway.queues.manager import QueueManager
from gateway.queues.state_records import StateQueue
from gateway.queues.wire_ids import WireIds
from gateway.srmp.eod import SNAPSHOT_PART_STREAMS, InStream, StreamKey, StreamTable, Verdict
from gateway.srmp.model import Stream
from gateway.srmp.receipts import stream_receipt
from store.errors import StoreError
from store.framing import RecordFlags
from store.records import StoredRecord

__all__ = ["IncomingStreams", "STALE_MAX"]

STALE_MAX = 10_000  # superseded position records waiting; more bring the checkpoint forward


def _stream_key(raw: bytes) -> tuple[tuple[str, str], bytes]:
    """A position record's stream key, every field the table reads checked.

    Raises:
        ValueError, KeyError, TypeError: not a position this module wrote.
    """
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise TypeError("a stream position is a JSON object")
    for name in ("id", "queue", "to", "via"):
        if not isinstance(doc[name], str):
            raise TypeError(f"stream position field {name!r} is not a string")
    for name in ("seq", "ack"):
        int(doc[name])
    return (doc["id"], doc["queue"]), raw


STREAMS_STATE = StateQueue(STREAMS_QUEUE, _stream_key)


class IncomingStreams:
    def __init__(self, qm: QueueManager, sender: ReceiptSender, ids: WireIds,
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
        # When the receipt sender wakes by itself next (None: it is not asleep on a time).
        self._sleeping_until: float | None = None
        self._dirty = False
        self._stale: list[StoredRecord] = []
        self._checkpoint_due = asyncio.Event()
        self.held = HeldPositions()
        self._streams_shown = -1
        self._restore()
        self.store.removal_hooks.append(self.before_removal)

    def _restore(self) -> None:
        """Checkpoint + position records + stream messages stored since the checkpoint's
        mark; several records for one key (a crash between a checkpoint and its clean-up)
        keep the newest, the others are removed later."""
        positions: list[bytes] = []
        for record, (key, raw) in self.qm.quarantine.read(STREAMS_STATE, self.queue.queue_id):
            older = self._records.get(key)
            if older is not None:
                self._stale.append(older)
            self._records[key] = record
            positions.append(raw)
        snapshot = self.store.stream_state
        now = time.monotonic()
        self.table.restore(snapshot, positions, now=now)
        self.held.checkpointed(self._positions())  # what is on disk outside the messages
        mark = int(json.loads(snapshot).get("lsn_mark", 0)) if snapshot else 0
        held = []
        for record in self.store.flagged_since(RecordFlags.STREAM, mark):
            state = self._held_by(record)
            if state is not None:
                self.held.hold(record, (state.stream_id, state.queue), state.incoming_seq)
                held.append(StreamTable.position(state))
        self.table.restore(None, held, now=now)
        self.metrics.srmp_streams.set(len(self.table))
        if len(self.table):
            server_log.info("incoming streams restored: %d (%d held by their messages)",
                            len(self.table), len(self.held))

    def _held_by(self, record: StoredRecord) -> InStream | None:
        """The stream position a queued STREAM message holds."""
        queue = self.qm.queue_by_id_or_none(record.queue_id)
        if queue is None:
            return None
        try:
            extra = decode_payload(self.store.read(record)).properties.extra
            return InStream(extra["stream_id"], queue.path.canonical,
                            int(extra["stream_current"]), extra.get("stream_receipts_to", ""),
                            extra.get("stream_via", ""))
        except (MessageFormatError, StoreError, KeyError, ValueError) as exc:
            server_log.warning("stream message %d:%d unreadable at start: %s",
                               record.queue_id, record.seq, exc)
            return None

    def _positions(self) -> dict[StreamKey, int]:
        return {(state.stream_id, state.queue): state.incoming_seq
                for state in self.table.states()}

    def hold(self, key: StreamKey) -> _Hold:
        """Serialise the messages of one stream: ``async with streams.hold(key):``."""
        return _Hold(self._locks, key)

    def decide(self, key: StreamKey, stream: Stream) -> Verdict:
        return self.table.decide(key, stream)

    def rejected(self, key: StreamKey) -> None:
        self._receipt_at(self.table.rejected(key, now=time.monotonic()))

    def _receipt_at(self, due_at: float | None) -> None:
        """Wake the receipt sender only when a receipt falls due before the time it sleeps
        until (a wake-up a message was a task and a walk of the table each)."""
        if due_at is not None and (self._sleeping_until is None
                                   or due_at < self._sleeping_until):
            self._wake.set()

    def accepted(self, key: StreamKey, stored: list[tuple[Stream, StoredRecord]],
                 queue_url: str) -> None:
        """After the commit of a batch of stream messages: the table moves, the messages
        hold the position, and a receipt is scheduled."""
        now = time.monotonic()
        due_at = None
        for stream, record in stored:
            due_at = self.table.accepted(key, stream, queue_url=queue_url,
                                         now=now).receipt_due_at
            self.held.hold(record, key, stream.current)
        self._dirty = True
        self._receipt_at(due_at)
        if len(self.table) != self._streams_shown:  # the gauge's lock, only on a change
            self._streams_shown = len(self.table)
            self.metrics.srmp_streams.set(self._streams_shown)

    async def before_removal(self, records: list[StoredRecord]) -> None:
        """A store removal hook: the positions these messages still hold are written first.

        Raises:
            StoreError: they could not be written (the removal is then not made).
        """
        keys = self.held.to_write(records)
        if keys:
            await self._write_positions(keys)
        self.held.released(records)

    async def _write_positions(self, keys: set[StreamKey]) -> None:
        # Taken now, before the commit: the table may move on while it is on its way, and
        # only what the records say may count as written.
        written = [(key, state.incoming_seq, StreamTable.position(state)) for key in keys
                   if (state := self.table.get(key)) is not None]
        if not written:
            return
        made = await self.store.commit([sending.state(self.queue.queue_id, doc)
                                        for _, _, doc in written])
        for (key, seq, _), record in zip(written, made):
            self.held.written(key, seq)
            superseded = self._records.get(key)
            if superseded is not None:
                self._stale.append(superseded)
                if len(self._stale) >= STALE_MAX:
                    self._checkpoint_due.set()
            self._records[key] = record

    # ---- background work -----------------------------------------------------------------

    async def run_receipts(self) -> None:
        """Send each stream receipt when it falls due (coalesced by the table)."""
        while True:
            self._wake.clear()
            due_at = self._sleeping_until = self.table.next_due()
            timeout = None if due_at is None else max(0.0, due_at - time.monotonic())
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            self._sleeping_until = None
            now = time.time()
            for due in self.table.due(time.monotonic()):
                try:
                    ordinal = await self.ids.next()
                except QueueError as exc:  # cumulative: the sender's resend brings another
                    server_log.warning("stream receipt to %s not sent: %s", due.send_to,
                                       exc.detail)
                    continue
                envelope = stream_receipt(stream_id=due.stream_id, last_ordinal=due.last_ordinal,
                                          send_to=due.send_to, queue_url=due.queue_url,
                                          qm_guid=self.qm.qm_guid, ordinal=ordinal,
                                          now_s=int(now))
                self.sender.submit(due.send_to, envelope, "stream-receipt")

    async def run_checkpoints(self) -> None:
        """Every ``checkpoint_interval_s``, or sooner when ``STALE_MAX`` records wait."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._checkpoint_due.wait(), self.checkpoint_interval_s)
            self._checkpoint_due.clear()
            if self._dirty or self._stale:
                try:
                    await self.checkpoint()
                except StoreError as exc:
                    # A full disk (or a stopped store): the position records stay where they
                    # are, so nothing is lost; the next interval tries again.
                    self._dirty = True
                    server_log.warning("incoming streams not checkpointed: %s", exc)

    async def checkpoint(self) -> None:
        """Save the table to MQInSeqs, then drop the position records it covers; a large
        table is built and cleaned up a piece per loop iteration (``snapshot_parts``)."""
        self._dirty = False
        covered = dict(self._records)
        mark = self.held.mark(self.store.lsn_floor())
        parts = []
        positions: dict[StreamKey, int] = {}  # exactly what the saved document says
        for part, states in self.table.snapshot_parts(lsn_mark=mark):
            parts.append(part)
            for state in states:
                positions[(state.stream_id, state.queue)] = state.incoming_seq
            await asyncio.sleep(0)
        await self.store.save_stream_state(b"".join(parts))
        self.held.checkpointed(positions)
        for _ in self.held.forget_covered(SNAPSHOT_PART_STREAMS):
            await asyncio.sleep(0)
        gone, self._stale = self._stale, []
        for count, (key, record) in enumerate(covered.items(), 1):
            async with self.hold(key):
                if self._records.get(key) is record:
                    del self._records[key]
                    gone.append(record)
            if count % SNAPSHOT_PART_STREAMS == 0:
                await asyncio.sleep(0)
        for start in range(0, len(gone), 1000):
            await self.store.remove(gone[start:start + 1000])


class _Hold:
    """The per-stream lock, shared while anyone waits for it (a class, not an
    asynccontextmanager: it is taken for every stream message, and a generator-based context
    manager costs the event loop more on that path)."""

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
