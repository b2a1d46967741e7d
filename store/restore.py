"""Restore of a backup (store.backup) into an empty data directory.

A restore goes only into an empty (or absent) data directory. It verifies every file against
the manifest before copying, syncs what it wrote, and opens the store once (recovery) to verify
the records.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from store.backup import (
    FORMAT,
    MANIFEST,
    BackupError,
    Progress,
    copy_file,
    empty_target,
    fsync_tree,
    undo_copy,
)
from store.datadir import DataDir
from store.message_store import MessageStore
from store.options import StoreOptions

__all__ = ["restore", "RestoreReport"]

_CHUNK = 1 << 20


@dataclass(slots=True)
class RestoreReport:
    files: int = 0
    bytes: int = 0
    live_records: int = 0
    damaged: int = 0
    seconds: float = 0.0


def restore(src: Path, root: Path, options: StoreOptions,
            progress: Progress | None = None, beside: Sequence[str] = ()) -> RestoreReport:
    """Verify the backup in ``src`` and restore it into the empty data directory ``root``
    (``beside``: the files of the root a backup may hold, as ``store.backup.copy_storage``
    names them; the manifest may name no other file outside ``storage/``).

    Raises:
        BackupError: no manifest, a file missing or failing its checksum, or ``root`` not empty.
    """
    started = time.monotonic()
    files = _read_manifest(src, frozenset(beside))
    empty_target(root, "data directory")
    total = sum(int(str(meta["size"])) for meta in files.values())
    report = RestoreReport()
    for relative, meta in sorted(files.items()):
        source = src / relative
        if not source.is_file():
            raise BackupError(f"backup file {relative} is missing")
        digest, size = _hash(source)
        if digest != meta["sha256"] or size != meta["size"]:
            raise BackupError(f"backup file {relative} fails its checksum (damaged backup)")
    existed = root.exists()
    try:
        DataDir(root).lqs.mkdir(parents=True, exist_ok=True)
        for relative in sorted(files):
            target = root / relative
            copy_file(src / relative, target, report, total, progress)
            report.files += 1
        fsync_tree(root)
        # The restored store must open and recover: that verifies the records.
        store = MessageStore.open(root, options)
        try:
            report.live_records = sum(store.count(q) for q in store.queue_ids())
            report.damaged = len(store.recovery.damaged)
        finally:
            store.close()
    except BaseException:
        # A full disk, an I/O error, a store that will not open: no half-restored data
        # directory is left, to be started (or checked) as if it were whole.
        undo_copy(root, existed)
        raise
    report.seconds = time.monotonic() - started
    return report


def _read_manifest(src: Path, beside: frozenset[str]) -> dict[str, dict[str, object]]:
    try:
        manifest = json.loads((src / MANIFEST).read_text())
    except (OSError, ValueError) as exc:
        raise BackupError(f"{src}: no readable {MANIFEST} ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"{src}: unknown backup format")
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(isinstance(m, dict) for m in files.values()):
        raise BackupError(f"{src}: manifest lists no files")
    for relative in files:
        parts = Path(relative).parts
        if relative in beside:
            continue
        if Path(relative).is_absolute() or ".." in parts or parts[:1] != ("storage",):
            raise BackupError(f"{src}: manifest names a file outside storage/: {relative!r}")
    return files


def _hash(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as reader:
        while chunk := reader.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size
