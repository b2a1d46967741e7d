"""Restore of a backup (store.backup) into an empty data directory.

A restore goes only into an empty (or absent) data directory. It verifies every file against
the manifest before copying, syncs what it wrote, and opens the store once (recovery) to verify
the records.
"""

from __future__ import annotations

import hashlib
import json
import re
import stat
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
_HEX = re.compile(r"[0-9a-f]{64}")


@dataclass(slots=True)
class RestoreReport:
    files: int = 0
    bytes: int = 0
    live_records: int = 0
    damaged: int = 0
    seconds: float = 0.0
    # False: the disk has no room left for the store's space reserve, so a gateway started
    # on it refuses new messages until room is made.
    reserve_whole: bool = True


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
    _check_target(src, root)
    empty_target(root, "data directory")
    total = sum(int(str(meta["size"])) for meta in files.values())  # checked: integers
    report = RestoreReport()
    for relative, meta in sorted(files.items()):
        source = src / relative
        if not source.is_file():
            raise BackupError(f"backup file {relative} is {_instead(source)}")
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
            report.reserve_whole = store.space_reserve_whole
        finally:
            store.close()
    except BaseException:
        # A full disk, an I/O error, a store that will not open: no half-restored data
        # directory is left, to be started (or checked) as if it were whole.
        undo_copy(root, existed)
        raise
    report.seconds = time.monotonic() - started
    return report


def _instead(path: Path) -> str:
    """What stands where a backup file should be: nothing, or what is not a file."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "missing (a symlink to nothing)" if path.is_symlink() else "missing"
    except OSError as exc:
        return f"unreadable ({exc.strerror or type(exc).__name__})"
    if stat.S_ISDIR(mode):
        return "a directory, not a file"
    return "a device, socket or pipe, not a file"


def _read_manifest(src: Path, beside: frozenset[str]) -> dict[str, dict[str, object]]:
    """The manifest's files, by their path in the backup (``storage/...``, or a name of
    ``beside``), each with an integer ``size`` and a hex ``sha256``.

    Raises:
        BackupError: not a manifest this version wrote, a file outside those, a path given
            twice (``storage/./x``), or no store in it.
    """
    try:
        manifest = json.loads((src / MANIFEST).read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise BackupError(f"{src}: no readable {MANIFEST} ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError(f"{src}: unknown backup format")
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(isinstance(m, dict) for m in files.values()):
        raise BackupError(f"{src}: manifest lists no files")
    seen: set[Path] = set()
    for relative, meta in files.items():
        parts = Path(relative).parts
        if relative not in beside and (Path(relative).is_absolute() or ".." in parts
                                       or parts[:1] != ("storage",)):
            raise BackupError(f"{src}: manifest names a file outside storage/: {relative!r}")
        if Path(relative) in seen or Path(relative) != Path(*parts) or relative != str(
                Path(relative)):
            raise BackupError(f"{src}: manifest names {relative!r} twice or not plainly")
        seen.add(Path(relative))
        size, digest = meta.get("size"), meta.get("sha256")
        if (not isinstance(size, int) or isinstance(size, bool) or size < 0
                or not isinstance(digest, str) or not _HEX.fullmatch(digest)):
            raise BackupError(f"{src}: manifest entry {relative!r} has no size and sha256")
    if not any(name.startswith(("storage/MQTrans.", "storage/QMLog")) for name in files):
        raise BackupError(f"{src}: manifest lists no store (no checkpoint, no QMLog)")
    return files


def _check_target(src: Path, root: Path) -> None:
    """Raises: BackupError when ``root`` is inside the backup, or inside a data directory
    (a store in a store: a running gateway's own files would hold a copy of itself)."""
    target = root.resolve()
    if target.is_relative_to(src.resolve()):
        raise BackupError(f"data directory {root} is inside the backup {src}")
    for parent in target.parents:
        if DataDir(parent).storage.is_dir() and DataDir(parent).lock_file.exists():
            raise BackupError(f"data directory {root} is inside the data directory {parent}")


def _hash(path: Path) -> tuple[str, int]:
    digest = hashlib.sha256()
    size = 0
    with open(path, "rb") as reader:
        while chunk := reader.read(_CHUNK):
            digest.update(chunk)
            size += len(chunk)
    return digest.hexdigest(), size
