"""MessageStore: the store's public object.

Blocking calls (``open``, ``close``) belong off the event loop; the async calls are made on the
loop and await the writer thread. The per-queue index (``store.index``) lives here, on the loop
side, and holds references only (one packed int per message, handed out as ``StoredRecord``),
never bodies: ``read`` copies a body out of the mapped segment when it is asked for.

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
import functools
import itertools
import operator
import threading
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TypeVar

from store.admission import Admission
from store.audit import AuditingFileOps, Auditor
from store.backup import BackupReport, Progress, copy_storage
from store.datadir import DataDir, DataDirLock, lock_data_dir
from store.engine import Engine
from store.errors import StoreClosed, StoreError, UnknownRecord
from store.fileops import FileOps, RealFileOps
from store.framing import RECORD_HEADER_SIZE, RecordFlags, RecordHeader, max_payload, record_size
from store.index import QueueIndex, packed_flags, packed_size
from store.index_reads import IndexReads
from store.logs import commit_log
from store.lqs import QueueInfo, QueueRegistry
from store.numbering import Numbering
from store.options import StoreOptions
from store.pingpong import PingPong
from store.placing import NATIVE
from store.quota import Charge, QuotaBook, charges_by_queue
from store.records import Job, PreparedTx, SendSpec, StoredRecord
from store.startup import (
    RecoveryReport,
    collector_paused,
    load_stream_state,
    log_recovery,
    open_engine,
)
from store.stats import Histogram
from store.writer import GroupCommitter

__all__ = ["MessageStore"]

T = TypeVar("T")
_QUEUE_ID = operator.attrgetter("queue_id")
_new = tuple.__new__
_VISIBLE_OPS = frozenset(("append", "commit", "commit_prepared", "express"))
_KEYED = RecordFlags.KEYED.value
_HELD = _KEYED | RecordFlags.STREAM.value  # records whose removal is announced first
_EXPRESS = RecordFlags.EXPRESS.value  # tested as a plain int: enum arithmetic is ~9x slower


@functools.lru_cache(maxsize=64)
def _with_express(flags: RecordFlags) -> RecordFlags:
    """``flags | EXPRESS``, cached: the enum's ``|`` is slow, on every express send."""
    return flags | RecordFlags.EXPRESS


