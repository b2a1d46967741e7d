"""The store's only door to the file system: a small protocol, so tests can inject faults.

Fault tests implement ``FileOps`` with torn writes, bit flips, ENOSPC and EIO (see
``tests/fault/faulty_ops.py``) instead of patching ``os`` globally.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

__all__ = ["FileOps", "RealFileOps"]


class FileOps(Protocol):
    """Blocking file operations; every method may raise ``OSError``."""

    def open(self, path: Path, *, create: bool = False, exclusive: bool = False) -> int: ...

    def close(self, fd: int) -> None: ...

    def allocate(self, fd: int, length: int) -> None: ...

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> None: ...

    def pwritev(self, fd: int, buffers: Sequence[bytes | memoryview], offset: int) -> None: ...

    def pread(self, fd: int, length: int, offset: int) -> bytes: ...

    def fdatasync(self, fd: int) -> None: ...

    def open_synced(self, path: Path) -> int:
        """A second descriptor of an existing file whose writes return once durable
        (``O_DSYNC``): a write and its sync in one call (see ``store/runs.py``)."""
        ...

    def pwritev_synced(self, fd: int, buffers: Sequence[bytes | memoryview],
                       offset: int) -> None:
        """``pwritev`` on an ``open_synced`` descriptor: an error is a failed sync."""
        ...

    def fsync_dir(self, path: Path) -> None: ...

    def size(self, fd: int) -> int: ...

    def truncate(self, fd: int, length: int) -> None: ...

    def map_readonly(self, fd: int, length: int) -> mmap.mmap: ...

    def unlink(self, path: Path) -> None: ...

    def rename(self, source: Path, target: Path) -> None: ...


class RealFileOps:
    """``FileOps`` on the real file system."""

    def open(self, path: Path, *, create: bool = False, exclusive: bool = False) -> int:
        flags = os.O_RDWR | os.O_CLOEXEC
        if create:
            flags |= os.O_CREAT
        if exclusive:
            flags |= os.O_EXCL
        return os.open(path, flags, 0o600)

    def close(self, fd: int) -> None:
        os.close(fd)

    def allocate(self, fd: int, length: int) -> None:
        os.posix_fallocate(fd, 0, length)

    def pwrite(self, fd: int, data: bytes | memoryview, offset: int) -> None:
        view = memoryview(data)
        while view:
            written = os.pwrite(fd, view, offset)
            view = view[written:]
            offset += written

    def pwritev(self, fd: int, buffers: Sequence[bytes | memoryview], offset: int) -> None:
        total = sum(map(len, buffers))
        written = os.pwritev(fd, buffers, offset)
        if written < total:
            # Short write: finish the rest one buffer at a time.
            self.pwrite(fd, b"".join(buffers)[written:], offset + written)

    def pread(self, fd: int, length: int, offset: int) -> bytes:
        return os.pread(fd, length, offset)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)

    def open_synced(self, path: Path) -> int:
        return os.open(path, os.O_RDWR | os.O_DSYNC | os.O_CLOEXEC)

    def pwritev_synced(self, fd: int, buffers: Sequence[bytes | memoryview],
                       offset: int) -> None:
        self.pwritev(fd, buffers, offset)

    def fsync_dir(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def truncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)

    def map_readonly(self, fd: int, length: int) -> mmap.mmap:
        return mmap.mmap(fd, length, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ)

    def unlink(self, path: Path) -> None:
        os.unlink(path)

    def rename(self, source: Path, target: Path) -> None:
        os.rename(source, target)
