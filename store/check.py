"""Offline verification of a data directory (``entrepot check``): read-only, never repairs.

It finds records exactly as recovery would (checkpoint bitmaps, chains, or a full scan) and
verifies each one's checksum, then reports every damaged range, bad segment header, bad copy
of a ping-pong checkpoint and problem with the QMLog header. The directory must not be in use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from store.datadir import DataDir, lock_data_dir
from store.fileops import FileOps, RealFileOps
from store.pingpong import PingPong
from store.startup import (
    DamageReport,
    RecoveryReport,
    checkpoint_bitmap,
    find_segment_records,
    load_checkpoint,
    open_segments,
)

__all__ = ["CheckReport", "check_data_dir"]

Progress = Callable[[int, int, str], None]


@dataclass(slots=True)
class CheckReport:
    segments: int = 0
    records: int = 0
    bytes_checked: int = 0
    checkpoint_epoch: int | None = None
    full_scans: int = 0
    damaged: list[DamageReport] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.damaged and not self.problems

    def as_dict(self) -> dict[str, object]:
        return {
            "ok": self.ok, "segments": self.segments, "records": self.records,
            "bytes_checked": self.bytes_checked, "checkpoint_epoch": self.checkpoint_epoch,
            "full_scans": self.full_scans,
            "damaged": [{"file": d.file, "offset": d.offset, "length": d.length,
                         "reason": d.reason} for d in self.damaged],
            "problems": self.problems,
        }


def check_data_dir(root: Path, *, ops: FileOps | None = None,
                   progress: Progress | None = None) -> CheckReport:
    """Verify every record under ``root``. Blocking.

    Raises:
        StoreLocked: a gateway has the directory open.
        StoreUnusable: it cannot be read.
    """
    ops = ops or RealFileOps()
    lock = lock_data_dir(root)
    try:
        return _check(ops, lock.data_dir, progress)
    finally:
        lock.release()


def _check(ops: FileOps, data_dir: DataDir, progress: Progress | None) -> CheckReport:
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
    total = len(segments)
    for index, (number, segment) in enumerate(sorted(segments.items()), 1):
        try:
            bitmap = checkpoint_bitmap(ops, data_dir, segment, checkpoint)
            if checkpoint is not None and number in checkpoint.segments and bitmap is None:
                report.problems.append(f"{segment.path.name}: no valid bitmap in its l file")
            headers, damaged, full = find_segment_records(segment, bitmap, checkpoint)
            report.records += len(headers)
            report.full_scans += full
            report.bytes_checked += segment.mapped_bytes
            report.damaged.extend(DamageReport(segment.path.name, d.offset, d.length, d.reason)
                                  for d in damaged)
        finally:
            segment.close()
        report.segments += 1
        if progress is not None:
            progress(index, total, segment.path.name)
    return report