class MessageStore(IndexReads):
    """A locked data directory with its segments, logs and index."""

    def __init__(self, lock: DataDirLock, engine: Engine, live: list[RecordHeader],
                 prepared: dict[int, PreparedTx], report: RecoveryReport,
                 registry: QueueRegistry) -> None:
        self._lock: DataDirLock | None = lock
        self._engine = engine
        self._writer: GroupCommitter | None = None
        self.options = engine.options
        self.data_dir: DataDir = lock.data_dir
        self.recovery = report
        self.prepared = prepared
        self.registry = registry
        self.quotas = QuotaBook(machine_quota=engine.options.machine_quota,
                                machine_journal_quota=engine.options.machine_journal_quota)
        self.quotas.names = lambda queue_id: (
            repr(info.path) if (info := registry.get(queue_id)) is not None else str(queue_id))
        for info in registry.all():
            self.quotas.set_limit(info.queue_id, info.quota)
        self.quotas.charge(charges_by_queue(live))
        self.quotas.charge(charges_by_queue([r for p in prepared.values() for r in p.records]))
        self._admission = Admission(max_payload(engine.options.segment_size))
        self._numbering = Numbering(engine.next_seq, engine.next_tx)
        engine.seq_floor = self._numbering.snapshot
        self._inflight = self._numbering.in_flight
        for tx in prepared.values():
            for record in tx.records:
                self._inflight.add(record.queue_id, record.seq)
        # Express messages in RAM: key -> body; StoredRecord.segment == 0 marks them.
        self._ram: dict[int, bytes] = {}
        self._ram_bytes = 0
        self._ram_keys = itertools.count(1)
        self.auditor: Auditor | None = None
        self._audit_stop = threading.Event()
        self._audit_thread: threading.Thread | None = None
        self._streams: PingPong | None = None
        self._streams_lock = asyncio.Lock()
        # Each awaited, in order, with the KEYED and STREAM records a removal is about to
        # take, before it is submitted: a caller makes what they stand for durable elsewhere
        # first (the gateway's duplicate window keeps a message's id, and its stream table a
        # stream's position, in the message alone while it is queued). A hook that raises
        # refuses the removal.
        self.removal_hooks: list[Callable[[list[StoredRecord]], Awaitable[None]]] = []
        # The highest LSN of a record made visible so far: any job submitted from now on
        # gets higher ones (batches take LSNs in order), see ``lsn_floor``.
        self._lsn_high = engine.next_lsn - 1
        # The last saved state of incoming ordered streams (MQInSeqs.lg1/lg2), or None.
        self.stream_state: bytes | None = None
        self._index = QueueIndex()
        self._index.add_many(live)
        # What each prepared transaction receives, as index keys (resolved once here).
        self._prepared_keys: dict[int, list[tuple[int, int]]] = {}
        if prepared:
            by_ref = {r.ref: (r.queue_id, r.seq) for r in live}
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
        with collector_paused():
            return cls._open(root, options, ops)

    @classmethod
    def _open(cls, root: Path, options: StoreOptions, ops: FileOps | None) -> MessageStore:
        lock = lock_data_dir(root)
        ops = AuditingFileOps(ops or RealFileOps())
        auditor = Auditor(lock.data_dir, ops)
        try:
            auditor.check_at_start()
            opened = open_engine(ops, lock.data_dir, options)
            registry = QueueRegistry(ops, lock.data_dir.lqs)
            holding = set(map(_QUEUE_ID, opened.live)) | {
                r.queue_id for tx in opened.prepared.values() for r in tx.records}
            registry.load(ids_in_use=set(opened.engine.next_seq), ids_with_messages=holding)
            streams, stream_state, _ = load_stream_state(ops, lock.data_dir, opened.engine)
        except BaseException:
            lock.release()
            raise
        log_recovery(opened.report, registry.problems)
        store = cls(lock, opened.engine, opened.live, opened.prepared, opened.report, registry)
        auditor.baseline()
        auditor.save_state(clean=False)
        store.auditor = auditor
        store._streams = streams
        store.stream_state = stream_state
        return store

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Start the writer thread; async calls may be made on ``loop`` from now on."""
        assert self._writer is None
        if self.options.segments_ahead:
            self._engine.start_preparing()
        self._writer = GroupCommitter(self._engine, loop, self._on_durable)
        commit_log.info("store writer started; placing loop: %s", "C extension" if NATIVE
                        else "Python (store._placing not built: no C compiler at install)")
        assert self.auditor is not None
        self._audit_thread = threading.Thread(target=self.auditor.run_every, name="store-audit",
                                              args=(self.options.audit_interval_s,
                                                    self._audit_stop),
                                              daemon=True)
        self._audit_thread.start()

    @property
    def closed(self) -> bool:
        return self._lock is None

    @property
    def failed(self) -> str | None:
        """Why the store fail-stopped, or None."""
        return self._engine.failed

    @property
    def short_of_space(self) -> str | None:
        """Why every new message is refused (the disk is full and the store's space reserve
        had to be used), or None. Reads and removals go on either way."""
        return self._engine.short

    @property
    def space_reserve_whole(self) -> bool:
        """False: no room for the space reserve; the next checkpoint refuses new data."""
        return self._engine.reserve is None or self._engine.reserve.whole

    def close(self) -> None:
        """Stop the writer, write a final checkpoint, release the directory. Blocking."""
        if self._lock is None:
            raise StoreClosed("store already closed")
        if self._writer is not None:
            self._writer.stop()
            self._writer = None
        self._audit_stop.set()
        if self._audit_thread is not None:
            self._audit_thread.join()
        self._engine.close()
        if self.auditor is not None:
            self.auditor.run_pass()
            self.auditor.save_state(clean=self._engine.failed is None)
        self._lock.release()
        self._lock = None

    # ---- writes --------------------------------------------------------------------------

    async def append(self, send: SendSpec) -> StoredRecord:
        """Store one message (not transactional); returns once it is on disk — or, for an
        express message, once it is held (in RAM up to ``express_memory``, else in an ``r``
        segment that is never synced).

        Raises:
            QuotaExceeded: (a subclass naming which quota) before anything is written.
            MessageTooLarge, DiskFull, StoreFailed, StoreClosed.
        """
        if send.express:
            return await self._append_express(send)
        writer = self._writer
        if writer is None:
            self._numbering.forget((send,))
            raise StoreClosed("the store is not started")
        send, charge = self._admit(send, express=False)
        try:
            done = await writer.submit(Job("append", sends=(send,)), len(send.payload))
        except BaseException:
            self.quotas.release((charge,))
            self._inflight.discard(send.queue_id, send.seq)
            raise
        return done.records[0]

    async def append_many(self, sends: Sequence[SendSpec]
                          ) -> list[StoredRecord | StoreError]:
        """``append`` for several durable (not express) messages at once, each on its own:
        one refused (size, quota) or failed leaves the others stored. For each send, in
        order: its record, or the error ``append`` would raise for it.

        Raises:
            StoreClosed, StoreFailed: the store takes no writes; none was stored.
        """
        writer = self._writer
        if writer is None:
            self._numbering.forget(sends)
            raise StoreClosed("the store is not started")
        results: list[StoredRecord | StoreError | None] = [None] * len(sends)
        admitted: list[tuple[int, Job, Charge]] = []
        try:
            for index, send in enumerate(sends):
                assert not send.express, "append_many takes durable messages only"
                try:
                    admitted_send, charge = self._admit(send, express=False)
                except StoreError as exc:  # nothing charged, nothing numbered
                    results[index] = exc
                    continue
                admitted.append((index, Job("append", sends=(admitted_send,)), charge))
            await writer.submit_many([job for _, job, _ in admitted],
                                     [len(job.sends[0].payload) for _, job, _ in admitted])
        except BaseException:
            self.quotas.release([charge for _, _, charge in admitted])
            for _, job, _ in admitted:
                self._inflight.discard(job.sends[0].queue_id, job.sends[0].seq)
            raise
        for index, job, charge in admitted:
            if job.error is None:
                results[index] = job.records[0]
            else:  # as append's refusal: the charge and the number given back
                self.quotas.release((charge,))
                self._inflight.discard(job.sends[0].queue_id, job.sends[0].seq)
                results[index] = job.error
        done = [result for result in results if result is not None]
        assert len(done) == len(sends)
        return done

    async def _append_express(self, send: SendSpec) -> StoredRecord:
        if self._writer is None:
            self._numbering.forget((send,))
            raise StoreClosed("the store is not started")
        if len(send.payload) + self._ram_bytes > self.options.express_memory:
            job = await self._submit_sends(Job("express", sends=[send]))
            return job.records[0]
        send, charge = self._admit(send, express=True)
        self._inflight.discard(send.queue_id, send.seq)
        key = next(self._ram_keys)
        self._ram[key] = send.payload
        self._ram_bytes += len(send.payload)
        record = StoredRecord(send.queue_id, send.seq, 0, key, charge.size, len(send.payload),
                              0, send.priority, send.expires_ms,
                              _with_express(send.flags), 0)
        self._index.add(record)
        return record

    def _admit(self, send: SendSpec, *, express: bool) -> tuple[SendSpec, Charge]:
        """One message checked (``Admission``, quotas), charged and numbered:
        ``_submit_sends``'s steps for a single send in one pass, without the lists (the
        common case, on the event loop). A reserved number is released on refusal. Raises:
        as ``Admission.check``, QuotaExceeded: nothing charged, nothing numbered."""
        queue_id, payload, seq = send.queue_id, send.payload, send.seq
        try:
            self._admission.check(send)
            journal = send.journal
            if not journal:
                info = self.registry.get(queue_id)
                journal = info is not None and info.journal_class
            # Both tuples by tuple.__new__: a NamedTuple's own __new__ is a Python function.
            charge = _new(Charge, (queue_id, record_size(len(payload)), journal))
            self.quotas.take(charge)
        except BaseException:
            if seq:
                self._inflight.discard(queue_id, seq)
            raise
        if not seq:
            seq = self._numbering.take(queue_id)
        return _new(SendSpec, (queue_id, payload, send.priority, send.expires_ms, send.flags,
                               journal, express, seq)), charge

    async def commit(self, sends: Sequence[SendSpec], removes: Sequence[StoredRecord] = (),
                     *, tx_id: int = 0) -> list[StoredRecord]:
        """Store ``sends`` and remove ``removes`` atomically: all become durable, or none."""
        if removes:
            await self._before_removing(removes)
        # Express messages held in memory are no part of the durable commit: they leave
        # memory once it is durable (they were never promised to survive a crash).
        in_ram = [r for r in removes if not r.segment]
        on_disk = [r for r in removes if r.segment] if in_ram else removes
        # Ids come from one counter, here: when the engine numbered the commits that came
        # without one, they met ids reserved for explicit transactions (two commits, one id).
        job = await self._submit_sends(Job("commit", sends=sends,
                                           removes=[r.ref for r in on_disk],
                                           removed_keys=_keys(on_disk),
                                           tx_id=tx_id or self.reserve_tx_id()))
        self._drop_in_ram(in_ram)
        return job.records

    async def prepare(self, sends: Sequence[SendSpec], removes: Sequence[StoredRecord] = (),
                      *, tx_id: int = 0) -> PreparedTx:
        """Phase one of a two-phase commit: durable, invisible until ``commit_prepared``."""
        if removes:
            await self._before_removing(removes)
        job = await self._submit_sends(Job("prepare", sends=sends,
                                           removes=[r.ref for r in removes],
                                           tx_id=tx_id or self.reserve_tx_id()))
        prepared = PreparedTx(job.tx_id, list(job.records), list(job.removes))
        self.prepared[job.tx_id] = prepared
        self._prepared_keys[job.tx_id] = _keys(removes)
        return prepared

    async def commit_prepared(self, tx_id: int) -> list[StoredRecord]:
        job = await self._submit(Job("commit_prepared", tx_id=tx_id,
                                     removed_keys=self._prepared_keys.get(tx_id, [])))
        self._resolve(job.records)
        self.prepared.pop(tx_id, None)
        self._prepared_keys.pop(tx_id, None)
        return job.records

    async def abort_prepared(self, tx_id: int) -> None:
        # The engine takes the transaction out of ``prepared`` (the same dict) when the
        # abort is durable, and leaves its records on the job.
        job = await self._submit(Job("abort", tx_id=tx_id))
        self.quotas.release(_charge(r) for r in job.records)
        self._resolve(job.records)
        self.prepared.pop(tx_id, None)
        self._prepared_keys.pop(tx_id, None)

    async def remove(self, records: Sequence[StoredRecord]) -> None:
        """Remove messages durably (a receive outside a transaction)."""
        await self._before_removing(records)
        in_ram: list[StoredRecord] = []
        spilled: list[StoredRecord] = []
        durable: list[StoredRecord] = []
        for record in records:  # one pass, flags as plain ints (enum & is ~9x slower)
            (durable if record.segment and not int(record.flags) & _EXPRESS
             else spilled if record.segment else in_ram).append(record)
        self._drop_in_ram(in_ram)
        if spilled:
            await self._submit(Job("remove_express", removes=[r.ref for r in spilled],
                                   removed_keys=_keys(spilled)))
        if durable:
            await self._submit(Job("remove", removes=[r.ref for r in durable],
                                   removed_keys=_keys(durable)))

    def _drop_in_ram(self, records: Sequence[StoredRecord]) -> None:
        for record in records:
            if self._ram.pop(record.offset, None) is None:
                raise UnknownRecord(f"express message {record.queue_id}:{record.seq} is gone")
            self._ram_bytes -= record.payload_len
            self._index.pop_packed(record.queue_id, record.seq)
            self.quotas.release([_charge(record)])

    async def _before_removing(self, records: Sequence[StoredRecord]) -> None:
        if self.removal_hooks:
            held = [r for r in records if int(r.flags) & _HELD]
            if held:
                for hook in self.removal_hooks:
                    await hook(held)

    async def _submit_sends(self, job: Job) -> Job:
        """Check sizes and quotas, charge them, number the messages, then submit the job.
        Whatever fails, the job's sequence numbers (reserved ones included) are resolved."""
        writer = self._writer
        try:
            if writer is None:
                raise StoreClosed("the store is not started")
            sends = self._prepare_sends(job.sends,
                                        transactional=job.op not in ("append", "express"))
            charges = [Charge(s.queue_id, record_size(len(s.payload)), s.journal)
                       for s in sends]
            self.quotas.check(charges)
            self.quotas.charge(charges)
        except BaseException:
            self._numbering.forget(job.sends)
            raise
        job.sends = self._numbering.number(sends)
        try:
            return await writer.submit(job)  # not through _submit: a coroutine less a message
        except BaseException:
            self.quotas.release(charges)
            self._numbering.forget(job.sends)
            raise

    def _prepare_sends(self, sends: Sequence[SendSpec], *,
                       transactional: bool = False) -> list[SendSpec]:
        """Refuse what cannot fit; mark journal-class queues; transactional means recoverable."""
        prepared = []
        for send in sends:
            self._admission.check(send)
            info = self.registry.get(send.queue_id)
            journal = send.journal or (info is not None and info.journal_class)
            express = send.express and not transactional
            if journal != send.journal or express != send.express:
                send = send._replace(journal=journal, express=express)
            prepared.append(send)
        return prepared

    def reserve_tx_id(self) -> int:
        """A transaction id never used before (the engine persists the high-water mark of the
        ids it is given); the caller passes it to ``commit`` or ``prepare``."""
        return self._numbering.take_tx_id()

    def reserve_seq(self, queue_id: int) -> int:
        """Take the queue's next sequence number now (for a send about to be submitted, so
        its id is known before its copies are encoded). Call it right before the send."""
        return self._numbering.take(queue_id)

    def release_seq(self, queue_id: int, seq: int) -> None:
        """Give up a reservation whose send will not be submitted (its number stays unused).
        Harmless after the send resolved: a caller may release on any failure path."""
        self._inflight.discard(queue_id, seq)

    def release_sends(self, sends: Sequence[SendSpec]) -> None:
        """``release_seq`` for every numbered send of a batch that failed to be built."""
        self._numbering.forget(sends)

    async def _submit(self, job: Job) -> Job:
        if self._writer is None:
            raise StoreClosed("the store is not started")
        return await self._writer.submit(job)

    def _on_durable(self, jobs: list[Job]) -> None:
        """On the loop, after a batch is durable: make its effects visible, in batch order."""
        visible: list[StoredRecord] = []
        for job in jobs:
            if job.op in _VISIBLE_OPS and job.records:
                visible += job.records
                self._lsn_high = max(self._lsn_high, job.records[-1].lsn)
            for queue_id, seq in job.removed_keys:
                gone = self._index.pop_packed(queue_id, seq)
                if gone is not None:
                    self.quotas.release([Charge(queue_id, packed_size(gone),
                                                bool(packed_flags(gone) & RecordFlags.JOURNAL))])
        # A batch's records go in together (a removal never names a record of its own batch).
        self._index.add_many(visible)
        self._inflight.discard_many(visible)

    def _resolve(self, records: Sequence[StoredRecord]) -> None:
        for record in records:
            self._inflight.discard(record.queue_id, record.seq)

    # ---- reads ---------------------------------------------------------------------------

    def read(self, record: StoredRecord) -> bytes:
        """The message body (a copy out of the mapped segment, or the RAM copy of an express
        message)."""
        if record.segment == 0:
            body = self._ram.get(record.offset)
            if body is None:
                raise UnknownRecord(f"express message {record.queue_id}:{record.seq} is gone")
            return body
        state = self._engine.segments.get(record.segment)
        if state is None:
            raise UnknownRecord(f"segment {record.segment} is gone")
        return state.segment.read(record.offset + RECORD_HEADER_SIZE, record.payload_len)

    def writer_histograms(self) -> tuple[Histogram, Histogram] | None:
        """(batch write + fdatasync seconds, jobs per batch), or None before ``start``."""
        if self._writer is None:
            return None
        return self._writer.sync_seconds, self._writer.batch_jobs

    def prepared_receives(self, tx_id: int) -> list[StoredRecord]:
        """The live messages a prepared transaction receives (they stay until it ends)."""
        return [r for q, seq in self._prepared_keys.get(tx_id, [])
                if (r := self.record(q, seq)) is not None]

    def lsn_floor(self) -> int:
        """A number every record of a job submitted from now on will have an LSN at or above
        (a caller that marks a checkpoint with it finds again, at start, the records that
        became durable after the mark: ``flagged_since``)."""
        return self._lsn_high + 1

    def queue_bytes(self, queue_id: int) -> int:
        """Bytes the queue's messages occupy in segments (what its quota counts)."""
        return self.quotas.queue_used.get(queue_id, 0)

    # ---- backup --------------------------------------------------------------------------

    def backup(self, dest: Path, progress: Progress | None = None,
               beside: Sequence[str] = ()) -> BackupReport:
        """Copy the open store into ``dest`` consistently (see ``store.backup``). Blocking:
        call it off the event loop; writes go on meanwhile (checkpoints wait)."""
        self._engine.hold_checkpoints()
        try:
            return copy_storage(self.data_dir.storage, dest, progress, beside)
        finally:
            self._engine.release_checkpoints()

    # ---- incoming stream state (MQInSeqs.lg1 / .lg2) -------------------------------------

    async def save_stream_state(self, payload: bytes) -> None:
        """Replace the saved state of incoming ordered streams, durably (ping-pong copies).

        The gateway's exactly-once receiver encodes the payload; the store keeps it whole.

        Raises (the saved state is the previous one):
            DiskFull: it outgrew the space allocated for it and the disk is full.
            StoreBusy: no file descriptor for the copy.
        """
        assert (streams := self._streams) is not None
        async with self._streams_lock:  # the copy's file opened first: see open_next
            await self._blocking(lambda: streams.write(payload, streams.open_next()))
            self.stream_state = payload

    # ---- queue registration (lqs/) -------------------------------------------------------

    async def create_queue(self, path: str, properties: dict[str, str]) -> QueueInfo:
        """Register a queue (``lqs/nnnnnnnn.hhhhhhhh``), durably.

        Raises:
            StoreError: the queue exists. DiskFull: no room for its file.
        """
        info = await self._blocking(self.registry.create, path, properties)
        self._admission.reopen(info.queue_id)  # an id taken again
        self.quotas.set_limit(info.queue_id, info.quota)
        return info

    async def update_queue(self, queue_id: int, properties: dict[str, str]) -> QueueInfo:
        info = await self._blocking(self.registry.update, queue_id, properties)
        self.quotas.set_limit(queue_id, info.quota)
        return info

    async def delete_queue(self, queue_id: int) -> None:
        """Unregister an empty queue.

        Raises:
            StoreError: the queue still holds messages (purge it first).
        """
        if self.count(queue_id):
            raise StoreError(f"queue {queue_id} still holds {self.count(queue_id)} messages")
        self._admission.deleting(queue_id)  # from now: no write lands while the file goes
        try:
            await self._blocking(self.registry.delete, queue_id)
        except BaseException:
            self._admission.reopen(queue_id)
            raise
        self.quotas.set_limit(queue_id, 0)

    async def _blocking(self, func: Callable[..., T], *args: object) -> T:
        return await asyncio.get_running_loop().run_in_executor(None, func, *args)


def _keys(records: Sequence[StoredRecord]) -> list[tuple[int, int]]:
    return [(r.queue_id, r.seq) for r in records]


def _charge(record: StoredRecord) -> Charge:
    return Charge(record.queue_id, record.size, bool(record.flags & RecordFlags.JOURNAL))
