"""One data segment file: created whole with ``posix_fallocate``, written with ``pwrite``, read
through a read-only shared ``mmap``.

Why pwrite and not writes through the mapping: a write error (EIO, ENOSPC) then arrives as an
exception instead of a SIGBUS, and nothing needs to touch pages before they are written. Reads go
through the mapping, so message bodies stay in the page cache, not in the Python heap.
"""

from __future__ import annotations

import mmap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from store.errors import out_of_descriptors
from store.fileops import FileOps
from store.framing import (
    SEGMENT_HEADER_SIZE,
    Damage,
    SegmentHeader,
    decode_segment_header,
    encode_segment_header,
)

__all__ = ["Segment", "segment_name", "parse_segment_name", "TEMP_SUFFIX"]

_IOV_MAX = 1024  # Linux's limit on buffers per pwritev (EINVAL beyond it)
TEMP_SUFFIX = ".tmp"  # a segment being created; never valid after a crash


def segment_name(kind: str, number: int) -> str:
    """``p0000001.mq``: the kind letter and seven hex digits, as MSMQ names its files."""
    assert kind in ("p", "j", "r", "l")
    assert 0 < number < 16**7
    return f"{kind}{number:07x}.mq"


def parse_segment_name(name: str) -> tuple[str, int] | None:
    if len(name) != 11 or not name.endswith(".mq") or name[0] not in "pjrl":
        return None
    try:
        number = int(name[1:8], 16)
    except ValueError:
        return None
    return (name[0], number) if number > 0 else None


class Segment:
    """An open data segment. Not thread-safe: the store's writer thread owns writes."""

    def __init__(self, ops: FileOps, path: Path, fd: int, header: SegmentHeader,
                 mapped_bytes: int) -> None:
        self.ops = ops
        self.path = path
        self.fd = fd
        self.header = header
        self._map: mmap.mmap | None = ops.map_readonly(fd, mapped_bytes)
        self.view = memoryview(self._map)
        self.mapped_bytes = mapped_bytes
        self._synced_fd: int | None = None  # opened on the first write_synced

    @property
    def kind(self) -> str:
        return self.header.kind

    @property
    def number(self) -> int:
        return self.header.number

    @property
    def size(self) -> int:
        return self.header.size

    @classmethod
    def create(cls, ops: FileOps, directory: Path, *, kind: str, number: int, size: int,
               nonce: int, generation: int = 1) -> Segment:
        """Allocate the whole file, write its header, and make both durable before use.

        The file is built under a temporary name and renamed into place, so a crash never
        leaves a segment without its header (recovery deletes ``*.tmp`` leftovers).

        Raises:
            OSError: ENOSPC from the allocation (nothing is left behind) or any I/O error.
        """
        path = directory / segment_name(kind, number)
        building = path.with_name(path.name + TEMP_SUFFIX)
        fd = ops.open(building, create=True)
        try:
            ops.allocate(fd, size)
            header = SegmentHeader(kind, number, generation, nonce, size,
                                   int(time.time() * 1000))
            # Allocated, not zero-filled: writing a whole segment of zeros would stall the
            # writer thread for every new segment, and doubles the bytes written.
            ops.pwrite(fd, encode_segment_header(header), 0)
            ops.fdatasync(fd)
            ops.rename(building, path)
            ops.fsync_dir(directory)
        except BaseException:
            ops.close(fd)
            if building.exists():
                ops.unlink(building)
            raise
        return cls(ops, path, fd, header, size)

    @classmethod
    def open(cls, ops: FileOps, path: Path) -> Segment | Damage:
        """Open an existing segment; a bad header is returned as ``Damage``, not raised."""
        fd = ops.open(path)
        try:
            file_size = ops.size(fd)
            found = decode_segment_header(ops.pread(fd, SEGMENT_HEADER_SIZE, 0))
            if isinstance(found, Damage):
                ops.close(fd)
                return found
            if file_size < found.size:
                # Truncated from outside: map only what exists (reading past it would SIGBUS).
                mapped = file_size - file_size % 4096
                if mapped < SEGMENT_HEADER_SIZE:
                    ops.close(fd)
                    return Damage(0, file_size, "segment truncated to less than its header")
                return cls(ops, path, fd, found, mapped)
            return cls(ops, path, fd, found, found.size)
        except BaseException:
            ops.close(fd)
            raise

    def write(self, offset: int, buffers: Sequence[bytes | memoryview], total: int) -> None:
        """Write adjacent buffers of ``total`` bytes from ``offset``, in ``pwritev`` calls of
        at most IOV_MAX buffers (the caller knows the total: it is not summed here again, on
        the writer thread)."""
        assert offset >= SEGMENT_HEADER_SIZE
        assert offset + total <= self.mapped_bytes
        _pwritev_all(self.ops.pwritev, self.fd, buffers, offset)

    def write_synced(self, offset: int, buffers: Sequence[bytes | memoryview],
                     total: int) -> None:
        """``write`` and its ``sync`` in one call per IOV_MAX buffers (an ``O_DSYNC``
        descriptor): the caller's thread holds no GIL from the write to the durable end."""
        assert offset >= SEGMENT_HEADER_SIZE
        assert offset + total <= self.mapped_bytes
        fd = self._synced_fd
        if fd is None:
            try:
                fd = self._synced_fd = self.ops.open_synced(self.path)
            except OSError as exc:
                if not out_of_descriptors(exc):
                    raise
                # No descriptor to spare (a connection flood, a low limit): the same write,
                # synced on the segment's own descriptor; the next one tries again.
                self.write(offset, buffers, total)
                self.sync()
                return
        _pwritev_all(self.ops.pwritev_synced, fd, buffers, offset)

    def close_synced(self) -> None:
        """Close the ``O_DSYNC`` descriptor (idempotent; the next ``write_synced`` reopens)."""
        if self._synced_fd is not None:
            self.ops.close(self._synced_fd)
            self._synced_fd = None

    def write_byte(self, offset: int, value: int) -> None:
        assert SEGMENT_HEADER_SIZE <= offset < self.mapped_bytes
        self.ops.pwrite(self.fd, bytes((value,)), offset)

    def sync(self) -> None:
        self.ops.fdatasync(self.fd)

    def read(self, offset: int, length: int) -> bytes:
        return bytes(self.view[offset: offset + length])

    def close(self) -> None:
        self.close_synced()
        if self._map is not None:
            self.view.release()
            self._map.close()
            self._map = None
            self.ops.close(self.fd)


def _pwritev_all(pwritev: Callable[[int, Sequence[bytes | memoryview], int], None], fd: int,
                 buffers: Sequence[bytes | memoryview], offset: int) -> None:
    """``pwritev`` of adjacent buffers, IOV_MAX at a time (Linux refuses more in one call)."""
    if len(buffers) <= _IOV_MAX:
        pwritev(fd, buffers, offset)
        return
    for start in range(0, len(buffers), _IOV_MAX):
        chunk = buffers[start: start + _IOV_MAX]
        pwritev(fd, chunk, offset)
        offset += sum(map(len, chunk))
