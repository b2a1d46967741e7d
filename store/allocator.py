"""Where the next record goes (pure: no I/O).

Rule (the invariant recovery depends on): after checkpoint E is durable, records are placed only
in areas that were free in E's bitmaps, and each area is filled as a chain from its start —
record after record, no gaps. Recovery can then find every record written since E by following
the chain from the start of each free area, accepting records with an LSN above E's.

Space freed after E is not reused before the next checkpoint makes it part of a free area.
Areas are tried in order from a moving cursor; a record that fits nowhere gets a new segment.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Area", "Allocator"]

# How many areas one allocation may look at before asking for a fresh segment: keeps a
# fragmented store from costing O(areas) per message.
_PROBE_AREAS_MAX = 64


@dataclass(slots=True)
class Area:
    segment: int
    cursor: int
    end: int

    @property
    def remaining(self) -> int:
        return self.end - self.cursor


class Allocator:
    """Free areas of one segment kind (``p`` or ``j``) as of the last durable checkpoint."""

    def __init__(self) -> None:
        self._areas: list[Area] = []
        self._next = 0

    def reset(self, areas: list[Area]) -> None:
        self._areas = [a for a in areas if a.remaining > 0]
        self._next = 0

    def add_area(self, area: Area) -> None:
        """A fresh segment: one area covering everything after its header; allocation goes on
        there (it is the one area sure to fit what did not fit elsewhere)."""
        self._areas.append(area)
        self._next = len(self._areas) - 1

    def current(self) -> Area | None:
        """The area ``allocate`` tries first. A caller may take ``size`` bytes at its cursor
        itself (advancing the cursor) when ``end - cursor >= size``: exactly what ``allocate``
        would do, without the call (the writer's per-message path)."""
        return self._areas[self._next] if self._next < len(self._areas) else None

    def allocate(self, size: int) -> tuple[int, int] | None:
        """``(segment, offset)`` for ``size`` bytes, or None when a new segment is needed."""
        areas = self._areas
        probed = 0
        index = self._next
        while probed < min(len(areas), _PROBE_AREAS_MAX):
            if index >= len(areas):
                index = 0
            area = areas[index]
            if area.remaining >= size:
                offset = area.cursor
                area.cursor += size
                self._next = index
                return area.segment, offset
            index += 1
            probed += 1
        return None

    def free_bytes(self) -> int:
        return sum(a.remaining for a in self._areas)

    def drop_segment(self, segment: int) -> None:
        self._areas = [a for a in self._areas if a.segment != segment]
        self._next = 0
