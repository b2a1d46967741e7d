"""Opening a store: find every record, decide what survives, and checkpoint before serving.

Steps (each one logged; ``RecoveryReport`` carries the figures):
1. discard ``r`` files (express messages do not survive a restart);
2. read ``MQTrans`` (the newer valid copy) — without it, every segment is scanned in full;
3. open each segment; a bad header quarantines the whole file (moved to ``quarantine/``);
4. find records: the checkpointed bitmap's live runs plus the chains written since, or a full
   scan when the segment has no usable bitmap;
5. replay the QMLog since the checkpoint and apply ``recovery.resolve``;
6. copy damaged ranges to ``quarantine/`` (they are reported, counted and freed);
7. rewrite state bytes that changed, sync, write a fresh checkpoint — only then serve.

On a full disk the store still opens (read-only until space returns): what recovery rewrites
was allocated ahead (``store.space``); a file of an older store that was not is reported and
written as it goes.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import operator
import secrets
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from store.bitmap import GranuleBitmap
from store.datadir import DataDir
from store.engine import Engine, SegmentState
from store.fileops import FileOps
from store.framing import (
    SEGMENT_HEADER_SIZE,
    Damage,
    RecordHeader,
    record_flags,
    scan_chain,
    scan_run,
)
from store.lfile import LFile
from store.logcodec import LogEntry, replay, scan_all
from store.logs import recovery_log
from store.mqtrans import Checkpoint
from store.options import StoreOptions
from store.pingpong import PingPong
from store.qmlog import QMLog
from store.records import PreparedTx, StoredRecord
from store.recovery import resolve
from store.segment import TEMP_SUFFIX, Segment, parse_segment_name, segment_name
from store.space import Reserve, is_full

__all__ = [
    "RecoveryReport",
    "DamageReport",
    "Opened",
    "open_engine",
    "collector_paused",
    "open_segments",
    "load_checkpoint",
    "checkpoint_bitmap",
    "find_segment_records",
]


@dataclass(frozen=True, slots=True)
class DamageReport:
    file: str
    offset: int
    length: int
    reason: str


@dataclass(slots=True)
class RecoveryReport:
    checkpoint_epoch: int | None = None
    segments: int = 0
    live_records: int = 0
    prepared_transactions: int = 0
    dead_records: int = 0
    full_scans: int = 0
    log_entries: int = 0
    express_files_discarded: int = 0
    damaged: list[DamageReport] = field(default_factory=list)
    quarantined_files: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass(slots=True)
class Opened:
    engine: Engine
    live: list[RecordHeader]  # in no particular order; each header names its segment
    prepared: dict[int, PreparedTx]
    report: RecoveryReport


def open_engine(ops: FileOps, data_dir: DataDir, options: StoreOptions) -> Opened:
    """Recover the store in ``data_dir`` (locked by the caller). Blocking.

    Raises:
        OSError: an I/O error that recovery cannot work around (the store does not open).
    """
    started = time.monotonic()
    report = RecoveryReport()
    storage = data_dir.storage
    _discard_express(ops, data_dir, report)
    mqtrans, payload, bad_copies = PingPong.load(ops, storage, "MQTrans")
    checkpoint = load_checkpoint(payload, bad_copies)
    report.checkpoint_epoch = checkpoint.epoch if checkpoint else None
    segments = open_segments(ops, data_dir, report)
    nonce = _choose_nonce(checkpoint, segments)
    for number in [n for n, s in segments.items() if s.header.nonce != nonce]:
        _quarantine_file(ops, data_dir, segments.pop(number), "segment of another store",
                         report)
    found, damage = _find_records(ops, data_dir, segments, checkpoint, report)
    qmlog, log_bytes = QMLog.open(ops, storage / "QMLog", size=options.qmlog_size, nonce=nonce)
    entries = _log_entries(log_bytes, checkpoint)
    report.log_entries = len(entries)
    resolution = resolve(itertools.chain.from_iterable(found.values()), entries,
                         checkpoint.prepared if checkpoint else {})
    for number, damaged in damage.items():
        for item in damaged:
            _quarantine_range(ops, data_dir, segments[number], item, report)

    engine = Engine(ops, data_dir, options, nonce=nonce, qmlog=qmlog, mqtrans=mqtrans)
    engine.reserve = Reserve(ops, data_dir.space_reserve)
    engine.reserve.refill()
    reserve_pair(mqtrans, engine.reserve, len(payload or b""))
    _fill_engine(engine, segments, found, entries, checkpoint, ops, data_dir)
    live = resolution.live
    engine.occupy_many(live)
    prepared: dict[int, PreparedTx] = {}
    # Every prepared transaction survives, also one that only receives (it has no records).
    for tx_id in set(resolution.prepared_records) | set(resolution.prepared_removes):
        tx_records = [_stored(f) for f in resolution.prepared_records.get(tx_id, [])]
        for record in tx_records:
            engine._occupy(record)
        prepared[tx_id] = PreparedTx(tx_id, tx_records, resolution.prepared_removes.get(tx_id, []))
    engine.prepared = prepared
    touched = set()
    for ref, value in resolution.state_fixes:
        engine.segments[ref.segment].segment.write_byte(ref.offset + 3, value)
        touched.add(ref.segment)
    for number in touched:
        engine.segments[number].segment.sync()
    engine.checkpoint()
    qmlog.reset(nonce)

    report.segments = len(engine.segments)
    report.live_records = len(live)
    report.prepared_transactions = len(prepared)
    report.dead_records = resolution.dead
    report.seconds = time.monotonic() - started
    return Opened(engine, live, prepared, report)


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while recovery runs. Recovery builds a tuple per
    record (a million for a 1 GiB store) and makes no cycles, yet every full pass walked
    them all: ~1.4 s of a 6 s recovery of 1 GiB. The collector is process-wide; it is
    paused only if it was running and resumed however recovery ends."""
    running = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if running:
            gc.enable()


