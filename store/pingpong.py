"""A pair of files written alternately (``MQTrans.lg1``/``.lg2``, ``MQInSeqs.lg1``/``.lg2``), so
that one copy is always whole: a crash can tear only the copy being written.

Each copy: magic, sequence number, payload length, CRC-32, payload. At open the valid copy with
the higher sequence number wins; the next write goes to the other one.

Once ``reserve`` ran, both copies are allocated at ``capacity`` (``store.space``): a write
goes over blocks that are already there, so it needs no new space, and the pair grows ahead
of need (to twice what a write used, when a write used more than half of it).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from store.crc import crc32
from store.errors import DiskFull, StoreBusy, out_of_descriptors
from store.fileops import FileOps
from store.space import Reserve, is_full, reserve_file

__all__ = ["PingPong", "encode_copy", "decode_copy"]

_HEADER = struct.Struct("<4sQII")
_MAGIC = b"EPP1"
CAPACITY_MIN = 64 << 10  # per copy


def encode_copy(sequence: int, payload: bytes) -> bytes:
    head = _HEADER.pack(_MAGIC, sequence, len(payload), 0)[:-4]
    crc = crc32(payload, crc32(head))
    return head + struct.pack("<I", crc) + payload


def decode_copy(data: bytes) -> tuple[int, bytes] | None:
    """``(sequence, payload)``, or None when the copy is missing, torn or damaged."""
    if len(data) < _HEADER.size:
        return None
    magic, sequence, length, crc = _HEADER.unpack_from(data, 0)
    payload = data[_HEADER.size: _HEADER.size + length]
    if magic != _MAGIC or len(payload) != length:
        return None
    if crc32(payload, crc32(data[: _HEADER.size - 4])) != crc:
        return None
    return sequence, payload


@dataclass(slots=True)
class PingPong:
    """Both copies of one pair; ``write`` replaces the older copy and syncs it."""

    ops: FileOps
    paths: tuple[Path, Path]
    sequence: int = 0
    next_index: int = 0
    capacity: int = 0  # bytes allocated in each copy; 0: not reserved (written as it goes)
    reserve: Reserve | None = None
    short: bool = False  # the last attempt to grow failed: the pair has less headroom

    @classmethod
    def load(cls, ops: FileOps, directory: Path, stem: str) -> tuple[PingPong, bytes | None, int]:
        """Read both copies; return the pair, the newest valid payload and how many were bad."""
        paths = (directory / f"{stem}.lg1", directory / f"{stem}.lg2")
        found: list[tuple[int, int, bytes]] = []
        bad = 0
        for index, path in enumerate(paths):
            if not path.exists():
                continue
            data = path.read_bytes()
            if not data.strip(b"\0"):
                continue  # allocated ahead and never written: missing, not damaged
            decoded = decode_copy(data)
            if decoded is None:
                bad += 1
                continue
            found.append((decoded[0], index, decoded[1]))
        if not found:
            return cls(ops, paths), None, bad
        sequence, index, payload = max(found)
        return cls(ops, paths, sequence, 1 - index), payload, bad

    def reserve_space(self, reserve: Reserve | None, payload_size: int = 0) -> None:
        """Allocate both copies (creating them) with room for ``payload_size`` twice over,
        at least ``CAPACITY_MIN``; ``reserve`` is given up when the pair must grow later and
        the disk is full.

        Raises:
            OSError: ENOSPC when there is no room (then the pair is written as it goes,
                as before it was reserved), or an I/O error.
        """
        self.reserve = reserve
        self._grow(max(CAPACITY_MIN, _rounded(2 * (_HEADER.size + payload_size))))

    def make_room(self, payload_size: int) -> None:
        """Grow a reserved pair, if needed, so a copy of ``payload_size`` bytes fits in it
        (a checkpoint calls it before writing anything).

        Raises:
            DiskFull: it must grow and cannot, even with the reserve given up.
            OSError: an I/O error.
        """
        needed = _HEADER.size + payload_size
        if self.capacity == 0 or needed <= self.capacity:
            return
        try:
            self._grow_or_release(_rounded(2 * needed))
        except OSError as exc:
            if not is_full(exc):
                raise
            raise DiskFull(f"no room to grow {self.paths[0].stem} to {2 * needed} bytes a "
                           "copy") from exc

    def open_next(self) -> tuple[int, bool]:
        """The next copy's file, opened (created when missing): (fd, created). A checkpoint
        opens it before it changes anything, so that a process out of file descriptors
        finds out while nothing has changed.

        Raises:
            StoreBusy: no file descriptor for it (EMFILE, ENFILE).
            OSError: an I/O error.
        """
        path = self.paths[self.next_index]
        created = not path.exists()
        try:
            return self.ops.open(path, create=True), created
        except OSError as exc:
            if out_of_descriptors(exc):
                raise StoreBusy(f"{path.name} not written now: {exc}") from exc
            raise

    def write(self, payload: bytes, opened: tuple[int, bool] | None = None) -> None:
        """Write the next copy over the older one and make it durable; then, on a reserved
        pair with less than half of it left, grow it (a full disk only sets ``short``).
        ``opened``: the copy's file from ``open_next``, closed here whatever happens.

        Raises:
            DiskFull: the copy does not fit and the pair cannot grow (nothing written).
            StoreBusy: no file descriptor for the copy (nothing written).
            OSError: an I/O error.
        """
        try:
            self.make_room(len(payload))
        except BaseException:
            if opened is not None:
                self.ops.close(opened[0])
            raise
        fd, created = opened if opened is not None else self.open_next()
        path = self.paths[self.next_index]
        self.sequence += 1
        try:
            self.ops.pwrite(fd, encode_copy(self.sequence, payload), 0)
            self.ops.fdatasync(fd)
        finally:
            self.ops.close(fd)
        if created:
            self.ops.fsync_dir(path.parent)
        self.next_index = 1 - self.next_index
        wanted = _rounded(2 * (_HEADER.size + len(payload)))
        if self.capacity:
            if wanted > self.capacity:
                try:
                    self._grow_or_release(wanted)
                except OSError as exc:
                    if not is_full(exc):
                        raise
                    self.short = True
            else:
                self.short = False

    def _grow_or_release(self, capacity: int) -> None:
        try:
            self._grow(capacity)
        except OSError as exc:
            if not is_full(exc) or self.reserve is None or not self.reserve.release():
                raise
            self._grow(capacity)

    def _grow(self, capacity: int) -> None:
        """Allocate both copies to ``capacity``; the bytes of the copies stay as they are."""
        for path in self.paths:
            created = not path.exists()
            fd = self.ops.open(path, create=True)
            try:
                reserve_file(self.ops, fd, capacity)
            finally:
                self.ops.close(fd)
            if created:
                self.ops.fsync_dir(path.parent)
        self.capacity = max(self.capacity, capacity)
        self.short = False


def _rounded(size: int) -> int:
    return -(-size // 4096) * 4096
