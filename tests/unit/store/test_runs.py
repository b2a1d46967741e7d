"""store.runs: one synced write for a segment written in one run, write + one sync otherwise,
no sync for express segments, a bounded number of synced descriptors; and the writer's
batches: half of what is pending, at least _BATCH_JOBS_MIN."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from store.records import Job, SendSpec
from store.runs import SYNCED_FDS_MAX, SyncedWrites
from store.segment import SEGMENT_HEADER_SIZE
from store.writer import _BATCH_JOBS_MIN, GroupCommitter


class _Segment:
    def __init__(self, kind: str = "p") -> None:
        self.kind = kind
        self.calls: list[tuple[str, int, int]] = []
        self.synced_open = False

    def write(self, offset: int, buffers: list[bytes], total: int) -> None:
        assert sum(map(len, buffers)) == total
        self.calls.append(("write", offset, total))

    def write_synced(self, offset: int, buffers: list[bytes], total: int) -> None:
        assert sum(map(len, buffers)) == total
        self.synced_open = True
        self.calls.append(("write_synced", offset, total))

    def sync(self) -> None:
        self.calls.append(("sync", 0, 0))

    def close_synced(self) -> None:
        self.synced_open = False


def _parts(size: int) -> tuple[bytes, bytes, bytes]:
    return (b"h" * 16, b"p" * (size - 20), b"\0" * 4)


def test_one_run_is_one_synced_write_in_offset_order() -> None:
    segment = _Segment()
    base = SEGMENT_HEADER_SIZE
    items = [(base + 128, _parts(64)), (base, _parts(64)), (base + 64, _parts(64))]
    SyncedWrites().write({1: segment}, {1: items})  # type: ignore[dict-item]
    assert segment.calls == [("write_synced", base, 192)]


def test_several_runs_are_written_then_synced_once() -> None:
    segment = _Segment()
    base = SEGMENT_HEADER_SIZE
    items = [(base + 512, _parts(64)), (base, _parts(64)), (base + 64, _parts(64))]
    SyncedWrites().write({1: segment}, {1: items})  # type: ignore[dict-item]
    assert segment.calls == [("write", base, 128), ("write", base + 512, 64), ("sync", 0, 0)]


def test_express_segments_are_never_synced() -> None:
    segment = _Segment("r")
    base = SEGMENT_HEADER_SIZE
    SyncedWrites().write({7: segment}, {7: [(base, _parts(64))]})  # type: ignore[dict-item]
    assert segment.calls == [("write", base, 64)]


def test_synced_descriptors_stay_bounded_least_recent_closed() -> None:
    writes = SyncedWrites()
    segments = {n: _Segment() for n in range(1, SYNCED_FDS_MAX + 4)}
    for number, segment in segments.items():
        writes.write({number: segment},  # type: ignore[dict-item]
                     {number: [(SEGMENT_HEADER_SIZE, _parts(64))]})
    still_open = [n for n, s in segments.items() if s.synced_open]
    assert still_open == list(range(4, SYNCED_FDS_MAX + 4))
    writes.write({1: segments[1]}, {1: [(SEGMENT_HEADER_SIZE, _parts(64))]})  # type: ignore
    assert segments[1].synced_open and not segments[4].synced_open


class _Engine:
    """Records batch sizes; the first batch blocks until the test has queued the rest."""

    def __init__(self, bytes_max: int = 1 << 30) -> None:
        self.options = type("O", (), {"group_commit_bytes_max": bytes_max,
                                      "checkpoint_interval_s": 3600.0})()
        self.failed = None
        self.sizes: list[int] = []
        self.payloads: list[list[int]] = []
        self.first_taken = threading.Event()
        self.go = threading.Event()

    def write_batch(self, jobs: list[Job]) -> None:
        self.sizes.append(len(jobs))
        self.payloads.append([sum(len(s.payload) for s in job.sends) for job in jobs])
        if len(self.sizes) == 1:
            self.first_taken.set()
            self.go.wait(10)


async def test_a_burst_is_cut_in_halves_of_at_least_the_minimum() -> None:
    engine: Any = _Engine()
    loop = asyncio.get_running_loop()
    writer = GroupCommitter(engine, loop, lambda jobs: None)
    try:
        first = asyncio.ensure_future(writer.submit(Job("append", sends=(SendSpec(1, b"x"),))))
        await loop.run_in_executor(None, engine.first_taken.wait, 10)
        burst = [asyncio.ensure_future(writer.submit(Job("append", sends=(SendSpec(1, b"x"),))))
                 for _ in range(100)]
        await asyncio.sleep(0)  # every submit queued while the first batch is being written
        engine.go.set()
        await asyncio.gather(first, *burst)
        assert engine.sizes == [1, 50, _BATCH_JOBS_MIN, 50 - _BATCH_JOBS_MIN]
        few = [asyncio.ensure_future(writer.submit(Job("append", sends=(SendSpec(1, b"x"),))))
               for _ in range(_BATCH_JOBS_MIN)]
        await asyncio.gather(*few)
        assert sum(engine.sizes[4:]) == _BATCH_JOBS_MIN
        assert all(size <= _BATCH_JOBS_MIN for size in engine.sizes[4:])
    finally:
        await loop.run_in_executor(None, writer.stop)


async def test_a_batch_stops_at_the_job_that_reaches_the_byte_limit() -> None:
    """Sizes as given to submit, or counted there: a batch takes jobs up to and including the
    one whose bytes reach ``group_commit_bytes_max``, never more than half of what waits."""
    engine: Any = _Engine(bytes_max=1000)
    loop = asyncio.get_running_loop()
    writer = GroupCommitter(engine, loop, lambda jobs: None)

    def job(size: int, parts: int = 1) -> Job:
        return Job("commit", sends=tuple(SendSpec(1, b"x" * (size // parts))
                                         for _ in range(parts)))

    try:
        first = asyncio.ensure_future(writer.submit(job(10)))
        await loop.run_in_executor(None, engine.first_taken.wait, 10)
        sizes = [300, 300, 100, 400, 50, 2000, 500, 500, 10] + [10] * 60 + [600] * 5
        burst = [asyncio.ensure_future(writer.submit(job(n, parts=2)) if i % 2
                                       else writer.submit(job(n), n))
                 for i, n in enumerate(sizes)]
        await asyncio.sleep(0)
        engine.go.set()
        await asyncio.gather(first, *burst)
        batches = engine.payloads[1:]
        assert [n for batch in batches for n in batch] == sizes  # all, in order
        for batch in batches:
            assert len(batch) <= max(_BATCH_JOBS_MIN, (len(sizes) + 1) // 2)
            assert sum(batch[:-1]) < 1000  # only the last job may reach the limit
        assert batches[:3] == [[300, 300, 100, 400], [50, 2000], [500, 500]]
        assert writer._pending_bytes == 0 and not writer._sizes
    finally:
        await loop.run_in_executor(None, writer.stop)
