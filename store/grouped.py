"""Grouped commits: a transaction that only sends, committed without a QMLog entry.

Why: an SRMP message is stored with its duplicate-window entry, a REST batch as ten messages —
transactions that receive nothing. Through the QMLog each cost a log write and a second
fdatasync per batch, and a state byte rewritten per record after it. A grouped commit
writes its records in state ``GROUPED`` with
``group`` = how many records it wrote, at consecutive LSNs, and is durable with the segment
fdatasync alone: recovery takes it only when every one of its records is found (see
``store.recovery``), so a commit cut by a crash leaves no trace.

The next checkpoint rewrites those state bytes to LIVE (``settle``) before it syncs the
segments: from then on the records are ordinary live records, their space may be reused once
removed, and recovery never counts a group whose members may be gone for that reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from store.framing import RecordState

__all__ = ["settle", "Settled", "PENDING_MAX", "RUN_BYTES_MAX"]

# Records of grouped commits not yet settled, at most; beyond it (checkpoints held by a
# backup) commits go through the QMLog instead, so this list stays bounded.
PENDING_MAX = 262_144
RUN_BYTES_MAX = 1 << 20  # bytes rewritten by one pwrite when settling
_STATE_BYTE = 3
_GROUPED = RecordState.GROUPED.value
_LIVE = RecordState.LIVE.value


class Settled(Protocol):
    """What ``settle`` needs of a segment."""

    @property
    def view(self) -> memoryview: ...
    def write(self, offset: int, buffers: Sequence[bytes | memoryview], total: int) -> None: ...


def settle(segments: Mapping[int, Settled], pending: Sequence[tuple[int, int, int]]
           ) -> set[int]:
    """Rewrite the state byte of each record ``(segment, offset, size)`` still ``GROUPED``
    to LIVE (a removed one is DEAD by now and stays so), one write per run of adjacent
    records; returns the numbers of the segments written (to be synced)."""
    written: set[int] = set()
    for number, start, end, offsets in _runs(pending):
        segment = segments.get(number)
        if segment is None:  # deleted since: its records were all removed
            continue
        run = bytearray(segment.view[start:end])
        changed = False
        for offset in offsets:
            if run[offset - start + _STATE_BYTE] == _GROUPED:
                run[offset - start + _STATE_BYTE] = _LIVE
                changed = True
        if changed:
            segment.write(start, [memoryview(run)], len(run))
            written.add(number)
    return written


def _runs(pending: Sequence[tuple[int, int, int]]
          ) -> list[tuple[int, int, int, list[int]]]:
    """``(segment, start, end, record offsets)`` of adjacent records, each run at most
    ``RUN_BYTES_MAX`` bytes (a record larger than that is a run of its own)."""
    runs: list[tuple[int, int, int, list[int]]] = []
    current: tuple[int, int, int, list[int]] | None = None
    for number, offset, size in sorted(pending):
        if (current is not None and current[0] == number and current[2] == offset
                and offset + size - current[1] <= RUN_BYTES_MAX):
            current[3].append(offset)
            current = (number, current[1], offset + size, current[3])
            runs[-1] = current
            continue
        current = (number, offset, offset + size, [offset])
        runs.append(current)
    return runs
