"""Offline verification of a data directory (``entrepot check``): read-only, never repairs.

It finds records exactly as recovery would (checkpoint bitmaps, chains, or a full scan) and
verifies each one's checksum, then reports every damaged range, bad segment header, bad copy
of a ping-pong checkpoint and problem with the QMLog header. The directory must not be in use.

Given ``readers`` (queue path -> a function of a record's payload), it also reads every record
of those queues that recovery would keep live — the same resolution of record states and
QMLog entries — and reports each one its reader refuses: the gateway passes the readers of its
internal queues, and so learns which records its next start would set aside.
"""

from __future__ import annotations

import configparser
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# The underscored helpers are recovery's and the registry's own (private to this package):
# check decides what is live, and which queue a record is in, exactly as a start does.
from store.datadir import DataDir, lock_data_dir
from store.fileops import FileOps, RealFileOps
from store.framing import RecordHeader
from store.lqs import _decode, lqs_name
from store.mqtrans import Checkpoint
from store.pingpong import PingPong
from store.qmlog import _header_ok
from store.recovery import resolve
from store.segment import Segment
from store.startup import (
    DamageReport,
    RecoveryReport,
    _choose_nonce,
    _log_entries,
    checkpoint_bitmap,
    find_segment_records,
    load_checkpoint,
    open_segments,
)

__all__ = ["CheckReport", "RecordReader", "Refused", "check_data_dir"]

Progress = Callable[[int, int, str], None]
# A record's payload -> why its reader refuses it, or None when it reads it.
RecordReader = Callable[[bytes], str | None]


@dataclass(frozen=True, slots=True)
class Refused:
    """A live record its queue's reader cannot read."""

    queue: str
    seq: int
    reason: str


@dataclass(slots=True)
class CheckReport:
    segments: int = 0
    records: int = 0
    bytes_checked: int = 0
    checkpoint_epoch: int | None = None
    full_scans: int = 0
    damaged: list[DamageReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    refused: list[Refused] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.damaged and not self.problems and not self.refused

    def as_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok, "segments": self.segments, "records": self.records,
            "bytes_checked": self.bytes_checked, "checkpoint_epoch": self.checkpoint_epoch,
            "full_scans": self.full_scans,
            "damaged": [{"file": d.file, "offset": d.offset, "length": d.length,
                         "reason": d.reason} for d in self.damaged],
            "problems": self.problems,
            "quarantine": [{"queue": r.queue, "seq": r.seq, "reason": r.reason}
                           for r in self.refused],
        }


def check_data_dir(root: Path, *, ops: FileOps | None = None,
                   progress: Progress | None = None,
                   readers: Mapping[str, RecordReader] | None = None) -> CheckReport:
    """Verify every record under ``root``, and read the live ones of the queues ``readers``
    names (paths, case-insensitive). Blocking.

    Raises:
        StoreLocked: a gateway has the directory open.
        StoreUnusable: it cannot be read.
    """
    ops = ops or RealFileOps()
    lock = lock_data_dir(root)
    try:
        return _check(ops, lock.data_dir, progress, readers or {})
    finally:
        lock.release()


def _check(ops: FileOps, data_dir: DataDir, progress: Progress | None,
           readers: Mapping[str, RecordReader]) -> CheckReport:
    report = CheckReport()
    storage = data_dir.storage
    _, payload, bad_copies = PingPong.load(ops, storage, "MQTrans")
    if bad_copies:
        report.problems.append(f"MQTrans: {bad_copies} damaged copy(ies) (the other is used)")
    _, _, bad_seqs = PingPong.load(ops, storage, "MQInSeqs")
    if bad_seqs:
        report.problems.append(f"MQInSeqs: {bad_seqs} damaged copy(ies) (the other is used)")
    checkpoint = load_checkpoint(payload, 0)
    if payload is not None and checkpoint is None:
        report.problems.append("MQTrans: unreadable checkpoint (a start rebuilds in full)")
    report.checkpoint_epoch = checkpoint.epoch if checkpoint else None
    opening = RecoveryReport()
    segments = open_segments(ops, data_dir, opening, quarantine=False)
    report.damaged.extend(opening.damaged)
    paths = _registered(data_dir.lqs, {path.lower() for path in readers})
    by_path = {path.lower(): reader for path, reader in readers.items()}
    # Records the resolution needs: those of the queues read, and members of grouped commits
    # (a group is live only when every member, of any queue, is found).
    kept: list[RecordHeader] = []
    total = len(segments)
    try:
        for index, (number, segment) in enumerate(sorted(segments.items()), 1):
            bitmap = checkpoint_bitmap(ops, data_dir, segment, checkpoint)
            if checkpoint is not None and number in checkpoint.segments and bitmap is None:
                report.problems.append(f"{segment.path.name}: no valid bitmap in its l file")
            headers, damaged, full = find_segment_records(segment, bitmap, checkpoint)
            report.records += len(headers)
            report.full_scans += full
            report.bytes_checked += segment.mapped_bytes
            report.damaged.extend(DamageReport(segment.path.name, d.offset, d.length, d.reason)
                                  for d in damaged)
            if paths:
                kept += [h for h in headers if h.queue_id in paths or h.group]
            report.segments += 1
            if progress is not None:
                progress(index, total, segment.path.name)
        if paths:
            report.refused = _refused(ops, data_dir, segments, checkpoint, kept, paths, by_path)
    finally:
        for segment in segments.values():
            segment.close()
    return report


def _registered(directory: Path, wanted: set[str]) -> dict[int, str]:
    """queue id -> path of the registered queues whose path (lower-cased) is in ``wanted``,
    read as ``QueueRegistry.load`` reads them (a file it would set aside names no queue) but
    without its repairs."""
    found: dict[int, str] = {}
    if not wanted or not directory.is_dir():
        return found
    for path in sorted(directory.iterdir()):
        if path.name.endswith(".tmp"):
            continue
        try:
            info = _decode(path.read_text(encoding="utf-8"))
        except (configparser.Error, KeyError, ValueError, UnicodeDecodeError):
            continue
        if path.name == lqs_name(info.queue_id, info.path) and info.path.lower() in wanted:
            found[info.queue_id] = info.path
    return found


def _refused(ops: FileOps, data_dir: DataDir, segments: dict[int, Segment],
             checkpoint: Checkpoint | None, found: list[RecordHeader], paths: dict[int, str],
             readers: Mapping[str, RecordReader]) -> list[Refused]:
    """Each record recovery would keep live in a queue of ``paths`` that its reader refuses,
    in queue and sequence order."""
    nonce = _choose_nonce(checkpoint, segments)
    ours = {number for number, segment in segments.items() if segment.header.nonce == nonce}
    log_path = data_dir.storage / "QMLog"
    log_bytes = b""
    if log_path.exists():
        fd = ops.open(log_path)
        try:
            log_bytes = ops.pread(fd, ops.size(fd), 0)
        finally:
            ops.close(fd)
        if not _header_ok(log_bytes, nonce=nonce):  # another store's log: a start ignores it
            log_bytes = b""
    resolution = resolve([h for h in found if h.segment in ours],
                         _log_entries(log_bytes, checkpoint),
                         checkpoint.prepared if checkpoint else {})
    refused = []
    for header in resolution.live:
        path = paths.get(header.queue_id)
        if path is None:
            continue
        raw = segments[header.segment].read(header.payload_offset, header.payload_len)
        reason = readers[path.lower()](raw)
        if reason is not None:
            refused.append(Refused(path, header.seq, reason))
    return sorted(refused, key=lambda r: (r.queue, r.seq))
