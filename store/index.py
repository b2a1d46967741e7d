"""The per-queue index of live messages: one packed int per message, keyed by sequence.

Why ints and not objects: a million queued messages held as ``StoredRecord`` objects cost ~270
bytes each (the object, its dict slot and its own integers) and every one of them was tracked
by the cyclic garbage collector, whose full passes walked them all. A packed int is ~48 bytes
and untracked. Callers still see ``StoredRecord`` values: they are built when asked for.

Packing, low bits first (the fields that are usually zero sit on top, so the int stays short)::

    flags 8 | priority 3 | payload_len 31 | segment 32 | offset 48 | lsn 64 | expires_ms 64 | tx_id

``size`` is not stored: it is always ``record_size(payload_len)``. ``offset`` is 48 bits wide
because express messages held in RAM use it for their RAM key, a counter.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, KeysView

from store.framing import RecordFlags, record_flags, record_size
from store.records import Placed, StoredRecord
from store.seqorder import SeqOrder

__all__ = ["QueueIndex", "pack", "unpack"]

_PRIORITY_SHIFT = 8
_PAYLOAD_SHIFT = 11
_SEGMENT_SHIFT = 42
_OFFSET_SHIFT = 74
_LSN_SHIFT = 122
_EXPIRES_SHIFT = 186
_TX_SHIFT = 250
_MASK31 = (1 << 31) - 1
_MASK32 = (1 << 32) - 1
_MASK48 = (1 << 48) - 1
_MASK64 = (1 << 64) - 1

_SIZES: dict[int, int] = {}  # payload_len -> record size; lengths are few


def pack(record: Placed) -> int:
    """The index entry of ``record`` (its queue and sequence are the keys, not packed)."""
    assert 0 <= record.payload_len <= _MASK31 and 0 <= record.offset <= _MASK48
    # Small ints first, then one shift for offset and LSN together; the top fields are
    # usually zero and skipped (every shift of a wide int allocates one).
    packed = (int(record.flags) | record.priority << _PRIORITY_SHIFT
              | record.payload_len << _PAYLOAD_SHIFT | record.segment << _SEGMENT_SHIFT
              | (record.offset | record.lsn << _LSN_SHIFT - _OFFSET_SHIFT) << _OFFSET_SHIFT)
    if record.expires_ms or record.tx_id:
        packed |= (record.expires_ms | record.tx_id << _TX_SHIFT - _EXPIRES_SHIFT
                   ) << _EXPIRES_SHIFT
    return packed


def unpack(queue_id: int, seq: int, packed: int) -> StoredRecord:
    payload_len = packed >> _PAYLOAD_SHIFT & _MASK31
    return StoredRecord(queue_id, seq, packed >> _SEGMENT_SHIFT & _MASK32,
                        packed >> _OFFSET_SHIFT & _MASK48, _size(payload_len), payload_len,
                        packed >> _LSN_SHIFT & _MASK64, packed >> _PRIORITY_SHIFT & 7,
                        packed >> _EXPIRES_SHIFT & _MASK64, record_flags(packed & 0xFF),
                        packed >> _TX_SHIFT)


def packed_size(packed: int) -> int:
    """The record size of an entry (what its quota charge was), without unpacking it."""
    return _size(packed >> _PAYLOAD_SHIFT & _MASK31)


def packed_flags(packed: int) -> RecordFlags:
    return record_flags(packed & 0xFF)


def _size(payload_len: int) -> int:
    size = _SIZES.get(payload_len)
    if size is None:
        size = record_size(payload_len)
        if len(_SIZES) < 65536:
            _SIZES[payload_len] = size
    return size


class QueueIndex:
    """Live records per queue: a dict of packed entries by sequence, and the sequences in
    ascending order beside it (``store.seqorder``) for the lowest ones and ordered walks."""

    def __init__(self) -> None:
        self._queues: dict[int, dict[int, int]] = {}
        self._orders: dict[int, SeqOrder] = {}
        # Records that have left the index so far. Entries are never replaced (a sequence
        # is used once), so a reader holding records across an await knows they are all
        # still there when this has not moved.
        self.removals = 0

    def _queue(self, queue_id: int) -> tuple[dict[int, int], SeqOrder]:
        entries = self._queues.get(queue_id)
        if entries is None:
            entries = self._queues[queue_id] = {}
            self._orders[queue_id] = SeqOrder()
        return entries, self._orders[queue_id]

    def add(self, record: Placed) -> None:
        entries, order = self._queue(record.queue_id)
        entries[record.seq] = pack(record)
        order.add(record.seq)

    def add_many(self, records: Iterable[Placed]) -> None:
        """``add`` for a writer batch, or for every record recovery found (in any order)."""
        queues = self._queues
        added: dict[int, list[int]] = {}
        for record in records:  # add(), inlined: recovery runs this once per record
            queue_id, seq = record.queue_id, record.seq
            entries = queues.get(queue_id)
            if entries is None:
                entries = self._queue(queue_id)[0]
            entries[seq] = pack(record)
            seqs = added.get(queue_id)
            if seqs is None:
                seqs = added[queue_id] = []
            seqs.append(seq)
        for queue_id, seqs in added.items():
            self._orders[queue_id].extend(seqs)

    def add_packed(self, queue_id: int, seq: int, packed: int) -> None:
        entries, order = self._queue(queue_id)
        entries[seq] = packed
        order.add(seq)

    def pop_packed(self, queue_id: int, seq: int) -> int | None:
        """Remove an entry; its packed value (for ``packed_size``), or None when absent."""
        entries = self._queues.get(queue_id)
        if entries is None:
            return None
        packed = entries.pop(seq, None)
        if packed is not None:
            self.removals += 1
            self._orders[queue_id].removed(seq, entries, len(entries))
        return packed

    def get(self, queue_id: int, seq: int) -> StoredRecord | None:
        entries = self._queues.get(queue_id)
        if entries is None:
            return None
        packed = entries.get(seq)
        return None if packed is None else unpack(queue_id, seq, packed)

    def ordered(self, queue_id: int) -> list[StoredRecord]:
        entries = self._queues.get(queue_id)
        if entries is None:
            return []
        return [unpack(queue_id, seq, entries[seq])
                for seq in self._orders[queue_id].live(entries)]

    def timings(self, queue_id: int) -> Iterator[tuple[int, int, int]]:
        """(sequence, priority, expires_ms) of each live record in sequence order, read from
        the packed entries without building records."""
        entries = self._queues.get(queue_id)
        if entries is None:
            return
        for seq in self._orders[queue_id].live(entries):
            packed = entries[seq]
            yield seq, packed >> _PRIORITY_SHIFT & 7, packed >> _EXPIRES_SHIFT & _MASK64

    def unordered(self, queue_id: int) -> list[StoredRecord]:
        return [unpack(queue_id, seq, packed)
                for seq, packed in self._queues.get(queue_id, {}).items()]

    def first(self, queue_id: int, after_seq: int, limit: int) -> list[StoredRecord]:
        """Up to ``limit`` records with a sequence above ``after_seq``, in sequence order."""
        entries = self._queues.get(queue_id)
        if entries is None:
            return []
        return [unpack(queue_id, seq, entries[seq])
                for seq in self._orders[queue_id].first(entries, after_seq, limit)]

    def newest_flagged(self, flag: int, limit: int) -> list[StoredRecord]:
        """Up to ``limit`` records carrying ``flag``, the newest (highest LSN) of every queue
        together, oldest first. One pass over the packed entries, no object per entry."""
        chosen = heapq.nlargest(limit, (
            (packed >> _LSN_SHIFT & _MASK64, queue_id, seq, packed)
            for queue_id, entries in self._queues.items()
            for seq, packed in entries.items() if packed & flag))
        return [unpack(queue_id, seq, packed) for _, queue_id, seq, packed in reversed(chosen)]

    def flagged_since(self, flag: int, lsn_min: int) -> list[StoredRecord]:
        """The records carrying ``flag`` whose LSN is at least ``lsn_min``, oldest first."""
        chosen = sorted(
            (packed >> _LSN_SHIFT & _MASK64, queue_id, seq, packed)
            for queue_id, entries in self._queues.items()
            for seq, packed in entries.items()
            if packed & flag and packed >> _LSN_SHIFT & _MASK64 >= lsn_min)
        return [unpack(queue_id, seq, packed) for _, queue_id, seq, packed in chosen]

    def count(self, queue_id: int) -> int:
        return len(self._queues.get(queue_id, ()))

    def seqs(self, queue_id: int) -> KeysView[int]:
        """The queue's live sequence numbers (a live view: copy it to keep it)."""
        return self._queues.get(queue_id, {}).keys()

    def queue_ids(self) -> list[int]:
        return sorted(q for q, entries in self._queues.items() if entries)
