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
        self.eio_on_fdatasync = False
        self.torn_write_bytes: int | None = None  # next pwritev writes this much, then "dies"
        self.torn_on_pwrite = False  # the torn write is the next pwrite (not pwritev)
        self.syncs = 0
        self._lock = threading.Lock()

    def allocate(self, fd: int, length: int) -> None:
        if self.enospc_on_allocate:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        super().allocate(fd, length)

    def fdatasync(self, fd: int) -> None:
        with self._lock:
            self.syncs += 1
        if self.eio_on_fdatasync:
            raise OSError(errno.EIO, "Input/output error (injected)")
        super().fdatasync(fd)

    def pwritev_synced(self, fd: int, buffers: Sequence[bytes | memoryview],
                       offset: int) -> None:
        """A write that is its own sync: torn like a ``pwritev``, failing like a sync."""
        if self.torn_write_bytes is not None and not self.torn_on_pwrite:
            self.pwritev(fd, buffers, offset)  # raises SimulatedCrash
        with self._lock:
            self.syncs += 1
        if self.eio_on_fdatasync:
            raise OSError(errno.EIO, "Input/output error (injected)")
        super().pwritev_synced(fd, buffers, offset)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> None:
        if self.torn_on_pwrite and self.torn_write_bytes is not None:
            kept = bytes(data)[: self.torn_write_bytes]
            self.torn_write_bytes = None
            self.torn_on_pwrite = False
            super().pwrite(fd, kept, offset)
            raise SimulatedCrash("torn write")
        super().pwrite(fd, data, offset)

    def pwritev(self, fd: int, buffers: Sequence[bytes | memoryview], offset: int) -> None:
        if self.torn_write_bytes is not None and not self.torn_on_pwrite:
            data = b"".join(buffers)[: self.torn_write_bytes]
            self.torn_write_bytes = None
            super().pwrite(fd, data, offset)
            raise SimulatedCrash("torn write")
        super().pwritev(fd, buffers, offset)

    def open(self, path: Path, *, create: bool = False, exclusive: bool = False) -> int:
        return super().open(path, create=create, exclusive=exclusive)
