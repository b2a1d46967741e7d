"""Backup and restore of a data directory, with a manifest of SHA-256 checksums.

A backup is a directory: ``MANIFEST.json`` plus ``storage/`` as it was copied. It can be taken
offline (the directory is locked for the copy) or online from an open ``MessageStore``. Online,
checkpoints are held for the copy, so no space freed since the last checkpoint is reused; the
files are copied in the order recovery reads them (checkpoint, bitmaps, registrations,
segments, QMLog last). The copy then recovers like a crash at the moment the QMLog was read:
every message acknowledged before the backup started is in it, and no transaction shows in
part. Express (``r``) segments, ``archive/`` and ``quarantine/`` are not copied.

A restore goes only into an empty (or absent) data directory. It verifies every file against
the manifest before copying, syncs what it wrote, and opens the store once (recovery) to verify
the records.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from store.datadir import DataDir, lock_data_dir
from store.errors import StoreError
from store.options import StoreOptions
from store.segment import parse_segment_name

__all__ = ["BackupReport", "backup_offline", "copy_storage", "restore", "RestoreReport", "Progress",
           "MANIFEST", "BackupError"]

MANIFEST = "MANIFEST.json"
_FORMAT = 1
_CHUNK = 1 << 20

Progress = Callable[[int, int, str], None]  # bytes done, bytes total, current file


class BackupError(StoreError):
    """A backup or restore cannot go on: the target is not empty, or a file fails its check."""


@dataclass(slots=True)
class BackupReport:
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    manifest: dict[str, dict[str, object]] = field(default_factory=dict)


@dataclass(slots=True)
class RestoreReport:
    files: int = 0
    bytes: int = 0
    live_records: int = 0
    damaged: int = 0
    seconds: float = 0.0


def _order(storage: Path) -> list[Path]:
    """Files to copy, in the order recovery depends on."""
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
        if parsed is not None and parsed[0] in "pj":
            return 4, name
        return 5, name  # QMLog last

    files = [p for p in storage.iterdir() if p.is_file() and _wanted(p.name)]
    files += [p for p in (storage / "lqs").iterdir() if p.is_file() and not p.name.endswith(".tmp")]
    return sorted(files, key=rank)


def _wanted(name: str) -> bool:
    parsed = parse_segment_name(name)
    if parsed is not None:
        return parsed[0] in "pjl"
    return name == "QMLog" or name.startswith(("MQTrans.lg", "MQInSeqs.lg"))


def _empty_target(path: Path, what: str) -> None:
    if path.exists() and any(path.iterdir()):
        raise BackupError(f"{what} {path} is not empty")


def copy_storage(storage: Path, dest: Path, progress: Progress | None = None) -> BackupReport:
    """Copy ``storage`` into ``dest`` (which must be empty) and write the manifest.

    Raises:
        BackupError: ``dest`` is not empty.
        OSError: a read or write failed.
    """
    started = time.monotonic()
    _empty_target(dest, "backup destination")
    files = _order(storage)
    total = sum(p.stat().st_size for p in files)
    report = BackupReport()
    (dest / "storage" / "lqs").mkdir(parents=True, exist_ok=True)
    for path in files:
        relative = path.relative_to(storage.parent)
        digest, size = _copy(path, dest / relative, report, total, progress)
        report.manifest[str(relative)] = {"size": size, "sha256": digest}
        report.files += 1
    manifest = {"format": _FORMAT, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "files": report.manifest}
    (dest / MANIFEST).write_text(json.dumps(manifest, indent=1))
    _fsync_tree(dest)
    report.seconds = time.monotonic() - started
    return report


def backup_offline(root: Path, dest: Path, progress: Progress | None = None) -> BackupReport:
    """Back up a data directory no gateway has open.

    Raises:
        StoreLocked: a gateway has it open (back up through the gateway instead).
        BackupError, OSError: as ``copy_storage``.
    """
    lock = lock_data_dir(root)
    try:
        return copy_storage(lock.data_dir.storage, dest, progress)
    finally:
        lock.release()


def restore(src: Path, root: Path, options: StoreOptions,
            progress: Progress | None = None) -> RestoreReport:
    """Verify the backup in ``src`` and restore it into the empty data directory ``root``.

    Raises:
        BackupError: no manifest, a file missing or failing its checksum, or ``root`` not empty.
    """
    started = time.monotonic()
    files = _read_manifest(src)
    _empty_target(root, "data directory")
    total = sum(int(str(meta["size"])) for meta in files.values())
    report = RestoreReport()
    for relative, meta in sorted(files.items()):
        source = src / relative
        if not source.is_file():
            raise BackupError(f"backup file {relative} is missing")
        digest, size = _hash(source)
        if digest != meta["sha256"] or size != meta["size"]:
            raise BackupError(f"backup file {relative} fails its checksum (damaged backup)")
    DataDir(root).lqs.mkdir(parents=True, exist_ok=True)
    for relative in sorted(files):
        target = root / relative
        _copy(src / relative, target, report, total, progress)
        report.files += 1
    _fsync_tree(root)
    from store.message_store import MessageStore  # the restored store must open and recover

    store = MessageStore.open(root, options)
    try:
        report.live_records = sum(store.count(q) for q in store.queue_ids())
        report.damaged = len(store.recovery.damaged)
    finally:
        store.close()
    report.seconds = time.monotonic() - started
    return report


def _read_manifest(src: Path) -> dict[str, dict[str, object]]:
    try:
        manifest = json.loads((src / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise BackupError(f"{src}: no readable {MANIFEST} ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != _FORMAT:
        raise BackupError(f"{src}: unknown backup format")
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(isinstance(m, dict) for m in files.values()):
        raise BackupError(f"{src}: manifest lists no files")
    for relative in files:
        parts = Path(relative).parts
        if Path(relative).is_absolute() or ".." in parts or parts[:1] != ("storage",):
            raise BackupError(f"{src}: manifest names a file outside storage/: {relative!r}")
    return files


def _copy(source: Path, target: Path, report: BackupReport | RestoreReport, total: int,
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


def _hash(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as reader:
        while chunk := reader.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size


def _fsync_tree(root: Path) -> None:
    for directory, _, _ in os.walk(root):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

