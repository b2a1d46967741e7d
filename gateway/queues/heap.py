"""Give freed heap memory back to the system (glibc ``malloc_trim``).

Message bodies of a few MiB come from the C heap. glibc keeps what is freed below the heap's
top for reuse, so a burst of bodies held by open transactions would stay in the process's
resident memory after they are committed or aborted. ``malloc_trim`` returns the free pages.
Without glibc (no ``malloc_trim`` symbol) trimming does nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
from collections.abc import Callable

__all__ = ["HeapTrimmer", "TRIM_AFTER_BYTES"]

# Releases smaller than this are left to the allocator: a trim walks the whole heap.
TRIM_AFTER_BYTES = 1 << 20


def _malloc_trim() -> Callable[[], None] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int

    def call() -> None:
        trim(0)

    return call


class HeapTrimmer:
    """Trims off the event loop (a trim takes milliseconds on a large heap), one at a time;
    callers that free memory while a trim runs share the next one."""

    def __init__(self, trim: Callable[[], None] | None = None) -> None:
        self._trim = trim if trim is not None else _malloc_trim()
        self._lock = asyncio.Lock()
        self._asked = 0  # trims asked for
        self._covered = 0  # asks a finished trim started after

    async def trim(self) -> None:
        """Return when a trim that started after this call has finished."""
        if self._trim is None:
            return
        self._asked += 1
        mine = self._asked
        async with self._lock:
            if self._covered >= mine:
                return
            upto = self._asked
            await asyncio.get_running_loop().run_in_executor(None, self._trim)
            self._covered = upto
