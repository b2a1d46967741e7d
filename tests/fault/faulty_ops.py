"""``FileOps`` with faults switched on by the test: ENOSPC, EIO on sync, torn writes."""

from __future__ import annotations

import errno
import threading
from collections.abc import Sequence
from pathlib import Path

from store.fileops import RealFileOps


class SimulatedCrash(Exception):
    """The process 'died' in the middle of a write: what reached the file stays there."""


class FaultyFileOps(RealFileOps):
    def __init__(self) -> None:
        self.enospc_on_allocate = False
        # Bytes left on a small disk (None: no limit). A file growing takes from it (an
        # allocation or a write past its end; past the rest: ENOSPC), a file shrinking or
        # unlinked gives back; writes over a file's bytes need none.
        self.free: int | None = None
        self.full_refusals = 0
        self.eio_on_fdatasync = False
        self.torn_write_bytes: int | None = None  # next pwritev writes this much, then "dies"
        self.torn_on_pwrite = False  # the torn write is the next pwrite (not pwritev)
        self.syncs = 0
        # Opening a file whose name starts with this fails as a process out of file
        # descriptors fails (EMFILE).
        self.emfile_opening: str | None = None
        self._lock = threading.Lock()

    def allocate(self, fd: int, length: int) -> None:
        if self.enospc_on_allocate:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        self._room(fd, length)
        super().allocate(fd, length)

    def _room(self, fd: int, end: int) -> None:
        if self.free is None:
            return
        grows = end - self.size(fd)
        with self._lock:
            if grows > self.free:
                self.full_refusals += 1
                raise OSError(errno.ENOSPC, "No space left on device (injected: disk full)")
            if grows > 0:
                self.free -= grows

    def truncate(self, fd: int, length: int) -> None:
        shrinks = self.size(fd) - length
        super().truncate(fd, length)
        if self.free is not None and shrinks > 0:
            with self._lock:
                self.free += shrinks

    def unlink(self, path: Path) -> None:
        size = path.stat().st_size
        super().unlink(path)
        if self.free is not None:
            with self._lock:
                self.free += size

    def fdatasync(self, fd: int) -> None:
        with self._lock:
            self.syncs += 1
        if self.eio_on_fdatasync:
            raise OSError(errno.EIO, "Input/output error (injected)")
        super().fdatasync(fd)

    def pwritev_synced(self, fd: int, buffers: Sequence[bytes | memoryview],
                       offset: int) -> None:
        """A write that is its own sync: torn like a ``pwritev``, failing like a sync."""
        self._room(fd, offset + sum(map(len, buffers)))
        if self.torn_write_bytes is not None and not self.torn_on_pwrite:
            self.pwritev(fd, buffers, offset)  # raises SimulatedCrash
        with self._lock:
            self.syncs += 1
        if self.eio_on_fdatasync:
            raise OSError(errno.EIO, "Input/output error (injected)")
        super().pwritev_synced(fd, buffers, offset)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> None:
        self._room(fd, offset + len(data))
        if self.torn_on_pwrite and self.torn_write_bytes is not None:
            kept = bytes(data)[: self.torn_write_bytes]
            self.torn_write_bytes = None
            self.torn_on_pwrite = False
            super().pwrite(fd, kept, offset)
            raise SimulatedCrash("torn write")
        super().pwrite(fd, data, offset)

    def pwritev(self, fd: int, buffers: Sequence[bytes | memoryview], offset: int) -> None:
        self._room(fd, offset + sum(map(len, buffers)))
        if self.torn_write_bytes is not None and not self.torn_on_pwrite:
            data = b"".join(buffers)[: self.torn_write_bytes]
            self.torn_write_bytes = None
            super().pwrite(fd, data, offset)
            raise SimulatedCrash("torn write")
        super().pwritev(fd, buffers, offset)

    def open(self, path: Path, *, create: bool = False, exclusive: bool = False) -> int:
        self._emfile(path)
        return super().open(path, create=create, exclusive=exclusive)

    def open_synced(self, path: Path) -> int:
        self._emfile(path)
        return super().open_synced(path)

    def _emfile(self, path: Path) -> None:
        if self.emfile_opening is not None and path.name.startswith(self.emfile_opening):
            raise OSError(errno.EMFILE, "Too many open files (injected)", str(path))
