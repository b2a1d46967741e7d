"""The requests in flight of every front, in one shared page, so that
``server.concurrent_requests_max`` caps the whole gateway, not each front.

The owner makes the page (a memfd, ``slots`` signed 64-bit counts) and hands its descriptor
to each front; a front writes only its own slot and reads the sum when it admits a request.
Two fronts admitting at the same moment may each see the other's count before it moved: the
cap can be passed by at most one request per other front.
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable

__all__ = ["SharedCounts"]

_SLOT = struct.Struct("<q")


class SharedCounts:
    def __init__(self, fd: int, slots: int, index: int) -> None:
        self.fd = fd
        self._slots = slots
        self._offset = _SLOT.size * index
        self._all = struct.Struct(f"<{slots}q")
        self._map = mmap.mmap(fd, self._all.size)
        self._counts: list[Callable[[], int]] = []

    @classmethod
    def create(cls, slots: int) -> SharedCounts:
        """The owner's page (its slot: none; index 0 is only read there)."""
        fd = os.memfd_create("entrepot-in-flight", 0)  # not inherited unless passed
        os.ftruncate(fd, _SLOT.size * slots)
        return cls(fd, slots, 0)

    def watch(self, count: Callable[[], int]) -> None:
        """One of the counts ``refresh`` adds up for this front (its middleware's, its send
        lane's)."""
        self._counts.append(count)

    def refresh(self) -> None:
        """Publish this front's requests in flight now."""
        _SLOT.pack_into(self._map, self._offset, sum(count() for count in self._counts))

    def clear(self, index: int) -> None:
        """A front that died counts nothing (the owner clears its slot)."""
        _SLOT.pack_into(self._map, _SLOT.size * index, 0)

    def total(self) -> int:
        return sum(self._all.unpack_from(self._map))