def _discard_express(ops: FileOps, data_dir: DataDir, report: RecoveryReport) -> None:
    """Delete express segments and segments whose creation a crash interrupted."""
    for path in sorted(data_dir.storage.glob("*.mq" + TEMP_SUFFIX)):
        ops.unlink(path)
    for path in sorted(data_dir.storage.glob("r*.mq")):
        if parse_segment_name(path.name) is not None:
            ops.unlink(path)
            report.express_files_discarded += 1


def reserve_pair(pair: PingPong, reserve: Reserve, payload_size: int) -> None:
    """Allocate a ping-pong pair ahead; on a full disk it is reported and left as it is.

    Raises:
        OSError: an I/O error.
    """
    try:
        pair.reserve_space(reserve, payload_size)
    except OSError as exc:
        if not is_full(exc):
            raise
        recovery_log.warning("disk full: %s not allocated ahead (%s)", pair.paths[0].stem, exc)


def load_stream_state(ops: FileOps, data_dir: DataDir, engine: Engine
                      ) -> tuple[PingPong, bytes | None, int]:
    """The incoming streams' saved state (``MQInSeqs``), its pair allocated ahead and handed
    to the engine's checkpoints: (the pair, the state, damaged copies).

    Raises:
        OSError: an I/O error.
    """
    streams, state, bad = PingPong.load(ops, data_dir.storage, "MQInSeqs")
    assert engine.reserve is not None
    reserve_pair(streams, engine.reserve, len(state or b""))
    engine.pairs.append(streams)
    if bad:
        recovery_log.warning("MQInSeqs: %d damaged copy(ies) ignored", bad)
    return streams, state, bad


def log_recovery(report: RecoveryReport, problems: list[str]) -> None:
    """What recovery found, in the log."""
    recovery_log.info(
        "store recovered segments=%d live=%d prepared=%d dead=%d damaged=%d full_scans=%d "
        "log_entries=%d seconds=%.3f", report.segments, report.live_records,
        report.prepared_transactions, report.dead_records, len(report.damaged),
        report.full_scans, report.log_entries, report.seconds)
    for problem in problems:
        recovery_log.warning("%s", problem)


def load_checkpoint(payload: bytes | None, bad_copies: int) -> Checkpoint | None:
    if bad_copies:
        recovery_log.warning("MQTrans: %d damaged copy(ies) ignored", bad_copies)
    if payload is None:
        return None
    try:
        return Checkpoint.decode(payload)
    except (ValueError, KeyError, TypeError) as exc:
        recovery_log.warning("MQTrans checkpoint unreadable (%s): full rebuild", exc)
        return None


