"""Writing a batch's records into their segments, durably: one write per run of adjacent
records, and for a segment written in one run, the write and its sync in one system call.

Why one call: the writer thread gives up the GIL for each system call and must win it back
before the next. Between a ``pwritev`` and its ``fdatasync`` the event loop — resuming the
committers of the previous batch — can hold it, so the sync would start late and nothing
would overlap. An ``O_DSYNC`` write (the same disk latency as write + fdatasync) is one call:
the loop works while the disk does. A segment written in several runs (free space reused in
pieces) is written run by run and synced once;
express (``r``) segments are never synced.

An ``O_DSYNC`` descriptor is kept open for the last ``SYNCED_FDS_MAX`` segments written so,
not for every segment: a data directory may hold thousands.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from operator import itemgetter

from store.segment import Segment

__all__ = ["Parts", "SyncedWrites", "SYNCED_FDS_MAX"]

Parts = tuple[bytes, bytes | memoryview, bytes]  # a record as encode_record_parts gives it
SYNCED_FDS_MAX = 8

_FIRST = itemgetter(0)


class SyncedWrites:
    """Writes batches durably (see the module docstring). Writer thread only."""

    def __init__(self) -> None:
        self._open: OrderedDict[int, Segment] = OrderedDict()  # least recently written first

    def write(self, segments: Mapping[int, Segment],
              writes: Mapping[int, list[tuple[int, Parts]]]) -> None:
        """Write and sync every segment's records (``writes``: segment number -> (offset,
        parts) in any order). Raises OSError; the caller fail-stops on it."""
        for number, items in writes.items():
            segment = segments[number]
            items.sort(key=_FIRST)
            runs = _runs(items)
            if segment.kind == "r":  # express: never synced
                for start, buffers, total in runs:
                    segment.write(start, buffers, total)
            elif len(runs) == 1:
                self._note(number, segment)
                segment.write_synced(*runs[0])
            else:
                for start, buffers, total in runs:
                    segment.write(start, buffers, total)
                segment.sync()

    def _note(self, number: int, segment: Segment) -> None:
        # A segment closed meanwhile (deleted when empty) only has its closed descriptor
        # closed again here, which does nothing: numbers are never reused.
        self._open[number] = segment
        self._open.move_to_end(number)
        if len(self._open) > SYNCED_FDS_MAX:
            _, oldest = self._open.popitem(last=False)
            oldest.close_synced()


def runs_python(items: list[tuple[int, Parts]]
                ) -> list[tuple[int, list[bytes | memoryview], int]]:
    """(start, buffers, total bytes) of each run of adjacent records of ``items`` (sorted by
    offset; each record is header, payload and padding: three buffers, the payload never
    copied). ``_runs`` is the C extension's when it is built (faster, on the writer's
    critical path), this otherwise."""
    runs: list[tuple[int, list[bytes | memoryview], int]] = []
    run_start = run_end = items[0][0]
    run: list[bytes | memoryview] = []
    for offset, parts in items:
        if offset != run_end:
            runs.append((run_start, run, run_end - run_start))
            run_start, run = offset, []
        run += parts  # an empty payload or padding is a harmless empty iovec
        run_end = offset + len(parts[0]) + len(parts[1]) + len(parts[2])
    runs.append((run_start, run, run_end - run_start))
    return runs


try:
    from store._placing import runs as _runs
except ImportError:  # built without a C compiler: the Python loop, same result
    _runs = runs_python
