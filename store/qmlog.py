"""The QMLog file: a fixed-size cyclic log of transactional processing
(docs/store.md §Transactions).

Owned by the store's writer thread. Space between the last checkpoint's position and the write
position is still needed by recovery; ``free_bytes`` says how much may be written before a
checkpoint must move that position on.
"""

from __future__ import annotations

import struct
from pathlib import Path

from store.crc import crc32
from store.fileops import FileOps
from store.logcodec import (
    LOG_HEADER_SIZE,
    EntryKind,
    LogEntry,
    encode_entry,
    entry_size,
    replay,
)

__all__ = ["QMLog"]

_HEADER = struct.Struct("<8sQQ36xI")
_MAGIC = b"ENTRQLG1"
assert _HEADER.size == LOG_HEADER_SIZE


class QMLog:
    """The cyclic log; ``append`` then ``sync`` to make entries durable."""

    def __init__(self, ops: FileOps, path: Path, fd: int, size: int) -> None:
        self.ops = ops
        self.path = path
        self.fd = fd
        self.size = size
        self.write_pos = LOG_HEADER_SIZE
        self.keep_from = LOG_HEADER_SIZE  # checkpoint position: recovery starts here

    @classmethod
    def open(cls, ops: FileOps, path: Path, *, size: int, nonce: int) -> tuple[QMLog, bytes]:
        """Open (or create) the log; return it with its bytes for replay.

        The bytes of a log of another store (or with a damaged header) are not replayed. A log
        of another size (the setting changed) is still replayed; ``reset`` then re-sizes it.
        Recovery always ends with a checkpoint and ``reset``.
        """
        created = not path.exists()
        fd = ops.open(path, create=True)
        try:
            data = b"" if created else ops.pread(fd, ops.size(fd), 0)
            if created or not _header_ok(data, nonce=nonce):
                data = b""
            log = cls(ops, path, fd, size)
            if created:
                log.reset(nonce)
                ops.fsync_dir(path.parent)
            return log, data
        except BaseException:
            ops.close(fd)
            raise

    def reset(self, nonce: int) -> None:
        """Start a new lap at the configured size; only valid right after a checkpoint whose
        LSN is above every entry in the file (old entries then read as 'old')."""
        if self.ops.size(self.fd) > self.size:
            self.ops.truncate(self.fd, self.size)
        self.ops.allocate(self.fd, self.size)
        self.ops.pwrite(self.fd, _encode_header(self.size, nonce), 0)
        self.ops.fdatasync(self.fd)
        self.write_pos = LOG_HEADER_SIZE
        self.keep_from = LOG_HEADER_SIZE

    @staticmethod
    def replay(data: bytes, start: int, *, after_lsn: int) -> tuple[list[LogEntry], int]:
        return replay(data, start, after_lsn=after_lsn)

    def free_bytes(self) -> int:
        """Bytes that may be written before the entries recovery needs would be overwritten."""
        if self.write_pos >= self.keep_from:
            return (self.size - self.write_pos) + (self.keep_from - LOG_HEADER_SIZE)
        return self.keep_from - self.write_pos

    def append(self, entries: list[bytes], *, next_lsn: int) -> int:
        """Write entries at the write position, wrapping when the end is reached.

        ``next_lsn`` is used for a WRAP entry if one is needed; returns the LSNs consumed (0 or 1).
        """
        data = b"".join(entries)
        used = 0
        wrap_size = entry_size(0)
        if self.write_pos + len(data) + wrap_size > self.size:
            self.ops.pwrite(self.fd, encode_entry(EntryKind.WRAP, next_lsn), self.write_pos)
            self.write_pos = LOG_HEADER_SIZE
            used = 1
        assert self.write_pos + len(data) + wrap_size <= self.size, "entry larger than the log"
        self.ops.pwrite(self.fd, data, self.write_pos)
        self.write_pos += len(data)
        return used

    def sync(self) -> None:
        self.ops.fdatasync(self.fd)

    def close(self) -> None:
        self.ops.close(self.fd)


def _encode_header(size: int, nonce: int) -> bytes:
    head = _HEADER.pack(_MAGIC, nonce, size, 0)[:-4]
    return head + struct.pack("<I", crc32(head))


def _header_ok(data: bytes, *, nonce: int) -> bool:
    if len(data) < LOG_HEADER_SIZE:
        return False
    magic, stored_nonce, stored_size, crc = _HEADER.unpack_from(data, 0)
    return bool(magic == _MAGIC and stored_nonce == nonce and stored_size == len(data)
                and crc32(data[: LOG_HEADER_SIZE - 4]) == crc)
