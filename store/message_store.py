"""MessageStore: the store's public object.

Blocking calls (``open``, ``close``) belong off the event loop; the async calls are made on the
loop and await the writer thread. The per-queue index lives here, on the loop side, and holds
references only (``StoredRecord``), never bodies: ``read`` copies a body out of the mapped
segment when it is asked for.

Life cycle::

    store = MessageStore.open(root, options)        # lock + recovery (blocking)
    store.start(loop)                               # writer thread
    rec = await store.append(SendSpec(queue_id, b"body"))
    body = store.read(rec)
    await store.remove([rec])
    store.close()                                   # final checkpoint (blocking)
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from pathlib import Path

from store.datadir import DataDir, DataDirLock, lock_data_dir
from store.engine import Engine
from store.errors import StoreClosed, UnknownRecord
from store.fileops import FileOps, RealFileOps
from store.framing import RECORD_HEADER_SIZE
from store.logs import recovery_log
from store.options import StoreOptions
from store.records import Job, PreparedTx, SendSpec, StoredRecord
from store.startup import RecoveryReport, open_engine
from store.writer import GroupCommitter

__all__ = ["MessageStore"]


class MessageStore:
    """A locked data directory with its segments, logs and index."""

    def __init__(self, lock: DataDirLock, engine: Engine, records: list[StoredRecord],
                 prepared: dict[int, PreparedTx], report: RecoveryReport) -> None:
        self._lock: DataDirLock | None = lock
        self._engine = engine
        self._writer: GroupCommitter | None = None
        self.options = engine.options
        self.data_dir: DataDir = lock.data_dir
        self.recovery = report
        self.prepared = prepared
        self._queues: dict[int, dict[int, StoredRecord]] = {}
        for record in records:
            self._queues.setdefault(record.queue_id, {})[record.seq] = record
        # What each prepared transaction receives, as index keys (resolved once here).
        by_ref = {r.ref: (r.queue_id, r.seq) for r in records}
        self._prepared_keys = {tx: [by_ref[ref] for ref in p.removes if ref in by_ref]
                               for tx, p in prepared.items()}

    @classmethod
    def open(cls, root: Path, options: StoreOptions, *, ops: FileOps | None = None
             ) -> MessageStore:
        """Lock ``root`` and recover it. Blocking: call it off the event loop.

        Raises:
            StoreLocked, StoreUnusable: the directory is in use or cannot be used.
            OSError: an I/O error recovery cannot work around.
        """
        lock = lock_data_dir(root)
        try:
            opened = open_engine(ops or RealFileOps(), lock.data_dir, options)
        except BaseException:
            lock.release()
            raise
        report = opened.report
        recovery_log.info(
            "store recovered segments=%d live=%d prepared=%d dead=%d damaged=%d full_scans=%d "
            "log_entries=%d seconds=%.3f", report.segments, report.live_records,
            report.prepared_transactions, report.dead_records, len(report.damaged),
            report.full_scans, report.log_entries, report.seconds)
        return cls(lock, opened.engine, opened.records, opened.prepared, report)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the writer thread; async calls may be made on ``loop`` from now on."""
        assert self._writer is None
        self._writer = GroupCommitter(self._engine, loop, self._on_durable)

    @property
    def closed(self) -> bool:
        return self._lock is None

    @property
    def failed(self) -> str | None:
        """Why the store fail-stopped, or None."""
        return self._engine.failed

    def close(self) -> None:
        """Stop the writer, write a final checkpoint, release the directory. Blocking."""
        if self._lock is None:
            raise StoreClosed("store already closed")
        if self._writer is not None:
            self._writer.stop()
            self._writer = None
        self._engine.close()
        self._lock.release()
        self._lock = None

    # ---- writes --------------------------------------------------------------------------

    async def append(self, send: SendSpec) -> StoredRecord:
        """Store one message (not transactional); returns once it is on disk."""
        job = await self._submit(Job("append", sends=[send]))
        return job.records[0]

    async def commit(self, sends: Sequence[SendSpec],
                     removes: Sequence[StoredRecord] = ()) -> list[StoredRecord]:
        """Store ``sends`` and remove ``removes`` atomically: all become durable, or none."""
        job = await self._submit(Job("commit", sends=sends, removes=[r.ref for r in removes],
                                     removed_keys=_keys(removes)))
        return job.records

    async def prepare(self, sends: Sequence[SendSpec],
                      removes: Sequence[StoredRecord] = ()) -> PreparedTx:
        """Phase one of a two-phase commit: durable, invisible until ``commit_prepared``."""
        job = await self._submit(Job("prepare", sends=sends, removes=[r.ref for r in removes]))
        prepared = PreparedTx(job.tx_id, list(job.records), list(job.removes))
        self.prepared[job.tx_id] = prepared
        self._prepared_keys[job.tx_id] = _keys(removes)
        return prepared

    async def commit_prepared(self, tx_id: int) -> list[StoredRecord]:
        job = await self._submit(Job("commit_prepared", tx_id=tx_id,
                                     removed_keys=self._prepared_keys.get(tx_id, [])))
        self.prepared.pop(tx_id, None)
        self._prepared_keys.pop(tx_id, None)
        return job.records

    async def abort_prepared(self, tx_id: int) -> None:
        await self._submit(Job("abort", tx_id=tx_id))
        self.prepared.pop(tx_id, None)
        self._prepared_keys.pop(tx_id, None)

    async def remove(self, records: Sequence[StoredRecord]) -> None:
        """Remove messages durably (a receive outside a transaction)."""
        await self._submit(Job("remove", removes=[r.ref for r in records],
                               removed_keys=_keys(records)))

    async def _submit(self, job: Job) -> Job:
        if self._writer is None:
            raise StoreClosed("the store is not started")
        return await self._writer.submit(job)

    def _on_durable(self, jobs: list[Job]) -> None:
        """On the loop, after a batch is durable: make its effects visible, in batch order."""
        for job in jobs:
            if job.op in ("append", "commit", "commit_prepared"):
                for record in job.records:
                    self._queues.setdefault(record.queue_id, {})[record.seq] = record
            for queue_id, seq in job.removed_keys:
                self._queues.get(queue_id, {}).pop(seq, None)

    # ---- reads ---------------------------------------------------------------------------

    def read(self, record: StoredRecord) -> bytes:
        """The message body (a copy out of the mapped segment)."""
        state = self._engine.segments.get(record.segment)
        if state is None:
            raise UnknownRecord(f"segment {record.segment} is gone")
        return state.segment.read(record.offset + RECORD_HEADER_SIZE, record.payload_len)

    def records(self, queue_id: int) -> Iterator[StoredRecord]:
        """Live records of a queue in sequence order."""
        return iter(sorted(self._queues.get(queue_id, {}).values(), key=lambda r: r.seq))

    def queue_ids(self) -> list[int]:
        return sorted(q for q, records in self._queues.items() if records)

    def count(self, queue_id: int) -> int:
        return len(self._queues.get(queue_id, {}))


def _keys(records: Sequence[StoredRecord]) -> list[tuple[int, int]]:
    return [(r.queue_id, r.seq) for r in records]
