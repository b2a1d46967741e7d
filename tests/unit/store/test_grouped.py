"""Settling grouped commits (store.grouped): state bytes to LIVE, one write per run."""

from __future__ import annotations

from collections.abc import Sequence

from store import grouped
from store.framing import RecordState


class FakeSegment:
    def __init__(self, size: int) -> None:
        self.data = bytearray(size)
        self.writes: list[tuple[int, int]] = []

    @property
    def view(self) -> memoryview:
        return memoryview(self.data)

    def write(self, offset: int, buffers: Sequence[bytes | memoryview], total: int) -> None:
        joined = b"".join(bytes(b) for b in buffers)
        assert len(joined) == total
        self.data[offset: offset + len(joined)] = joined
        self.writes.append((offset, len(joined)))


def _mark(segment: FakeSegment, offset: int, state: RecordState) -> None:
    segment.data[offset: offset + 64] = bytes([offset % 251 + 1]) * 64  # record bytes
    segment.data[offset + 3] = state


def test_grouped_records_become_live_and_others_are_left_alone() -> None:
    segment = FakeSegment(4096)
    for offset, state in ((64, RecordState.GROUPED), (128, RecordState.DEAD),
                          (192, RecordState.GROUPED), (512, RecordState.GROUPED)):
        _mark(segment, offset, state)
    before = bytes(segment.data)
    written = grouped.settle({1: segment}, [(1, 64, 64), (1, 128, 64), (1, 192, 64),
                                            (1, 512, 64)])
    assert written == {1}
    assert [segment.data[o + 3] for o in (64, 128, 192, 512)] == [
        RecordState.LIVE, RecordState.DEAD, RecordState.LIVE, RecordState.LIVE]
    changed = [i for i in range(len(before)) if before[i] != segment.data[i]]
    assert changed == [67, 195, 515]  # only state bytes
    assert segment.writes == [(64, 192), (512, 64)]  # adjacent records: one write


def test_runs_are_capped_and_gone_segments_skipped() -> None:
    size = grouped.RUN_BYTES_MAX // 2
    segment = FakeSegment(4 * size)
    pending = [(1, offset, size) for offset in (0, size, 2 * size)]
    for _, offset, _ in pending:
        segment.data[offset + 3] = RecordState.GROUPED
    assert grouped.settle({1: segment}, pending + [(2, 0, 64)]) == {1}
    assert segment.writes == [(0, 2 * size), (2 * size, size)]


def test_nothing_to_settle_writes_nothing() -> None:
    segment = FakeSegment(1024)
    _mark(segment, 64, RecordState.LIVE)
    assert grouped.settle({1: segment}, [(1, 64, 64)]) == set()
    assert segment.writes == []