def open_segments(ops: FileOps, data_dir: DataDir, report: RecoveryReport, *,
                  quarantine: bool = True) -> dict[int, Segment]:
    """Open every p/j segment; bad ones are reported (and, by recovery, moved aside)."""
    segments: dict[int, Segment] = {}
    for path in sorted(data_dir.storage.iterdir()):
        parsed = parse_segment_name(path.name)
        if parsed is None or parsed[0] not in "pj":
            continue
        opened = Segment.open(ops, path)
        if isinstance(opened, Damage):
            report.damaged.append(DamageReport(path.name, opened.offset, opened.length,
                                               opened.reason))
            if quarantine:
                _move_to_quarantine(ops, data_dir, path, report)
            continue
        if opened.number != parsed[1] or opened.kind != parsed[0]:
            report.damaged.append(DamageReport(path.name, 0, SEGMENT_HEADER_SIZE,
                                               "segment header names another file"))
            opened.close()
            if quarantine:
                _move_to_quarantine(ops, data_dir, path, report)
            continue
        if opened.mapped_bytes < opened.size:
            report.damaged.append(DamageReport(path.name, opened.mapped_bytes,
                                               opened.size - opened.mapped_bytes,
                                               "segment file truncated"))
        segments[opened.number] = opened
    return segments


def _choose_nonce(checkpoint: Checkpoint | None, segments: dict[int, Segment]) -> int:
    if checkpoint is not None:
        return checkpoint.nonce
    counts = Counter(s.header.nonce for s in segments.values())
    if counts:
        return counts.most_common(1)[0][0]
    return secrets.randbits(64)


def _find_records(
    ops: FileOps, data_dir: DataDir, segments: dict[int, Segment], checkpoint: Checkpoint | None,
    report: RecoveryReport,
) -> tuple[dict[int, list[RecordHeader]], dict[int, list[Damage]]]:
    found: dict[int, list[RecordHeader]] = {}
    damage: dict[int, list[Damage]] = {}
    for number, segment in segments.items():
        bitmap = checkpoint_bitmap(ops, data_dir, segment, checkpoint)
        headers, damaged, full = find_segment_records(segment, bitmap, checkpoint)
        report.full_scans += full
        found[number] = headers
        damage[number] = damaged
    return found, damage


def checkpoint_bitmap(ops: FileOps, data_dir: DataDir, segment: Segment,
                      checkpoint: Checkpoint | None) -> GranuleBitmap | None:
    """The segment's bitmap as of ``checkpoint`` (None when there is no usable one)."""
    path = data_dir.storage / segment_name("l", segment.number)
    if checkpoint is None or segment.number not in checkpoint.segments or not path.exists():
        return None
    lfile = LFile.open(ops, path, segment.size)
    try:
        best = lfile.read_best(checkpoint.epoch)
    finally:
        lfile.close()
    return best[1] if best else None


def find_segment_records(segment: Segment, bitmap: GranuleBitmap | None,
                         checkpoint: Checkpoint | None) -> tuple[list[RecordHeader],
                                                                 list[Damage], int]:
    """Every valid record of one segment, the damage seen, and 1 if it took a full scan.

    With a checkpoint bitmap: its live runs, plus the chains written since in its free areas.
    A segment created after the checkpoint (or retired by it): one chain from its start.
    Without a checkpoint, or without its bitmap: a full scan (records of every state).
    """
    view, end, nonce = segment.view, segment.mapped_bytes, segment.header.nonce
    number = segment.number
    headers: list[RecordHeader] = []
    damaged: list[Damage] = []
    if bitmap is not None and checkpoint is not None:
        for start, stop in bitmap.runs(occupied=True):
            start = max(start, SEGMENT_HEADER_SIZE)
            if start < min(stop, end):
                run = scan_run(view, start, min(stop, end), nonce=nonce, segment=number)
                headers += run.records
                damaged += run.damaged
        for start, stop in bitmap.runs(occupied=False):
            if start < end:
                chain = scan_chain(view, start, min(stop, end), nonce=nonce,
                                   after_lsn=checkpoint.lsn, segment=number)
                headers += chain.records
                damaged += chain.damaged
        return headers, damaged, 0
    if checkpoint is not None and segment.number not in checkpoint.segments:
        chain = scan_chain(view, SEGMENT_HEADER_SIZE, end, nonce=nonce, after_lsn=checkpoint.lsn,
                           segment=number)
        return chain.records, chain.damaged, 0
    run = scan_run(view, SEGMENT_HEADER_SIZE, end, nonce=nonce, segment=number)
    return run.records, run.damaged, 1


def _log_entries(log_bytes: bytes, checkpoint: Checkpoint | None) -> list[LogEntry]:
    if not log_bytes:
        return []
    if checkpoint is None:
        return scan_all(log_bytes)
    entries, _ = replay(log_bytes, checkpoint.qmlog_pos, after_lsn=checkpoint.lsn)
    return entries


