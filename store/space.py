"""Disk space the store's own bookkeeping needs, taken ahead so a full disk never reaches it.

Why: a checkpoint, a queue's removal or a stream position written on a full disk must not
meet ENOSPC, or a full disk would stop reads and removals along with new data. So every file
the store rewrites in place is allocated whole (``posix_fallocate``) and written once with
zeros before it is needed: ``l`` files at their two slots when their segment is made, the
ping-pong pairs at a capacity with room to grow, the QMLog at its size. Rewriting allocated
and written blocks needs no new space on any filesystem (also not the extent conversion of
fallocated-but-unwritten blocks, which is why they are written once).

What still needs new space is new data: a segment, a queue's registration, a ping-pong pair
outgrowing its capacity. The first two are refused (``DiskFull``) when there is none. For the
third, ``Reserve`` keeps a preallocated file, ``<data dir>/reserve``, given up when a pair
must grow and cannot; the store then refuses new data until the reserve is whole again.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path

from store.fileops import FileOps
from store.logs import commit_log

__all__ = ["RESERVE_BYTES", "Reserve", "is_full", "reserve_file"]

RESERVE_BYTES = 1 << 20  # several growths of the checkpoint pairs (64 KiB per copy at first)
_ZEROS = bytes(64 << 10)


def is_full(exc: BaseException) -> bool:
    """An error that means the volume (or the user's disk quota) has no room."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def reserve_file(ops: FileOps, fd: int, length: int) -> None:
    """Allocate ``fd`` up to ``length`` bytes and write zeros over what it adds, durably;
    bytes already in the file are left as they are. Nothing to do when it is that long.

    Raises:
        OSError: ENOSPC/EDQUOT when there is no room (nothing in the file changed but its
            allocation), or an I/O error.
    """
    start = ops.size(fd)
    if start >= length:
        return
    ops.allocate(fd, length)
    offset = start
    while offset < length:
        chunk = min(len(_ZEROS), length - offset)
        ops.pwrite(fd, _ZEROS[:chunk] if chunk < len(_ZEROS) else _ZEROS, offset)
        offset += chunk
    ops.fdatasync(fd)


class Reserve:
    """``<data dir>/reserve``: space held for the store's bookkeeping; thread-safe."""

    def __init__(self, ops: FileOps, path: Path, size: int = RESERVE_BYTES) -> None:
        self._ops = ops
        self.path = path
        self.size = size
        self._lock = threading.Lock()
        self.whole = False

    def refill(self) -> bool:
        """Make the reserve whole if there is room; whether it is."""
        with self._lock:
            if self.whole:
                return True
            created = not self.path.exists()
            fd = self._ops.open(self.path, create=True)
            try:
                reserve_file(self._ops, fd, self.size)
                self.whole = True
            except OSError as exc:
                if not is_full(exc):
                    raise
                commit_log.warning("disk full: the %d-byte space reserve is not whole (%s)",
                                   self.size, exc)
            finally:
                self._ops.close(fd)
            if created:
                self._ops.fsync_dir(self.path.parent)
            return self.whole

    def release(self) -> bool:
        """Give the reserved space back to the filesystem (for bookkeeping that must grow);
        False when there was none to give."""
        with self._lock:
            if not self.path.exists() or self.path.stat().st_size == 0:
                return False
            fd = self._ops.open(self.path)
            try:
                self._ops.truncate(fd, 0)
                self._ops.fdatasync(fd)
            finally:
                self._ops.close(fd)
            self.whole = False
            commit_log.warning("disk full: space reserve released for the store's "
                               "bookkeeping; new data is refused until it is whole again")
            return True
