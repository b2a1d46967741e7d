"""The allocation bitmap of one segment: one bit per 64-byte granule (pure: no I/O).

This is what the ``l`` file holds (docs/store.md §Files): which areas of a ``p`` or ``j``
segment hold live records and which are free. Bit set = occupied. The first granule (the
segment header) is always set. Encoded with a small header and CRC so a checkpoint slot can
be verified.
"""

from __future__ import annotations

import array
import struct
import sys
from collections.abc import Iterator

from store.crc import crc32
from store.framing import GRANULE, SEGMENT_HEADER_SIZE

__all__ = ["GranuleBitmap", "BITMAP_HEADER_SIZE"]

_HEADER = struct.Struct("<4sIQI")  # magic, granules, epoch, crc (over header[:-4] + bits)
_MAGIC = b"EBM1"
BITMAP_HEADER_SIZE = _HEADER.size
_ALL = (1 << 64) - 1


class GranuleBitmap:
    """Occupied/free granules of one segment."""

    __slots__ = ("_bits", "granules")

    def __init__(self, segment_size: int, bits: bytes | None = None) -> None:
        assert segment_size % GRANULE == 0
        self.granules = segment_size // GRANULE
        nbytes = (self.granules + 7) // 8
        if bits is None:
            self._bits = bytearray(nbytes)
            self.set_range(0, SEGMENT_HEADER_SIZE, occupied=True)
        else:
            assert len(bits) == nbytes
            self._bits = bytearray(bits)

    def copy(self) -> GranuleBitmap:
        return GranuleBitmap(self.granules * GRANULE, bytes(self._bits))

    def is_occupied(self, offset: int) -> bool:
        granule = offset // GRANULE
        return bool(self._bits[granule >> 3] & (1 << (granule & 7)))

    def set_range(self, offset: int, length: int, *, occupied: bool) -> None:
        """Mark ``[offset, offset + length)``; both must be granule-aligned."""
        assert offset % GRANULE == 0
        assert length % GRANULE == 0
        assert offset + length <= self.granules * GRANULE
        first = offset // GRANULE
        last = first + length // GRANULE  # exclusive
        if first == last:
            return
        bits = self._bits
        first_byte, last_byte = first >> 3, (last - 1) >> 3
        head = (0xFF << (first & 7)) & 0xFF
        tail = 0xFF >> (7 - ((last - 1) & 7))
        if first_byte == last_byte:
            mask = head & tail
            bits[first_byte] = bits[first_byte] | mask if occupied else bits[first_byte] & ~mask
            return
        # Masks for the ragged ends, whole bytes in between.
        if occupied:
            bits[first_byte] |= head
            bits[last_byte] |= tail
        else:
            bits[first_byte] &= ~head & 0xFF
            bits[last_byte] &= ~tail & 0xFF
        if last_byte > first_byte + 1:
            fill = b"\xff" if occupied else b"\x00"
            bits[first_byte + 1: last_byte] = fill * (last_byte - first_byte - 1)

    def runs(self, *, occupied: bool) -> Iterator[tuple[int, int]]:
        """Maximal ``(offset, end)`` byte ranges that are all occupied (or all free).

        Walks 64 granules at a time (recovery asks this of every segment twice; a walk per
        granule or per byte was several ms a segment), bit tricks inside mixed words.
        """
        total = self.granules
        words = array.array("Q")
        words.frombytes(bytes(self._bits) + bytes(-len(self._bits) % 8))
        if sys.byteorder != "little":
            words.byteswap()
        flip = 0 if occupied else _ALL
        start = -1
        for index, word in enumerate(words):
            word ^= flip  # now 1 = wanted
            if word == _ALL:
                if start < 0:
                    start = index << 6
                continue
            if word == 0 and start < 0:
                continue
            base = index << 6
            bit = 0
            while bit < 64:
                rest = (word if start < 0 else ~word & _ALL) >> bit
                if not rest:
                    break
                bit += (rest & -rest).bit_length() - 1
                if start < 0:
                    start = base + bit
                else:
                    yield start * GRANULE, (base + bit) * GRANULE
                    start = -1
        if 0 <= start < total:
            yield start * GRANULE, total * GRANULE

    def occupied_bytes(self) -> int:
        return sum(bin(byte).count("1") for byte in self._bits) * GRANULE

    def encode(self, epoch: int) -> bytes:
        head = _HEADER.pack(_MAGIC, self.granules, epoch, 0)[:-4]
        crc = crc32(bytes(self._bits), crc32(head))
        return head + struct.pack("<I", crc) + bytes(self._bits)

    @staticmethod
    def decode(data: bytes | memoryview, segment_size: int) -> tuple[int, GranuleBitmap] | None:
        """``(epoch, bitmap)`` from an encoded slot, or None when it is not whole and valid."""
        granules = segment_size // GRANULE
        nbytes = (granules + 7) // 8
        if len(data) < BITMAP_HEADER_SIZE + nbytes:
            return None
        magic, stored_granules, epoch, crc = _HEADER.unpack_from(data, 0)
        if magic != _MAGIC or stored_granules != granules:
            return None
        bits = bytes(data[BITMAP_HEADER_SIZE: BITMAP_HEADER_SIZE + nbytes])
        if crc32(bits, crc32(bytes(data[: BITMAP_HEADER_SIZE - 4]))) != crc:
            return None
        return epoch, GranuleBitmap(segment_size, bits)

    @staticmethod
    def encoded_size(segment_size: int) -> int:
        return BITMAP_HEADER_SIZE + (segment_size // GRANULE + 7) // 8
