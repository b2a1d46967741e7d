"""The store engine: the state the writer thread owns, and the blocking work it does.

One thread calls into an ``Engine`` (the group-commit writer, or recovery before it starts),
so nothing here takes locks; the segment preparer (``store.spare``) calls only
``make_segment``, which touches no engine state, and ``_fail``. The event loop never calls it
directly.

A batch (``write_batch``) is:
1. place every new record (``store.placing``: allocate, assign LSN and queue sequence, encode);
2. write them and sync every segment written (``store.runs``: a segment written in one run,
   the commonest case, by one ``O_DSYNC`` write);
3. append the batch's QMLog entries (removals, transaction outcomes) and ``fdatasync`` the log;
4. apply the lazy changes: state bytes rewritten in place (made durable by the next
   checkpoint), bitmaps updated, prepared transactions remembered.
A transaction that only sends is a grouped commit (``store.grouped``): no QMLog entry, its
state bytes settled by the next checkpoint.
Any ``OSError`` in 2–4 fail-stops the engine: a failed sync is never retried (the page cache
state is unknown after it), and every later call raises ``StoreFailed``.

A full disk is not a failure: every file a batch or a checkpoint rewrites is allocated ahead
(``store.space``), so only new data meets ENOSPC — a new segment, and with it the jobs that
needed it, is refused with ``DiskFull`` while removals go on. When the space reserve had to be
given up for the checkpoint pairs (``short``), every job that sends is refused until a
checkpoint finds it whole again.

A checkpoint (``checkpoint``) settles grouped commits, syncs the segments whose state bytes
changed, writes each changed bitmap into its ``l`` file, then writes ``MQTrans`` (the commit
point), and only then lets the allocator use the space freed since the previous checkpoint.
"""

from __future__ import annotations

import operator
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from store.allocator import Allocator, Area
from store.bitmap import GranuleBitmap
from store.datadir import DataDir
from store.errors import DiskFull, StoreBusy, StoreFailed, UnknownRecord, out_of_descriptors
from store.fileops import FileOps
from store.framing import (
    SEGMENT_HEADER_SIZE,
    RecordState,
    max_payload,
    peek_record,
)
from store.grouped import settle
from store.lfile import LFile
from store.logcodec import EntryKind, Ref, encode_entry
from store.logs import cleanup_log, commit_log
from store.mqtrans import Checkpoint
from store.options import StoreOptions
from store.pingpong import PingPong
from store.placing import place, place_appends
from store.qmlog import QMLog
from store.records import Job, Placed, PreparedTx, StoredRecord
from store.runs import Parts, SyncedWrites
from store.segment import Segment, segment_name
from store.space import Reserve, is_full
from store.spare import Made, SegmentPreparer

__all__ = ["Engine", "SegmentState"]

_STATE_BYTE = 3
_OFFSET = operator.attrgetter("offset")


@dataclass(slots=True)
class SegmentState:
    segment: Segment
    lfile: LFile | None  # None for express (r) segments: they are never checkpointed
    bitmap: GranuleBitmap
    live_count: int = 0
    live_bytes: int = 0
    oldest_lsn: int = 0
    bitmap_dirty: bool = True
    data_dirty: bool = False


