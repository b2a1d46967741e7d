"""Audit of the storage folder (docs/store.md §Check and audit: deleting, editing or adding
any file under the storage folder generates an audit entry).

Every file operation of the store goes through ``AuditingFileOps``, which remembers the paths
the store itself touched, and which it is touching right now. A pass lists ``storage/``
(recursively), then takes those paths, compares each file's inode, size and modification time
with the previous pass, and writes a JSON line to ``<data dir>/audit.log`` for every
difference the store did not cause. Touches are kept for two passes and operations in flight
always count, so a write landing between two listings, or stalled across passes, is never
blamed on others.

Between runs the listing is kept in ``<data dir>/audit.state``. At start the files are compared
with it: after a clean stop every difference is reported; after a crash (the state may be up to
one pass old) only files that vanished or were replaced are, and not those the store itself
replaced or removed since the state was saved: each such change is noted in
``<data dir>/audit.ours`` before it is made (a line per file, dropped once a saved state has
it).
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from store.datadir import DataDir
from store.fileops import FileOps
from store.logs import audit_log
from store.segment import parse_segment_name
from store.space import is_full

__all__ = ["AuditingFileOps", "Auditor", "AuditEvent"]

Listing = dict[str, tuple[int, int, int]]  # relative path -> (inode, size, mtime_ns)


class AuditingFileOps:
    """``FileOps`` that remembers which files the store changed, and which it is changing."""

    def __init__(self, inner: FileOps) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self._fd_paths: dict[int, Path] = {}
        self.touched: set[Path] = set()
        self._inflight: dict[Path, int] = {}
        # The store's own replacements and removals since the last saved state, as
        # (path under storage/, the new inode or None): set up by the Auditor.
        self.ours: _Ours | None = None

    def _begin(self, path: Path | None) -> None:
        """Mark ``path`` touched and in flight until ``_end`` (a write stalled across audit
        passes still counts as the store's). Plain calls, not a context manager: the writer
        thread makes one per commit, on the commit path."""
        if path is not None:
            with self._lock:
                self.touched.add(path)
                self._inflight[path] = self._inflight.get(path, 0) + 1

    def _end(self, path: Path | None) -> None:
        if path is not None:
            with self._lock:
                self.touched.add(path)
                left = self._inflight[path] - 1
                if left:
                    self._inflight[path] = left
                else:
                    del self._inflight[path]

    def _on_fd(self, fd: int, operation: Callable[..., None], *args: Any) -> None:
        """``operation(*args)`` on the file open as ``fd``, marked touched around it."""
        path = self._fd_paths.get(fd)
        self._begin(path)
        try:
            operation(*args)
        finally:
            self._end(path)

    @contextlib.contextmanager
    def _touching(self, *paths: Path | None) -> Iterator[None]:
        """``_begin`` / ``_end`` around an operation on ``paths`` (the rarer operations)."""
        for path in paths:
            self._begin(path)
        try:
            yield
        finally:
            for path in paths:
                self._end(path)

    def take_touched(self) -> set[Path]:
        """Everything touched since the last call, plus what is being written right now."""
        with self._lock:
            touched, self.touched = self.touched, set()
            return touched | set(self._inflight)

    def open(self, path: Path, *, create: bool = False, exclusive: bool = False) -> int:
        with self._touching(path if create else None):
            fd = self._inner.open(path, create=create, exclusive=exclusive)
        self._fd_paths[fd] = path
        return fd

    def close(self, fd: int) -> None:
        self._fd_paths.pop(fd, None)
        self._inner.close(fd)

    def allocate(self, fd: int, length: int) -> None:
        self._on_fd(fd, self._inner.allocate, fd, length)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> None:
        self._on_fd(fd, self._inner.pwrite, fd, data, offset)

    def pwritev(self, fd: int, buffers: Sequence[bytes | memoryview], offset: int) -> None:
        self._on_fd(fd, self._inner.pwritev, fd, buffers, offset)

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        return self._inner.pread(fd, length, offset)

    def fdatasync(self, fd: int) -> None:
        self._on_fd(fd, self._inner.fdatasync, fd)

    def open_synced(self, path: Path) -> int:
        fd = self._inner.open_synced(path)
        self._fd_paths[fd] = path
        return fd

    def pwritev_synced(self, fd: int, buffers: Sequence[bytes | memoryview],
                       offset: int) -> None:
        self._on_fd(fd, self._inner.pwritev_synced, fd, buffers, offset)

    def fsync_dir(self, path: Path) -> None:
        self._inner.fsync_dir(path)

    def size(self, fd: int) -> int:
        return self._inner.size(fd)

    def truncate(self, fd: int, length: int) -> None:
        self._on_fd(fd, self._inner.truncate, fd, length)

    def map_readonly(self, fd: int, length: int) -> mmap.mmap:
        return self._inner.map_readonly(fd, length)

    def unlink(self, path: Path) -> None:
        if self.ours is not None:
            self.ours.note(path, None)
        with self._touching(path):
            self._inner.unlink(path)

    def rename(self, source: Path, target: Path) -> None:
        if self.ours is not None:
            with contextlib.suppress(FileNotFoundError):  # then the rename fails too
                self.ours.note(target, os.stat(source).st_ino)
        with self._touching(source, target):
            self._inner.rename(source, target)
        for fd, path in list(self._fd_paths.items()):
            if path == source:
                self._fd_paths[fd] = target


_WARN_EVERY_S = 60.0


class _Ours:
    """``<data dir>/audit.ours``: the store's own replacements and removals that a saved
    state does not have yet, one JSON line each ``[path under storage/, inode or null]``."""

    def __init__(self, path: Path, storage: Path) -> None:
        self._path = path
        self._storage = storage
        self._lock = threading.Lock()
        self._warned = -_WARN_EVERY_S  # (monotonic) when a failed write was last logged

    def _failed(self, exc: OSError) -> None:
        """Under ``_lock``: a failed write, logged at most once a minute (out of descriptors,
        every segment the store tries to make fails here first)."""
        now = time.monotonic()
        if now - self._warned >= _WARN_EVERY_S:
            self._warned = now
            audit_log.warning("audit.ours not written: %s", exc)

    def note(self, file: Path, inode: int | None) -> None:
        """Before the store replaces (``inode`` the new file's) or removes ``file``."""
        if not file.is_relative_to(self._storage):
            return  # the audit looks at storage/ only
        line = json.dumps([str(file.relative_to(self._storage)), inode]) + "\n"
        with self._lock:
            try:
                with open(self._path, "a", encoding="utf-8") as out:
                    out.write(line)
            except OSError as exc:  # advisory, as the audit is: a false report at worst
                self._failed(exc)

    def load(self) -> set[tuple[str, int | None]]:
        try:
            lines = self._path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return set()
        noted: set[tuple[str, int | None]] = set()
        for line in lines:
            with contextlib.suppress(ValueError, TypeError):  # a line cut by a crash
                file, inode = json.loads(line)
                noted.add((str(file), None if inode is None else int(inode)))
        return noted

    def keep_after(self, listing: Listing) -> None:
        """Drop what ``listing`` (being saved) has: a replaced file with that inode, a
        removed one absent from it; what came after the listing stays."""
        with self._lock:
            left = [(file, inode) for file, inode in self.load()
                    if (listing[file][0] != inode if file in listing else inode is not None)]
            try:
                self._path.write_text("".join(json.dumps([f, i]) + "\n" for f, i in left),
                                      encoding="utf-8")
            except OSError as exc:
                self._failed(exc)


@dataclass(frozen=True, slots=True)
class AuditEvent:
    file: str
    change: str  # added | removed | replaced | modified
    detail: str


class Auditor:
    """Passes over ``storage/``; events go to ``audit.log``."""

    def __init__(self, data_dir: DataDir, ops: AuditingFileOps) -> None:
        self._data_dir = data_dir
        self._ops = ops
        self._listing: Listing = {}
        self._recent: set[Path] = set()
        self.events_total = 0
        self._ours = _Ours(data_dir.root / "audit.ours", data_dir.storage)
        ops.ours = self._ours

    def check_at_start(self) -> list[AuditEvent]:
        """Compare the files with the state saved by the previous run (before recovery)."""
        state_path = self._data_dir.root / "audit.state"
        try:
            state = json.loads(state_path.read_text())
            previous: Listing = {k: (int(v[0]), int(v[1]), int(v[2]))
                                 for k, v in state["files"].items()}
            clean = bool(state["clean"])
        except (OSError, ValueError, KeyError, TypeError):
            return []  # first start (or no usable state): nothing to compare with
        listing = self._list()
        if state.get("storage", self._identity()) != self._identity():
            # storage/ is another directory than the one audited last: the data directory
            # was copied (cp -a, rsync, a restore of a file-level backup). Every file has a
            # new inode, so they are compared by size and modification time only.
            audit_log.info("storage/ was copied or moved since the last run: its files are "
                           "compared by size and modification time")
            previous = {k: (0, size, mtime) for k, (_, size, mtime) in previous.items()}
            listing = {k: (0, size, mtime) for k, (_, size, mtime) in listing.items()}
        events = _diff(previous, listing, lambda _: False)
        if not clean:
            ours = self._ours.load()
            events = [e for e in events if e.change in ("removed", "replaced")
                      and (e.file, listing[e.file][0] if e.file in listing else None)
                      not in ours]
        self._record(events)
        return events

    def baseline(self) -> None:
        """Take the listing the next pass compares with (after the store's own start-up)."""
        self._listing = self._list()
        self._recent = self._ops.take_touched()

    def run_every(self, interval_s: float, stop: threading.Event) -> None:
        """Audit passes every ``interval_s`` until ``stop`` is set (the store's audit thread).
        The audit is advisory: a pass that fails is logged, never stops the store."""
        while not stop.wait(interval_s):
            try:
                self.run_pass()
                self.save_state(clean=False)
            except OSError as exc:
                audit_log.warning("audit pass failed: %s", exc)

    def run_pass(self) -> list[AuditEvent]:
        # List first, then take what the store touched: a write that starts during the
        # listing is then counted as the store's in this pass.
        listing = self._list()
        touched = self._ops.take_touched()
        blamed = touched | self._recent
        root = self._data_dir.storage
        events = _diff(self._listing, listing, lambda name: root / name in blamed)
        self._recent = touched
        self._listing = listing
        self._record(events)
        return events

    def save_state(self, *, clean: bool) -> None:
        target = self._data_dir.root / "audit.state"
        building = target.with_name("audit.state.tmp")
        try:
            building.write_text(json.dumps({"clean": clean, "storage": self._identity(),
                                            "files": self._listing}))
        except OSError as exc:  # a full disk: the store's data comes first, the audit after
            building.unlink(missing_ok=True)
            if not is_full(exc):
                raise
            audit_log.warning("audit state not saved: %s", exc)
            return
        os.replace(building, target)
        self._ours.keep_after(self._listing)

    def _identity(self) -> list[int]:
        """Which directory storage/ is (device, inode): a copy is another one."""
        st = os.stat(self._data_dir.storage)
        return [st.st_dev, st.st_ino]

    def _list(self) -> Listing:
        listing: Listing = {}
        root = self._data_dir.storage
        for directory, _, names in os.walk(root):
            for name in names:
                path = Path(directory) / name
                try:
                    st = path.stat()
                except FileNotFoundError:
                    continue
                listing[str(path.relative_to(root))] = (st.st_ino, st.st_size, st.st_mtime_ns)
        return listing

    def _record(self, events: list[AuditEvent]) -> None:
        if not events:
            return
        self.events_total += len(events)
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for event in events:
            audit_log.warning("storage file changed from outside file=%s change=%s %s",
                              event.file, event.change, event.detail)
        try:
            with open(self._data_dir.audit_log, "a", encoding="utf-8") as log:
                for event in events:
                    log.write(json.dumps({"time": now, "file": event.file,
                                          "change": event.change,
                                          "detail": event.detail}) + "\n")
        except OSError as exc:  # a full disk: the events are in the gateway's log above
            if not is_full(exc):
                raise
            audit_log.warning("audit.log not written: %s", exc)


def _diff(before: Listing, after: Listing, ours: Callable[[str], bool]) -> list[AuditEvent]:
    events: list[AuditEvent] = []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if ours(name) and not _resized_segment(name, old, new):
            continue
        if old is None and new is not None:
            events.append(AuditEvent(name, "added", f"size={new[1]}"))
        elif old is not None and new is None:
            events.append(AuditEvent(name, "removed", f"size was {old[1]}"))
        elif old is not None and new is not None and old != new:
            if old[0] != new[0]:
                events.append(AuditEvent(name, "replaced", f"inode {old[0]} -> {new[0]}"))
            else:
                events.append(AuditEvent(name, "modified", f"size {old[1]} -> {new[1]}"))
    return events


def _resized_segment(name: str, old: tuple[int, int, int] | None,
                     new: tuple[int, int, int] | None) -> bool:
    """A data segment never changes size once it has its name: whoever resized it, not us."""
    parsed = parse_segment_name(Path(name).name)
    return (parsed is not None and parsed[0] in "pjr" and old is not None and new is not None
            and old[0] == new[0] and old[1] != new[1])
