"""Backup of a data directory, with a manifest of SHA-256 checksums (restore: store.restore).

A backup is a directory: ``MANIFEST.json`` plus ``storage/`` as it was copied, and the files of
the data directory's root its caller names (``beside``: what the store's records depend on
outside it, copied right after the QMLog). It can be taken offline (the directory is locked
for the copy) or online from an open ``MessageStore``. Online,
checkpoints are held for the copy, so no space freed since the last checkpoint is reused, and
the files are copied in this order: checkpoint, bitmaps, registrations, the QMLog, then the
segments, listed once the QMLog is copied. A transaction's records are durable before its
outcome (commit, abort, prepare) is logged, so every outcome the copied QMLog holds finds its
records in the segments copied after it; records whose outcome came later have none in the
copy and recover as unfinished (dead), as after a crash at the moment the QMLog was read.
Every message acknowledged before the backup started is in it, and no transaction shows in
part. Express (``r``) segments, ``archive/`` and ``quarantine/`` are not copied.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from store.datadir import lock_data_dir
from store.errors import StoreError
from store.segment import parse_segment_name

__all__ = ["BackupReport", "backup_offline", "copy_storage", "Progress", "MANIFEST", "FORMAT",
           "BackupError", "BackupInside", "copy_file", "empty_target", "fsync_tree", "Counts",
           "undo_copy"]

MANIFEST = "MANIFEST.json"
FORMAT = 1
_CHUNK = 1 << 20

Progress = Callable[[int, int, str], None]  # bytes done, bytes total, current file


class Counts(Protocol):
    """A report that counts the bytes copied (a backup's or a restore's)."""

    bytes: int


class BackupError(StoreError):
    """A backup or restore cannot go on: the target is not empty, or a file fails its check."""


class BackupInside(BackupError):
    """The backup's destination is inside the data directory it copies (it would be lost
    with it, and its files would be copied into themselves or audited as strangers)."""


@dataclass(slots=True)
class BackupReport:
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    manifest: dict[str, dict[str, object]] = field(default_factory=dict)


def _order(storage: Path) -> tuple[list[Path], Callable[[], list[Path]]]:
    """The files recovery starts from (checkpoint, stream positions, bitmaps, registrations,
    QMLog last), in that order; and how to list the segments, once those are copied."""
    def rank(path: Path) -> tuple[int, str]:
        name = path.name
        parsed = parse_segment_name(name)
        if name.startswith("MQTrans."):
            return 0, name
        if name.startswith("MQInSeqs."):
            return 1, name
        if parsed is not None and parsed[0] == "l":
            return 2, name
        if path.parent.name == "lqs":
            return 3, name
        return 4, name  # QMLog last

    def segments() -> list[Path]:
        return sorted(p for p in storage.iterdir() if p.is_file() and _is_segment(p.name))

    files = [p for p in storage.iterdir()
             if p.is_file() and _wanted(p.name) and not _is_segment(p.name)]
    files += [p for p in (storage / "lqs").iterdir() if p.is_file() and not p.name.endswith(".tmp")]
    return sorted(files, key=rank), segments


def _is_segment(name: str) -> bool:
    """A message segment (``p``: recoverable, ``j``: journal), not a bitmap."""
    parsed = parse_segment_name(name)
    return parsed is not None and parsed[0] in "pj"


def _wanted(name: str) -> bool:
    parsed = parse_segment_name(name)
    if parsed is not None:
        return parsed[0] in "pjl"
    return name == "QMLog" or name.startswith(("MQTrans.lg", "MQInSeqs.lg"))


def empty_target(path: Path, what: str) -> None:
    if path.exists() and any(path.iterdir()):
        raise BackupError(f"{what} {path} is not empty")


def copy_storage(storage: Path, dest: Path, progress: Progress | None = None,
                 beside: Sequence[str] = ()) -> BackupReport:
    """Copy ``storage`` into ``dest`` (which must be empty), with those of the files named
    ``beside`` that the data directory holds (after the QMLog), and write the manifest.

    Raises:
        BackupError: ``dest`` is not empty.
        OSError: a read or write failed.
    """
    started = time.monotonic()
    root = storage.parent.resolve()
    if dest.resolve().is_relative_to(root):
        raise BackupInside(f"backup destination {dest} is inside the data directory {root}: "
                           "a backup must live elsewhere (it would be lost with it)")
    empty_target(dest, "backup destination")
    existed = dest.exists()
    first, segments = _order(storage)
    # The files beside the store right after the QMLog: a transaction prepared by then has
    # its entry there (written before the store prepares), and one that ends meanwhile keeps
    # it while a running gateway backs up (gateway.queues.tx_names).
    first += [path for name in beside if (path := storage.parent / name).is_file()]
    total = sum(p.stat().st_size for p in first + segments())  # the segments as they are now
    report = BackupReport()

    def copy(path: Path) -> None:
        relative = path.relative_to(storage.parent)
        digest, size = copy_file(path, dest / relative, report, total, progress)
        report.manifest[str(relative)] = {"size": size, "sha256": digest}
        report.files += 1

    try:
        (dest / "storage" / "lqs").mkdir(parents=True, exist_ok=True)
        for path in first:
            copy(path)
        for path in segments():  # listed now: one made during the copy is in it too
            copy(path)
        manifest = {"format": FORMAT,
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "files": report.manifest}
        (dest / MANIFEST).write_text(json.dumps(manifest, indent=1))
        fsync_tree(dest)
    except BaseException:
        # A full disk, an I/O error, an interrupt: no half backup is left to be taken for a
        # whole one (nor to make the next attempt find DEST not empty).
        undo_copy(dest, existed)
        raise
    report.seconds = time.monotonic() - started
    return report


def undo_copy(target: Path, existed: bool) -> None:
    """Remove what a backup or restore wrote into ``target``, which was empty (or absent:
    then ``target`` too) when it began."""
    if not existed:
        shutil.rmtree(target, ignore_errors=True)
        return
    with contextlib.suppress(OSError):
        for entry in target.iterdir():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


def backup_offline(root: Path, dest: Path, progress: Progress | None = None,
                   beside: Sequence[str] = ()) -> BackupReport:
    """Back up a data directory no gateway has open (``beside``: as ``copy_storage``).

    Raises:
        StoreLocked: a gateway has it open (back up through the gateway instead).
        BackupError, OSError: as ``copy_storage``.
    """
    lock = lock_data_dir(root)
    try:
        return copy_storage(lock.data_dir.storage, dest, progress, beside)
    finally:
        lock.release()


def copy_file(source: Path, target: Path, report: Counts, total: int,
          progress: Progress | None) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(source, "rb") as reader, open(target, "wb") as writer:
        while chunk := reader.read(_CHUNK):
            writer.write(chunk)
            digest.update(chunk)
            size += len(chunk)
            report.bytes += len(chunk)
            if progress is not None:
                progress(report.bytes, total, source.name)
        writer.flush()
        os.fsync(writer.fileno())
    return digest.hexdigest(), size


def fsync_tree(root: Path) -> None:
    for directory, _, _ in os.walk(root):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