def _fill_engine(engine: Engine, segments: dict[int, Segment],
                 found: dict[int, list[RecordHeader]], entries: list[LogEntry],
                 checkpoint: Checkpoint | None, ops: FileOps, data_dir: DataDir) -> None:
    every = list(itertools.chain.from_iterable(found.values()))
    # map/attrgetter: these run over every record found, and stay in C.
    lsns = itertools.chain(map(_LSN, every), (e.lsn for e in entries))
    txs = itertools.chain(map(_TX, every), (e.tx_id for e in entries))
    numbers = list(segments) + _numbers_seen(data_dir)
    engine.epoch = checkpoint.epoch if checkpoint else 0
    engine.next_lsn = max(lsns, default=0) + 1
    engine.next_tx = max(txs, default=0) + 1
    if checkpoint is not None:
        engine.next_lsn = max(engine.next_lsn, checkpoint.lsn + 1)
        engine.next_tx = max(engine.next_tx, checkpoint.next_tx)
    engine.next_segment = max([checkpoint.next_segment - 1 if checkpoint else 0, *numbers]) + 1
    engine.next_seq = dict(checkpoint.next_seq) if checkpoint else {}
    highest: dict[int, int] = {}
    for queue_id, seq in zip(map(_QUEUE, every), map(_SEQ, every)):
        if seq > highest.get(queue_id, 0):
            highest[queue_id] = seq
    for queue_id, seq in highest.items():
        if seq >= engine.next_seq.get(queue_id, 1):
            engine.next_seq[queue_id] = seq + 1
    for number, segment in segments.items():
        lfile = LFile.open(ops, data_dir.storage / segment_name("l", number), segment.size)
        try:
            lfile.reserve()  # done when the segment was made, unless an older version made it
        except OSError as exc:
            if not is_full(exc):
                lfile.close()
                raise
            recovery_log.warning("disk full: %s not allocated ahead (%s)", lfile.path.name, exc)
        if checkpoint is not None:
            lfile.read_best(checkpoint.epoch)
        bitmap = GranuleBitmap(segment.size)
        if segment.mapped_bytes < segment.size:
            # Never place records where the file no longer reaches.
            bitmap.set_range(segment.mapped_bytes, segment.size - segment.mapped_bytes,
                             occupied=True)
        engine.segments[number] = SegmentState(segment, lfile, bitmap)


def _numbers_seen(data_dir: DataDir) -> list[int]:
    """Segment numbers used by files anywhere under storage/ (so none is ever reused)."""
    numbers = []
    for directory in (data_dir.storage, data_dir.archive, data_dir.quarantine):
        if directory.is_dir():
            for path in directory.iterdir():
                parsed = parse_segment_name(path.name.split("-")[0][:11])
                if parsed is not None:
                    numbers.append(parsed[1])
    return numbers


def _stored(h: RecordHeader) -> StoredRecord:
    return StoredRecord(h.queue_id, h.seq, h.segment, h.offset, h.size, h.payload_len, h.lsn,
                        h.priority, h.expires_ms, record_flags(h.flags), h.tx_id)


_LSN = operator.attrgetter("lsn")
_TX = operator.attrgetter("tx_id")
_QUEUE = operator.attrgetter("queue_id")
_SEQ = operator.attrgetter("seq")


def _quarantine_range(ops: FileOps, data_dir: DataDir, segment: Segment, damage: Damage,
                      report: RecoveryReport) -> None:
    data_dir.quarantine.mkdir(exist_ok=True)
    name = f"{segment.path.name}-{damage.offset:08x}.bin"
    target = data_dir.quarantine / name
    fd = ops.open(target, create=True)
    try:
        ops.pwrite(fd, segment.read(damage.offset, damage.length), 0)
        ops.fdatasync(fd)
    finally:
        ops.close(fd)
    report.damaged.append(DamageReport(segment.path.name, damage.offset, damage.length,
                                       damage.reason))
    report.quarantined_files.append(name)
    recovery_log.warning("damaged record quarantined file=%s offset=%d length=%d reason=%s",
                         segment.path.name, damage.offset, damage.length, damage.reason)


def _quarantine_file(ops: FileOps, data_dir: DataDir, segment: Segment, reason: str,
                     report: RecoveryReport) -> None:
    report.damaged.append(DamageReport(segment.path.name, 0, segment.size, reason))
    segment.close()
    _move_to_quarantine(ops, data_dir, segment.path, report)


def _move_to_quarantine(ops: FileOps, data_dir: DataDir, path: Path,
                        report: RecoveryReport) -> None:
    data_dir.quarantine.mkdir(exist_ok=True)
    ops.rename(path, data_dir.quarantine / path.name)
    ops.fsync_dir(data_dir.storage)
    report.quarantined_files.append(path.name)
    recovery_log.warning("segment quarantined file=%s", path.name)

