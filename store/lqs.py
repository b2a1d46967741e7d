"""Queue registration files: ``lqs/nnnnnnnn.hhhhhhhh`` (docs/store.md §Files).

``nnnnnnnn`` is the queue number and ``hhhhhhhh`` a hash (CRC-32) of the lower-cased queue path,
both 8 hex digits; the content is INI text. Each file is written whole under a temporary name,
synced and renamed, so a crash leaves the old or the new file, never half of one.

The store reads two properties itself: ``quota`` (bytes, 0 = none) and ``journal_class``
(1 for journals and dead-letter queues: their messages count towards the machine journal
quota and live in ``j`` segments). Everything else belongs to the gateway.
"""

from __future__ import annotations

import configparser
import io
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from store.crc import crc32
from store.errors import DiskFull, StoreError
from store.fileops import FileOps
from store.space import is_full

__all__ = ["QueueInfo", "QueueRegistry", "lqs_name", "path_hash"]

_SECTION = "Properties"


def path_hash(path: str) -> int:
    return crc32(path.lower().encode())


def lqs_name(queue_id: int, path: str) -> str:
    return f"{queue_id:08x}.{path_hash(path):08x}"


@dataclass(frozen=True, slots=True)
class QueueInfo:
    queue_id: int
    path: str
    properties: dict[str, str] = field(default_factory=dict)

    @property
    def quota(self) -> int:
        raw = self.properties.get("quota", "0") or "0"
        return int(raw) if raw.isascii() and raw.isdigit() else 0  # damaged: no quota

    @property
    def journal_class(self) -> bool:
        return self.properties.get("journal_class", "0") == "1"


def _encode(info: QueueInfo) -> bytes:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser[_SECTION] = {"path": info.path, "queue_id": str(info.queue_id), **info.properties}
    out = io.StringIO()
    parser.write(out)
    return out.getvalue().encode()


def _decode(text: str) -> QueueInfo:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    values = dict(parser[_SECTION])
    path = values.pop("path")
    queue_id = int(values.pop("queue_id"))
    return QueueInfo(queue_id, path, values)


class QueueRegistry:
    """The registered queues; thread-safe (the gateway calls it from an executor)."""

    def __init__(self, ops: FileOps, directory: Path) -> None:
        self._ops = ops
        self._dir = directory
        self._lock = threading.Lock()
        self._by_id: dict[int, QueueInfo] = {}
        self._by_path: dict[str, int] = {}
        self.next_id = 1
        self.problems: list[str] = []

    def load(self, *, ids_in_use: set[int], ids_with_messages: set[int] | None = None) -> None:
        """Read every file; a bad one is reported and moved to ``quarantine/`` (never blocks
        start-up). Messages whose queue lost its registration this way are kept under a
        new one, ``private$/recovered_nnnnnnnn``, so they are served and can be moved."""
        damaged: list[Path] = []
        for path in sorted(self._dir.iterdir()):
            if path.name.endswith(".tmp"):
                self._ops.unlink(path)
                continue
            try:
                info = _decode(path.read_text(encoding="utf-8"))
            except (configparser.Error, KeyError, ValueError, UnicodeDecodeError) as exc:
                self.problems.append(f"lqs/{path.name}: unreadable ({exc})")
                damaged.append(path)
                continue
            if path.name != lqs_name(info.queue_id, info.path):
                self.problems.append(f"lqs/{path.name}: name does not match its content")
                damaged.append(path)
                continue
            self._by_id[info.queue_id] = info
            self._by_path[info.path.lower()] = info.queue_id
        self.next_id = max([0, *self._by_id, *ids_in_use]) + 1
        if damaged:
            quarantine = self._dir.parent / "quarantine"
            quarantine.mkdir(exist_ok=True)
            for path in damaged:
                self._ops.rename(path, quarantine / f"lqs-{path.name}")
            self._ops.fsync_dir(self._dir)
        for queue_id in sorted((ids_with_messages or set()) - set(self._by_id)):
            info = QueueInfo(queue_id, f"private$/recovered_{queue_id:08x}",
                             {"created_ms": str(int(time.time() * 1000)), "recovered": "1"})
            try:
                self._write(info)
            except DiskFull as exc:  # served from memory; the next start writes it
                self.problems.append(f"queue {queue_id}: registration not written: {exc}")
            self._by_id[queue_id] = info
            self._by_path[info.path.lower()] = queue_id
            self.problems.append(f"queue {queue_id}: registration lost; its messages are kept "
                                 f"as {info.path}")

    def get(self, queue_id: int) -> QueueInfo | None:
        return self._by_id.get(queue_id)

    def find(self, path: str) -> QueueInfo | None:
        queue_id = self._by_path.get(path.lower())
        return self._by_id.get(queue_id) if queue_id is not None else None

    def all(self) -> list[QueueInfo]:
        return sorted(self._by_id.values(), key=lambda q: q.queue_id)

    def create(self, path: str, properties: dict[str, str]) -> QueueInfo:
        """Register a queue durably. Blocking.

        Raises:
            StoreError: a queue with that path (case-insensitive) exists.
            DiskFull: no room for its file (nothing registered).
        """
        with self._lock:
            if path.lower() in self._by_path:
                raise StoreError(f"queue {path!r} already exists")
            info = QueueInfo(self.next_id, path, {"created_ms": str(int(time.time() * 1000)),
                                                  **properties})
            self._write(info)
            self.next_id += 1
            self._by_id[info.queue_id] = info
            self._by_path[path.lower()] = info.queue_id
            return info

    def update(self, queue_id: int, properties: dict[str, str]) -> QueueInfo:
        with self._lock:
            old = self._by_id[queue_id]
            info = QueueInfo(queue_id, old.path, {**old.properties, **properties})
            self._write(info)
            self._by_id[queue_id] = info
            return info

    def delete(self, queue_id: int) -> None:
        with self._lock:
            info = self._by_id.pop(queue_id)
            del self._by_path[info.path.lower()]
            self._ops.unlink(self._dir / lqs_name(queue_id, info.path))
            self._ops.fsync_dir(self._dir)

    def _write(self, info: QueueInfo) -> None:
        """Write the file whole (a temporary, synced, renamed over the old one).

        Raises:
            DiskFull: no room for the new file (the old one, if any, is left as it was).
            OSError: an I/O error.
        """
        target = self._dir / lqs_name(info.queue_id, info.path)
        building = target.with_name(target.name + ".tmp")
        try:
            fd = self._ops.open(building, create=True)
        except OSError as exc:
            if is_full(exc):
                raise _refusal(info, exc) from exc
            raise
        try:
            try:
                self._ops.truncate(fd, 0)
                self._ops.pwrite(fd, _encode(info), 0)
            except OSError as exc:
                self._ops.unlink(building)
                if is_full(exc):
                    raise _refusal(info, exc) from exc
                raise
            self._ops.fdatasync(fd)  # its error is an I/O error, full disk or not
        finally:
            self._ops.close(fd)
        self._ops.rename(building, target)
        self._ops.fsync_dir(self._dir)


def _refusal(info: QueueInfo, exc: OSError) -> DiskFull:
    return DiskFull(f"no room to register queue {info.path!r}: {exc.strerror or exc}")
