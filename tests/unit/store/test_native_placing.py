"""store._placing (C) against store.placing's Python loop: same bytes, records and numbering.

Both place the same random jobs on two identical stand-in engines (the attributes and calls
``place_appends`` uses); the C loop must stop, untouched, at every job it does not handle
(a job with an error, a journal message, one too large or past its area) for Python to place.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store import placing
from store.allocator import Allocator, Area
from store.errors import DiskFull, MessageTooLarge
from store.framing import RecordFlags, RecordHeader, decode_record
from store.records import Job, SendSpec, StoredRecord

_NONCE = 0x1234_5678_9ABC
_SEGMENT = 1 << 16


@dataclass
class StandIn:
    """What place_appends needs of an Engine; new segments of _SEGMENT bytes, a few."""

    payload_max: int
    next_seq: dict[int, int] = field(default_factory=dict)
    next_lsn: int = 100
    nonce: int = _NONCE
    allocators: dict[str, Allocator] = field(
        default_factory=lambda: {"p": Allocator(), "j": Allocator()})
    segments_left: int = 3
    occupied: dict[int, list[tuple[int, int, int, int]]] = field(default_factory=dict)
    made: int = 0

    def allocate(self, kind: str, size: int) -> tuple[int, int]:
        place = self.allocators[kind].allocate(size)
        if place is None:
            if not self.segments_left:
                raise DiskFull("no room")
            self.segments_left -= 1
            self.made += 1
            self.allocators[kind].add_area(Area(self.made, 64, _SEGMENT))
            place = self.allocators[kind].allocate(size)
        assert place is not None
        return place

    def occupy_runs(self, runs: list[tuple[int, int, int, int, int]]) -> None:
        for number, start, end, count, first_lsn in runs:
            self.occupied.setdefault(number, []).append((start, end, count, first_lsn))


sends = st.builds(
    SendSpec,
    queue_id=st.sampled_from([1, 2, 7, 0xFFFF_FFFF]),
    payload=st.binary(max_size=300) | st.integers(0, 20_000).map(bytes),
    priority=st.integers(0, 7),
    expires_ms=st.sampled_from([0, 1, 1_700_000_000_000]),
    flags=st.sampled_from([RecordFlags.NONE, RecordFlags.KEYED, RecordFlags.STREAM]),
    journal=st.sampled_from([False, False, False, True]),
    seq=st.sampled_from([0, 0, 0, 5, 1000]),
)


def _jobs(specs: list[tuple[SendSpec, bool]]) -> list[Job]:
    jobs = []
    for send, broken in specs:
        job = Job("append", sends=(send,))
        if broken:
            job.error = DiskFull("set before placing")
        jobs.append(job)
    return jobs


def _outcome(engine: StandIn, jobs: list[Job],
             writes: dict[int, list[tuple[int, tuple[bytes, bytes, bytes]]]]) -> object:
    placed_bytes = {number: sorted((offset, b"".join(parts)) for offset, parts in items)
                    for number, items in writes.items()}
    # C and Python cut runs differently: compare what is occupied, not how it was split.
    occupied = {number: (sorted((s, e) for s, e, _, _ in runs), sum(c for _, _, c, _ in runs),
                         min(lsn for _, _, _, lsn in runs))
                for number, runs in engine.occupied.items()}
    errors = [type(job.error).__name__ if job.error else None for job in jobs]
    records = [tuple(job.records) for job in jobs]
    return (placed_bytes, _merged(occupied), errors, records, engine.next_seq, engine.next_lsn,
            [(a.segment, a.cursor, a.end) for a in engine.allocators["p"]._areas])


def _merged(occupied: dict[int, tuple[list[tuple[int, int]], int, int]]) -> object:
    out = {}
    for number, (ranges, count, lsn) in occupied.items():
        merged: list[list[int]] = []
        for start, end in ranges:
            if merged and merged[-1][1] == start:
                merged[-1][1] = end
            else:
                merged.append([start, end])
        out[number] = (merged, count, lsn)
    return out


def _place(native: bool, specs: list[tuple[SendSpec, bool]], holes: bool) -> object:
    engine = StandIn(payload_max=16_000)
    if holes:  # free areas left by a checkpoint: C fills one, then Python moves on
        engine.made = 9
        engine.allocators["p"].reset([Area(8, 64, 1024), Area(9, 4096, 9000)])
    jobs = _jobs(specs)
    writes: dict[int, list[tuple[int, tuple[bytes, bytes, bytes]]]] = {}
    if native:
        placing.place_appends(engine, jobs, writes)  # type: ignore[arg-type]
    else:
        placing._place_appends_python(engine, jobs, writes)  # type: ignore[arg-type]
    return _outcome(engine, jobs, writes)


def test_the_extension_is_built() -> None:
    assert placing.NATIVE, "store/_placing.c did not build: pip install -e . needs a C compiler"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(sends, st.sampled_from([False, False, False, True])), max_size=60),
       st.booleans())
def test_native_and_python_place_alike(specs: list[tuple[SendSpec, bool]], holes: bool) -> None:
    assert _place(True, specs, holes) == _place(False, specs, holes)


def test_the_native_records_decode() -> None:
    engine = StandIn(payload_max=16_000)
    bodies = [b"", b"x", bytes(range(256)) * 9, b"y" * 7]
    jobs = _jobs([(SendSpec(3, body, priority=5, expires_ms=42, flags=RecordFlags.KEYED), False)
                  for body in bodies])
    writes: dict[int, list[tuple[int, tuple[bytes, bytes, bytes]]]] = {}
    placing.place_appends(engine, jobs, writes)  # type: ignore[arg-type]
    segment = bytearray(_SEGMENT)
    for offset, parts in writes[1]:
        record = b"".join(parts)
        segment[offset: offset + len(record)] = record
    for job, body in zip(jobs, bodies):
        stored: StoredRecord = job.records[0]
        header = decode_record(segment, stored.offset, _SEGMENT, nonce=_NONCE, segment=1)
        assert isinstance(header, RecordHeader), header
        assert (header.queue_id, header.seq, header.priority, header.expires_ms, header.flags,
                header.payload_len) == (3, stored.seq, 5, 42, RecordFlags.KEYED, len(body))
        assert bytes(segment[stored.offset + 56: stored.offset + 56 + len(body)]) == body
    assert [job.records[0].seq for job in jobs] == [1, 2, 3, 4]


def test_a_field_out_of_range_is_left_to_python_which_refuses_it() -> None:
    engine = StandIn(payload_max=16_000)
    jobs = _jobs([(SendSpec(1, b"ok"), False), (SendSpec(1 << 32, b"too far"), False)])
    with pytest.raises(struct.error):
        placing.place_appends(engine, jobs, {})  # type: ignore[arg-type]
    assert len(jobs[0].records) == 1 and not jobs[1].records


def test_too_large_and_disk_full_are_job_errors() -> None:
    engine = StandIn(payload_max=100, segments_left=1)
    jobs = _jobs([(SendSpec(1, bytes(101)), False)]
                 + [(SendSpec(1, bytes(100)), False) for _ in range(600)])
    placing.place_appends(engine, jobs, {})  # type: ignore[arg-type]
    assert isinstance(jobs[0].error, MessageTooLarge)
    placed = [job for job in jobs if job.records]
    full = [job for job in jobs if isinstance(job.error, DiskFull)]
    assert placed and full and len(placed) + len(full) == 600


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1 << 40), st.integers(0, 80), st.integers(0, 200),
                          st.integers(0, 63), st.booleans()), min_size=1, max_size=40,
                unique_by=lambda t: t[0]),
       st.booleans())
def test_runs_in_c_are_the_python_runs(records: list[tuple[int, int, int, int, bool]],
                                       adjacent: bool) -> None:
    """store.runs._runs (C when built) against runs_python, over records placed apart or
    back to back (the usual case: one run), payloads as bytes or memoryviews."""
    from store import runs

    items: list[tuple[int, tuple[bytes, bytes | memoryview, bytes]]] = []
    cursor = 4096
    for offset, head, body, pad, view in records:
        payload = b"p" * body
        parts = (b"h" * head, memoryview(payload) if view else payload, b"\0" * pad)
        at = cursor if adjacent else offset
        items.append((at, parts))
        cursor = at + head + body + pad
    items.sort(key=lambda item: item[0])
    assert runs._runs(list(items)) == runs.runs_python(list(items))
    assert placing.NATIVE == (runs._runs is not runs.runs_python)


def test_runs_in_c_refuse_what_is_not_a_record() -> None:
    from store import runs

    assert runs._runs is not runs.runs_python, (
        "store/_placing.c did not build: pip install -e . needs a C compiler")
    for bad in ([(1, (b"", b""))], [("x", (b"", b"", b""))], [(1, (b"", 5, b""))], [1]):
        with pytest.raises(TypeError):
            runs._runs(bad)  # type: ignore[arg-type]
