"""A pair of files written alternately (``MQTrans.lg1``/``.lg2``, ``MQInSeqs.lg1``/``.lg2``), so
that one copy is always whole: a crash can tear only the copy being written.

Each copy: magic, sequence number, payload length, CRC-32, payload. At open the valid copy with
the higher sequence number wins; the next write goes to the other one.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from store.crc import crc32
from store.fileops import FileOps

__all__ = ["PingPong", "encode_copy", "decode_copy"]

_HEADER = struct.Struct("<4sQII")
_MAGIC = b"EPP1"


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

    @classmethod
    def load(cls, ops: FileOps, directory: Path, stem: str) -> tuple[PingPong, bytes | None, int]:
        """Read both copies; return the pair, the newest valid payload and how many were bad."""
        paths = (directory / f"{stem}.lg1", directory / f"{stem}.lg2")
        found: list[tuple[int, int, bytes]] = []
        bad = 0
        for index, path in enumerate(paths):
            if not path.exists():
                continue
            decoded = decode_copy(path.read_bytes())
            if decoded is None:
                bad += 1
                continue
            found.append((decoded[0], index, decoded[1]))
        if not found:
            return cls(ops, paths), None, bad
        sequence, index, payload = max(found)
        return cls(ops, paths, sequence, 1 - index), payload, bad

    def write(self, payload: bytes) -> None:
        """Write the next copy over the older one and make it durable."""
        self.sequence += 1
        path = self.paths[self.next_index]
        created = not path.exists()
        fd = self.ops.open(path, create=True)
        try:
            self.ops.pwrite(fd, encode_copy(self.sequence, payload), 0)
            self.ops.fdatasync(fd)
        finally:
            self.ops.close(fd)
        if created:
            self.ops.fsync_dir(path.parent)
        self.next_index = 1 - self.next_index