class Engine:
    """Segments, bitmaps, allocator, QMLog and checkpoints of one open store."""

    def __init__(self, ops: FileOps, data_dir: DataDir, options: StoreOptions, *, nonce: int,
                 qmlog: QMLog, mqtrans: PingPong) -> None:
        self.ops = ops
        self.data_dir = data_dir
        self.options = options
        self.nonce = nonce
        self.qmlog = qmlog
        self.mqtrans = mqtrans
        self.segments: dict[int, SegmentState] = {}
        self.allocators = {"p": Allocator(), "j": Allocator(), "r": Allocator()}
        # Sequence numbers handed out on the loop side (express messages in RAM included),
        # merged into each checkpoint so a clean restart never hands them out again.
        self.seq_floor: Callable[[], dict[int, int]] = dict
        self.epoch = 0
        self.next_lsn = 1
        self.next_segment = 1
        self.next_tx = 1
        self.next_seq: dict[int, int] = {}
        self.prepared: dict[int, PreparedTx] = {}
        self.grouped: list[tuple[int, int, int]] = []  # (segment, offset, size) to settle
        self.failed: str | None = None
        # A backup holds checkpoints (so no freed space is reused while it copies); the writer
        # then waits for the hold to end if the QMLog fills up.
        self.checkpoint_lock = threading.Lock()
        self.unheld = threading.Event()
        self.unheld.set()
        self.last_cleanup = time.monotonic()
        self.payload_max = max_payload(options.segment_size)
        self.synced_writes = SyncedWrites()
        self.preparer: SegmentPreparer | None = None
        # Space for bookkeeping (store.space): the reserve, the pairs that may grow into it,
        # and why new data is refused while either is short (None: it is not).
        self.reserve: Reserve | None = None
        self.pairs: list[PingPong] = [mqtrans]
        self.short: str | None = None
        self.segments_short = False  # a new data segment could not be made (a full disk)

    # ---- batches -------------------------------------------------------------------------

    def write_batch(self, jobs: Sequence[Job]) -> None:
        """Make ``jobs`` durable; see the module docstring. Job errors are set on the jobs.

        Raises:
            StoreFailed: the engine is (or just became) fail-stopped.
        """
        if self.failed is not None:
            raise StoreFailed(self.failed)
        if self.short is not None:
            refused = DiskFull(f"disk full: {self.short}")
            for job in jobs:
                if job.sends and job.error is None:
                    job.error = refused
        # One-message appends (the commonest job) need no validation, log entry or state
        # change: those steps run over the other jobs only.
        others = [job for job in jobs if job.op != "append" or len(job.sends) != 1]
        try:
            try:
                self._ensure_log_space(sum(job.log_bytes_max() for job in others))
            except (DiskFull, StoreBusy) as exc:  # no checkpoint written: nothing is
                for job in jobs:
                    job.error = exc
                return
            self._validate(others)
            writes: dict[int, list[tuple[int, Parts]]] = {}
            placed: list[StoredRecord] = []
            if not others:
                place_appends(self, jobs, writes)
            else:
                appends: list[Job] = []
                for job in jobs:
                    if job.op == "append" and len(job.sends) == 1:
                        appends.append(job)
                        continue
                    if appends:
                        place_appends(self, appends, writes)
                        appends = []
                    if job.error is None:
                        place(self, job, writes, placed)
                if appends:
                    place_appends(self, appends, writes)
            if placed:
                self.occupy_many(placed)
            self.synced_writes.write({n: self.segments[n].segment for n in writes}, writes)
            entries = self._log_entries(others)
            if entries:
                wrap_lsn = self._take_lsn()
                self.qmlog.append([encode_entry(k, self._take_lsn(), tx_id=t, refs=r)
                                   for k, t, r in entries], next_lsn=wrap_lsn)
                self.qmlog.sync()
            for job in others:
                if job.error is None:
                    self._apply(job)
        except OSError as exc:
            raise self._fail(f"I/O error in a commit: {exc}") from exc

    def _fail(self, reason: str) -> StoreFailed:
        self.failed = reason
        commit_log.critical("store fail-stopped: %s; restart to recover", reason)
        return StoreFailed(reason)

    def _take_lsn(self) -> int:
        lsn = self.next_lsn
        self.next_lsn += 1
        return lsn

    def _ensure_log_space(self, needed: int) -> None:
        if self.qmlog.free_bytes() < needed + 4096:
            self.unheld.wait()
            self.checkpoint()
        assert self.qmlog.free_bytes() >= needed, "batch larger than the QMLog"

    def allocate(self, kind: str, size: int) -> tuple[int, int]:
        """A place for ``size`` bytes of ``kind``, adding a segment when none has room.

        Raises:
            DiskFull: no room for a new segment.
            StoreBusy: no file descriptor for a new segment.
        """
        place = self.allocators[kind].allocate(size)
        if place is None:
            self._add_segment(kind)
            place = self.allocators[kind].allocate(size)
        assert place is not None
        return place

    def _add_segment(self, kind: str) -> SegmentState:
        preparer = None if kind == "r" else self.preparer  # express segments: never ahead
        made = preparer.take(kind) if preparer is not None else None
        if made is None:
            try:
                made = self.make_segment(kind, self.next_segment)
            except OSError as exc:
                if is_full(exc):
                    full = DiskFull(f"no space for a new {self.options.segment_size}-byte "
                                    f"segment in {self.data_dir.storage}")
                    if not self.segments_short:  # the operator is told once, not per send
                        self.segments_short = True
                        commit_log.warning("disk full: %s; writes that need one are refused "
                                           "(507), reads and removals go on", full)
                    raise full from exc
                if out_of_descriptors(exc):  # make_segment left nothing behind
                    raise StoreBusy(f"no new {kind} segment now: {exc}") from exc
                raise
            self.next_segment += 1
        if self.segments_short:
            self.segments_short = False
            commit_log.warning("space for new segments is back: new data is taken again")
        segment, lfile = made
        if preparer is not None:
            preparer.ensure(kind, self._reserve_segment)
        state = SegmentState(segment, lfile, GranuleBitmap(self.options.segment_size))
        self.segments[segment.number] = state
        self.allocators[kind].add_area(Area(segment.number, SEGMENT_HEADER_SIZE, segment.size))
        return state

    def make_segment(self, kind: str, number: int) -> Made:
        """Create a data segment and its ``l`` file (any thread: touches no engine state)."""
        segment = Segment.create(self.ops, self.data_dir.storage, kind=kind, number=number,
                                 size=self.options.segment_size, nonce=self.nonce)
        if kind == "r":
            return segment, None
        try:
            lfile = LFile.create(self.ops, self.data_dir.storage / segment_name("l", number),
                                 self.options.segment_size)
        except BaseException:
            segment.close()
            self.ops.unlink(segment.path)
            raise
        return segment, lfile

    def _reserve_segment(self) -> int:
        number = self.next_segment
        self.next_segment += 1
        return number

    def start_preparing(self) -> None:
        """Make data segments ahead of need from now on (``store.spare``)."""
        self.preparer = SegmentPreparer(self.make_segment, self._fail)

    def _occupy(self, record: StoredRecord) -> None:
        state = self.segments[record.segment]
        state.bitmap.set_range(record.offset, record.size, occupied=True)
        state.live_count += 1
        state.live_bytes += record.size
        if not state.oldest_lsn or record.lsn < state.oldest_lsn:
            state.oldest_lsn = record.lsn
        state.bitmap_dirty = True

    def occupy_many(self, records: Sequence[Placed]) -> None:
        """``_occupy`` for many records (a batch, or recovery), in any order: adjacent ones
        are marked as one run (``occupy_runs``)."""
        by_segment: dict[int, list[Placed]] = {}
        for record in records:
            by_segment.setdefault(record.segment, []).append(record)
        runs: list[tuple[int, int, int, int, int]] = []
        for number, items in by_segment.items():
            items.sort(key=_OFFSET)
            start = end = items[0].offset
            count, lowest = 0, items[0].lsn
            for record in items:
                if record.offset != end:
                    runs.append((number, start, end, count, lowest))
                    start, count, lowest = record.offset, 0, record.lsn
                end = record.offset + record.size
                count += 1
                if record.lsn < lowest:
                    lowest = record.lsn
            runs.append((number, start, end, count, lowest))
        self.occupy_runs(runs)

    def occupy_runs(self, runs: Sequence[tuple[int, int, int, int, int]]) -> None:
        """Mark runs of adjacent records occupied: (segment, start, end, records, lowest LSN
        of the run), as ``place_appends`` makes them while placing."""
        segments = self.segments
        for number, start, end, count, first_lsn in runs:
            state = segments[number]
            state.bitmap.set_range(start, end - start, occupied=True)
            state.live_count += count
            state.live_bytes += end - start
            if not state.oldest_lsn or first_lsn < state.oldest_lsn:
                state.oldest_lsn = first_lsn
            state.bitmap_dirty = True

    def _log_entries(self, jobs: Sequence[Job]) -> list[tuple[EntryKind, int, tuple[Ref, ...]]]:
        entries: list[tuple[EntryKind, int, tuple[Ref, ...]]] = []
        for job in jobs:
            if job.error is not None or job.op == "append":  # an append leaves no entry
                continue
            removes = tuple(job.removes)
            if job.op == "remove":
                entries.append((EntryKind.REMOVE, 0, removes))
            elif job.op in ("express", "remove_express"):
                continue  # express messages leave no trace in the log
            elif job.op == "commit" and not job.grouped and (len(job.sends) > 1 or removes):
                entries.append((EntryKind.TX_COMMIT, job.tx_id, removes))
            elif job.op == "prepare":
                entries.append((EntryKind.TX_PREPARE, job.tx_id, removes))
            elif job.op in ("commit_prepared", "abort"):
                kind = EntryKind.TX_COMMIT if job.op == "commit_prepared" else EntryKind.TX_ABORT
                entries.append((kind, job.tx_id, tuple(self.prepared[job.tx_id].removes)
                                if kind == EntryKind.TX_COMMIT else ()))
        return entries

    def _validate(self, jobs: Sequence[Job]) -> None:
        """Refuse, before anything is written, removals of records that are not live (or that
        another job of the batch removes) and outcomes of unknown prepared transactions."""
        taken: set[Ref] = set()
        for job in jobs:
            if job.op in ("commit", "prepare"):
                if job.tx_id == 0:
                    job.tx_id = self.next_tx
                    self.next_tx += 1
                elif job.tx_id >= self.next_tx:  # chosen by MessageStore.reserve_tx_id
                    self.next_tx = job.tx_id + 1
            if job.op in ("commit_prepared", "abort"):
                if job.tx_id not in self.prepared:
                    job.error = UnknownRecord(f"no prepared transaction {job.tx_id}")
                continue
            if not job.removes:
                continue
            bad = [ref for ref in job.removes if ref in taken or not self._is_live(ref)]
            if bad:
                job.error = UnknownRecord(f"no live record at {bad[0]}")
                continue
            before = len(taken)
            taken.update(job.removes)
            if len(taken) - before != len(job.removes):
                # One record named twice: this job is refused, the store goes on.
                job.error = UnknownRecord("a record is named twice in one removal")
                taken.difference_update(job.removes)

    def _is_live(self, ref: Ref) -> bool:
        state = self.segments.get(ref.segment)
        if state is None or not state.bitmap.is_occupied(ref.offset):
            return False
        found = peek_record(state.segment.view, ref.offset)
        return found is not None and found[0] == ref.lsn

    def _apply(self, job: Job) -> None:
        if (job.op == "commit" and job.records and not job.grouped
                and (len(job.sends) > 1 or job.removes)):
            for record in job.records:
                self._set_state(record.ref, RecordState.LIVE)
        elif job.op == "prepare":
            self.prepared[job.tx_id] = PreparedTx(job.tx_id, list(job.records),
                                                  list(job.removes))
        elif job.op == "commit_prepared":
            prepared = self.prepared.pop(job.tx_id)
            for record in prepared.records:
                self._set_state(record.ref, RecordState.LIVE)
            job.records = prepared.records
            job.removes = prepared.removes
        elif job.op == "abort":
            prepared = self.prepared.pop(job.tx_id)
            for record in prepared.records:
                self._free(record.ref)
            job.records = prepared.records  # the caller gives back their numbers and charges
        if job.op in ("remove", "commit", "commit_prepared", "remove_express"):
            for ref in job.removes:
                self._free(ref)

    def _set_state(self, ref: Ref, value: RecordState) -> None:
        state = self.segments[ref.segment]
        state.segment.write_byte(ref.offset + _STATE_BYTE, value)
        state.data_dirty = True

    def _free(self, ref: Ref) -> None:
        state = self.segments[ref.segment]
        found = peek_record(state.segment.view, ref.offset)
        assert found is not None and found[0] == ref.lsn, ref
        self._set_state(ref, RecordState.DEAD)
        state.bitmap.set_range(ref.offset, found[1], occupied=False)
        state.live_count -= 1
        state.live_bytes -= found[1]
        state.bitmap_dirty = True
        assert state.live_count >= 0

    # ---- checkpoints ---------------------------------------------------------------------

    def checkpoint(self, *, cleanup: bool = False) -> None:
        """Make the current state the new recovery point; see the module docstring.

        Raises:
            StoreFailed: an I/O error (the engine fail-stops).
            StoreBusy: no file descriptor for the checkpoint file; nothing changed.
            DiskFull: no room to grow the checkpoint file; nothing of it written.
        """
        if self.failed is not None:
            raise StoreFailed(self.failed)
        with self.checkpoint_lock:
            try:  # first: a process out of descriptors must find out with nothing changed
                opened = self.mqtrans.open_next()
            except OSError as exc:  # not StoreBusy: nothing changed, tried again later
                raise self._fail(f"I/O error in a checkpoint: {exc}") from exc
            try:
                self._checkpoint(opened, cleanup=cleanup)
            except DiskFull as exc:
                self._set_short(f"no checkpoint written: {exc}")
                raise
            except OSError as exc:
                raise self._fail(f"I/O error in a checkpoint: {exc}") from exc
            try:
                self._review_space()
            except OSError as exc:
                raise self._fail(f"I/O error refilling the space reserve: {exc}") from exc

    def _review_space(self) -> None:
        """After a checkpoint: refill the space reserve if it was given up, and say whether
        new data must still be refused."""
        reasons = []
        if self.reserve is not None and not self.reserve.refill():
            reasons.append("the space reserve is not whole")
        reasons += [f"no room to grow {p.paths[0].stem}" for p in self.pairs if p.short]
        self._set_short("; ".join(reasons) or None)

    def _set_short(self, reason: str | None) -> None:
        if reason != self.short:
            if reason is None:
                commit_log.warning("space for the store's bookkeeping is back: new data is "
                                   "taken again")
            else:
                commit_log.warning("disk full: new data refused (%s); reads and removals go "
                                   "on", reason)
        self.short = reason

    def hold_checkpoints(self) -> None:
        """Stop checkpoints (and so space reuse) until ``release_checkpoints``; waits for one
        in progress to finish. Called by a backup, from its own thread."""
        with self.checkpoint_lock:
            self.unheld.clear()

    def release_checkpoints(self) -> None:
        self.unheld.set()

    @property
    def checkpoints_held(self) -> bool:
        return not self.unheld.is_set()

    def _checkpoint(self, opened: tuple[int, bool], *, cleanup: bool) -> None:
        """``opened``: the checkpoint file's next copy (``PingPong.open_next``); it is
        closed whatever happens."""
        try:
            payload, checkpoint, kept, doomed = self._checkpoint_made(cleanup)
        except BaseException:
            self.ops.close(opened[0])
            raise
        self.mqtrans.write(payload, opened)
        # Durable: from here on the free space of these bitmaps may be reused.
        self.qmlog.keep_from = checkpoint.qmlog_pos
        for number in kept:
            state = self.segments[number]
            if state.bitmap_dirty:
                assert state.lfile is not None
                state.lfile.checkpoint_done()
                state.bitmap_dirty = False
        for number in doomed:
            self._retire(number)
        self._reset_allocators()

    def _checkpoint_made(self, cleanup: bool
                         ) -> tuple[bytes, Checkpoint, list[int], list[int]]:
        """Everything of a checkpoint before its record is written: the data synced, the
        record made, the bitmaps written for the next epoch (in the slots the durable
        checkpoint does not use). Returns the record's bytes, the record, the segments
        kept and those to delete."""
        grouped, self.grouped = self.grouped, []
        for number in settle({n: s.segment for n, s in self.segments.items()}, grouped):
            self.segments[number].data_dirty = True
        for state in self.segments.values():
            if state.data_dirty:
                state.segment.sync()
                state.data_dirty = False
        doomed = self._empty_segments() if cleanup else []
        kept = [n for n in sorted(self.segments)
                if n not in doomed and self.segments[n].segment.kind != "r"]
        checkpoint = Checkpoint(
            epoch=self.epoch + 1, lsn=self.next_lsn - 1, qmlog_pos=self.qmlog.write_pos,
            nonce=self.nonce, next_segment=self.next_segment, next_tx=self.next_tx,
            next_seq=_merged(self.next_seq, self.seq_floor()),
            prepared={t: list(p.removes) for t, p in self.prepared.items()},
            segments=kept,
        )
        payload = checkpoint.encode()
        self.mqtrans.make_room(len(payload))  # DiskFull here: nothing of it written yet
        self.epoch += 1
        for number in kept:
            state = self.segments[number]
            if state.bitmap_dirty:
                assert state.lfile is not None
                state.lfile.write(self.epoch, state.bitmap)
        return payload, checkpoint, kept, doomed

    def _empty_segments(self) -> list[int]:
        """Empty segments to delete, keeping the newest empty one of each kind as a spare —
        or none when one of that kind is made ahead and ready: it is the spare."""
        self.last_cleanup = time.monotonic()
        doomed: list[int] = []
        for kind in ("p", "j", "r"):
            empty = sorted(n for n, s in self.segments.items()
                           if s.segment.kind == kind and s.live_count == 0)
            ahead = self.preparer is not None and self.preparer.ready(kind)
            doomed.extend(empty if ahead else empty[:-1])
        return doomed

    def _retire(self, number: int) -> None:
        state = self.segments.pop(number)
        for allocator in self.allocators.values():
            allocator.drop_segment(number)
        path = state.segment.path
        state.segment.close()
        archive = self.options.archive_segments and state.segment.kind != "r"
        if archive:
            try:
                self.data_dir.archive.mkdir(exist_ok=True)
                self.ops.rename(path, self.data_dir.archive / path.name)
            except OSError as exc:  # a new directory block: freeing space comes first
                if not is_full(exc):
                    raise
                cleanup_log.warning("segment %s not archived (%s): deleted", path.name, exc)
                archive = False
        if not archive:
            self.ops.unlink(path)
        if state.lfile is not None:
            state.lfile.close()
            self.ops.unlink(state.lfile.path)
        self.ops.fsync_dir(self.data_dir.storage)
        cleanup_log.info("segment %s %s", path.name, "archived" if archive else "deleted")

    def _reset_allocators(self) -> None:
        areas: dict[str, list[Area]] = {"p": [], "j": [], "r": []}
        for number in sorted(self.segments):
            state = self.segments[number]
            for start, end in state.bitmap.runs(occupied=False):
                areas[state.segment.kind].append(Area(number, start, end))
        for kind, allocator in self.allocators.items():
            allocator.reset(areas[kind])

    def close(self) -> None:
        """Write a final checkpoint (a fast next start) and close every file; express segments
        are deleted (their messages do not outlive the process). Segments made ahead and not
        used stay on disk, empty: the next start takes them like any other."""
        if self.preparer is not None:
            for segment, lfile in self.preparer.stop():
                segment.close()
                if lfile is not None:
                    lfile.close()
            self.preparer = None
        if self.failed is None:
            try:
                self.checkpoint()
            except (DiskFull, StoreBusy) as exc:
                # The next start recovers from the last checkpoint and the log.
                commit_log.warning("no final checkpoint: %s", exc)
        for state in self.segments.values():
            state.segment.close()
            if state.lfile is not None:
                state.lfile.close()
            if state.segment.kind == "r" and self.failed is None:
                self.ops.unlink(state.segment.path)
        self.segments.clear()
        self.qmlog.close()

    @staticmethod
    def storage_files(storage: Path) -> list[Path]:
        return sorted(p for p in storage.iterdir() if p.is_file())


def _merged(left: dict[int, int], right: dict[int, int]) -> dict[int, int]:
    merged = dict(left)
    for key, value in right.items():
        if value > merged.get(key, 0):
            merged[key] = value
    return merged
