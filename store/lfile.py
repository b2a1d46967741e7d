"""``lNNNNNNN.mq``: the checkpointed allocation bitmap of data segment NNNNNNN.

Two slots, written alternately, each a complete encoded bitmap with its checkpoint epoch and
CRC. A checkpoint writes the slot that the last durable checkpoint does not use, so a crash in
the middle of a checkpoint never touches the copy recovery needs. Recovery uses the valid slot
with the highest epoch not above the checkpoint it recovers from.

An ``l`` file is allocated at both slots when its segment is made (``create``): a checkpoint
rewrites blocks that are already there and never needs new space (``store.space``).
"""

from __future__ import annotations

from pathlib import Path

from store.bitmap import GranuleBitmap
from store.fileops import FileOps
from store.space import reserve_file

__all__ = ["LFile"]

_ALIGN = 4096


class LFile:
    """An open ``l`` file; the writer thread owns it."""

    def __init__(self, ops: FileOps, path: Path, fd: int, segment_size: int) -> None:
        self.ops = ops
        self.path = path
        self.fd = fd
        self.segment_size = segment_size
        self.slot_size = -(-GranuleBitmap.encoded_size(segment_size) // _ALIGN) * _ALIGN
        self.durable_slot = -1  # the slot the last durable checkpoint relies on
        self.written_slot = -1  # the slot the checkpoint in progress wrote

    @classmethod
    def open(cls, ops: FileOps, path: Path, segment_size: int) -> LFile:
        created = not path.exists()
        fd = ops.open(path, create=True)
        if created:
            ops.fsync_dir(path.parent)
        return cls(ops, path, fd, segment_size)

    @classmethod
    def create(cls, ops: FileOps, path: Path, segment_size: int) -> LFile:
        """Open ``path`` with both slots allocated; on any error nothing is left behind.

        Raises:
            OSError: ENOSPC when there is no room, or an I/O error.
        """
        existed = path.exists()
        lfile = cls.open(ops, path, segment_size)
        try:
            lfile.reserve()
        except BaseException:
            lfile.close()
            if not existed:
                ops.unlink(path)
            raise
        return lfile

    def reserve(self) -> None:
        """Allocate both slots (nothing to do when they are).

        Raises:
            OSError: ENOSPC when there is no room, or an I/O error.
        """
        reserve_file(self.ops, self.fd, 2 * self.slot_size)

    def read_best(self, max_epoch: int) -> tuple[int, GranuleBitmap] | None:
        """The valid slot with the highest epoch <= ``max_epoch``; it becomes the durable one."""
        best: tuple[int, GranuleBitmap] | None = None
        for slot in (0, 1):
            data = self.ops.pread(self.fd, self.slot_size, slot * self.slot_size)
            decoded = GranuleBitmap.decode(data, self.segment_size)
            if decoded and decoded[0] <= max_epoch and (best is None or decoded[0] > best[0]):
                best = decoded
                self.durable_slot = slot
        return best

    def write(self, epoch: int, bitmap: GranuleBitmap) -> None:
        """Write ``bitmap`` at ``epoch`` into the slot the durable checkpoint does not use."""
        slot = 1 if self.durable_slot == 0 else 0
        data = bitmap.encode(epoch)
        self.ops.pwrite(self.fd, data + bytes(self.slot_size - len(data)), slot * self.slot_size)
        self.ops.fdatasync(self.fd)
        self.written_slot = slot

    def checkpoint_done(self) -> None:
        """The checkpoint that wrote this file is durable: its slot is now the one to keep."""
        if self.written_slot >= 0:
            self.durable_slot = self.written_slot
            self.written_slot = -1

    def close(self) -> None:
        self.ops.close(self.fd)
