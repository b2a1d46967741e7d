"""Placing a batch's new records: allocate, number (LSN, queue sequence) and encode each.

Runs on the store's writer thread only, inside ``Engine.write_batch``, and mutates the
engine's numbering and allocation state. The one-message append path (``place_appends``) is
on the commit path's critical chain — the writer places a batch, then writes and syncs it,
and the next batch waits — so it is written for speed: everything in locals, the record
size inlined, the allocator's current area bumped in place, records built with
``tuple.__new__``, at a fraction of the cost of the general ``place``.
Its common case — a run of messages bumped into the current ``p`` area — runs in C when the
``store._placing`` extension is built (``store/_placing.c``, faster still), and the
Python loop places whatever the C loop stops at (and everything, without the extension).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from store.allocator import Allocator
from store.crc import crc32
from store.errors import DiskFull, MessageTooLarge, StoreBusy
from store.framing import (
    GRANULE,
    GROUP_MAX,
    RECORD_HEADER_SIZE,
    RecordFlags,
    RecordState,
    encode_plain_parts,
    encode_record_parts,
    record_size,
)
from store.grouped import PENDING_MAX as GROUPED_PENDING_MAX
from store.records import Job, StoredRecord
from store.runs import Parts

_PlaceRun = Callable[[list[Job], int, int, int, int, int, int, int, dict[int, int],
                      list[tuple[int, Parts]]], tuple[int, int, int, int]]
_place_run: _PlaceRun | None
try:
    from store._placing import place_run as _native_place_run
    from store._placing import setup as _native_setup
except ImportError:  # built without a C compiler: the Python loop places everything
    _place_run = None
else:
    _native_setup(StoredRecord, crc32)
    _place_run = _native_place_run

__all__ = ["place", "place_appends", "NATIVE", "Placement"]

NATIVE = _place_run is not None



class Placement(Protocol):
    """The engine's numbering and allocation state that placing reads and advances
    (``store.engine.Engine`` is the one implementation)."""

    nonce: int
    next_lsn: int
    next_seq: dict[int, int]
    payload_max: int
    allocators: dict[str, Allocator]
    grouped: list[tuple[int, int, int]]

    def allocate(self, kind: str, size: int) -> tuple[int, int]:
        """A place of ``size`` bytes in a segment of ``kind``: (segment number, offset)."""

    def occupy_runs(self, runs: Sequence[tuple[int, int, int, int, int]]) -> None:
        """Mark the places of records written as runs as taken in the bitmaps."""


_TRANSACTIONAL = RecordFlags.TRANSACTIONAL.value
_JOURNAL = RecordFlags.JOURNAL.value
_EXPRESS = RecordFlags.EXPRESS.value
_SIZE_ROUND = RECORD_HEADER_SIZE + GRANULE - 1
_SIZE_MASK = ~(GRANULE - 1)


def place(engine: Placement, job: Job, writes: dict[int, list[tuple[int, Parts]]],
          placed: list[StoredRecord]) -> None:
    """Allocate, number and encode the job's records into ``writes`` (segment -> (offset,
    parts)) and ``placed``; a job error (too large, disk full) is set on the job. Runs once
    per message sent: plain ints and locals, enum arithmetic showed in profiles."""
    op = job.op
    if op not in ("append", "commit", "prepare", "express") or not job.sends:
        return
    for send in job.sends:
        if len(send.payload) > engine.payload_max:
            job.error = MessageTooLarge.of(len(send.payload), engine.payload_max)
            return
    places: list[tuple[int, int, int]] = []
    for send in job.sends:
        try:
            kind = "r" if op == "express" else "j" if send.journal else "p"
            size = record_size(len(send.payload))
            places.append((*engine.allocate(kind, size), size))
        except (DiskFull, StoreBusy) as exc:
            job.error = exc
            break
    plain = op in ("append", "express")
    single = op == "commit" and len(job.sends) == 1 and not job.removes
    job.grouped = (op == "commit" and not job.removes and 1 < len(job.sends) <= GROUP_MAX
                   and len(engine.grouped) < GROUPED_PENDING_MAX)
    group = len(job.sends) if job.grouped else 0
    state = (RecordState.LIVE if plain or single else
             RecordState.GROUPED if group else RecordState.PENDING)
    base_flags = (0 if plain else _TRANSACTIONAL) | (_EXPRESS if op == "express" else 0)
    next_seq, nonce, tx_id = engine.next_seq, engine.nonce, job.tx_id
    for send, (number, offset, size) in zip(job.sends, places):
        lsn = engine.next_lsn
        engine.next_lsn = lsn + 1
        if job.error is not None:
            # Keep the chain whole: fill the place with a dead record.
            parts = encode_record_parts(send.payload, lsn=lsn, nonce=nonce, queue_id=0,
                                        seq=0, state=RecordState.DEAD)
            writes.setdefault(number, []).append((offset, parts))
            continue
        queue_id = send.queue_id
        seq = send.seq or next_seq.get(queue_id, 1)
        if seq >= next_seq.get(queue_id, 1):
            next_seq[queue_id] = seq + 1
        flags = int(send.flags) | base_flags
        if send.journal:
            flags |= _JOURNAL
        parts = encode_record_parts(send.payload, lsn=lsn, nonce=nonce, queue_id=queue_id,
                                    seq=seq, tx_id=tx_id, expires_ms=send.expires_ms,
                                    priority=send.priority, flags=flags, state=state,
                                    group=group)
        writes.setdefault(number, []).append((offset, parts))
        if group:
            engine.grouped.append((number, offset, size))
        record = StoredRecord(queue_id, seq, number, offset, size, len(send.payload), lsn,
                              send.priority, send.expires_ms, flags,  # type: ignore[arg-type]
                              tx_id)
        placed.append(record)
        job.records.append(record)


def place_appends(engine: Placement, jobs: Sequence[Job],
                  writes: dict[int, list[tuple[int, Parts]]]) -> None:
    """``place`` for a run of one-message appends, the commonest job (see the module
    docstring): the C loop bumps the current ``p`` area for as many as it can, the Python
    loop places the job it stopped at, and so on."""
    if _place_run is None:
        _place_appends_python(engine, jobs, writes)
        return
    jobs = jobs if isinstance(jobs, list) else list(jobs)
    allocator_p = engine.allocators["p"]
    nonce32 = engine.nonce & 0xFFFFFFFF
    runs: list[tuple[int, int, int, int, int]] = []
    index, count = 0, len(jobs)
    while index < count:
        area = allocator_p.current()
        placed = 0
        if area is not None:
            made: list[tuple[int, Parts]] = []
            start, first_lsn = area.cursor, engine.next_lsn
            index, area.cursor, engine.next_lsn, placed = _place_run(
                jobs, index, area.segment, start, area.end, first_lsn, nonce32,
                engine.payload_max, engine.next_seq, made)
            if placed:
                writes.setdefault(area.segment, []).extend(made)
                runs.append((area.segment, start, area.cursor, placed, first_lsn))
        if index < count:
            if not placed and jobs[index].sends[0].journal:
                # Journal messages are never the C loop's: Python places the rest of the
                # batch at its own speed, not one C call and one Python call a message.
                _place_appends_python(engine, jobs[index:], writes)
                break
            # Anything else the C loop stopped at (the area is full, say): Python places
            # that one message, and the C loop goes on from the next.
            _place_appends_python(engine, jobs[index:index + 1], writes)
            index += 1
    if runs:
        engine.occupy_runs(runs)


def _place_appends_python(engine: Placement, jobs: Sequence[Job],
                          writes: dict[int, list[tuple[int, Parts]]]) -> None:
    """The whole of ``place_appends`` in Python. The allocator's current ``p`` area is bumped
    in place while it has room: what ``Allocator.allocate`` does first, without the call.
    The records are marked occupied here, a run of adjacent ones at a time
    (``Engine.occupy_runs``), not by a second pass over them."""
    payload_max, next_seq, new_record = engine.payload_max, engine.next_seq, tuple.__new__
    nonce32 = engine.nonce & 0xFFFFFFFF
    allocator_p = engine.allocators["p"]
    area = allocator_p.current()
    lsn = engine.next_lsn
    number = 0
    items: list[tuple[int, Parts]] = []
    runs: list[tuple[int, int, int, int, int]] = []  # segment, start, end, records, first LSN
    run_number = run_start = run_end = run_count = run_lsn = 0
    for job in jobs:
        if job.error is not None:
            continue
        send = job.sends[0]
        payload = send.payload
        payload_len = len(payload)
        if payload_len > payload_max:
            job.error = MessageTooLarge.of(payload_len, payload_max)
            continue
        size = (payload_len + _SIZE_ROUND) & _SIZE_MASK  # record_size, inlined
        journal = send.journal
        if not journal and area is not None and area.end - area.cursor >= size:
            offset = area.cursor
            area.cursor = offset + size
            place_number = area.segment
        else:
            try:
                place_number, offset = engine.allocate("j" if journal else "p", size)
            except (DiskFull, StoreBusy) as exc:
                job.error = exc
                continue
            area = allocator_p.current()
        if offset != run_end or place_number != run_number:
            if run_count:
                runs.append((run_number, run_start, run_end, run_count, run_lsn))
            run_number, run_start, run_count, run_lsn = place_number, offset, 0, lsn
        run_end = offset + size
        run_count += 1
        queue_id = send.queue_id
        seq = send.seq
        following = next_seq.get(queue_id, 1)
        if not seq:
            seq = following
        if seq >= following:
            next_seq[queue_id] = seq + 1
        flags = int(send.flags) | (_JOURNAL if journal else 0)
        if place_number != number:
            number = place_number
            items = writes.setdefault(number, [])
        items.append((offset, encode_plain_parts(payload, lsn, nonce32, queue_id, seq,
                                                 send.expires_ms, send.priority, flags)))
        record = new_record(StoredRecord, (queue_id, seq, number, offset, size, payload_len,
                                           lsn, send.priority, send.expires_ms, flags, 0))
        lsn += 1
        job.records.append(record)
    engine.next_lsn = lsn
    if run_count:
        runs.append((run_number, run_start, run_end, run_count, run_lsn))
        engine.occupy_runs(runs)
