"""What the store's per-queue index answers (``store.index``): records and sequence numbers
of live messages, without reading a segment, and how far a queue's sequences are resolved
(``store.numbering``). ``MessageStore`` is one."""

from __future__ import annotations

from collections.abc import Iterator, KeysView

from store.framing import RecordFlags
from store.index import QueueIndex
from store.inflight import InFlight
from store.numbering import Numbering
from store.records import StoredRecord

__all__ = ["IndexReads"]

_KEYED = RecordFlags.KEYED.value


class IndexReads:
    """The index's answers; the subclass holds the index."""

    _index: QueueIndex
    _inflight: InFlight
    _numbering: Numbering

    def readable_end(self, queue_id: int) -> int:
        """The queue's stable head: every sequence below it is resolved for good (visible,
        removed, or never to be used), so a range read below it returns the same records
        every time until they are removed."""
        return self._numbering.readable_end(queue_id)

    def unresolved(self, queue_id: int) -> tuple[int, frozenset[int]]:
        """(The queue's next sequence, the sequences below it not resolved yet: sends still
        being written, prepared transactions' records). Every other sequence below it is
        visible, removed, or never to be used."""
        return self._numbering.unresolved(queue_id)

    def holds_or_awaits(self, queue_id: int) -> bool:
        """The queue has live records, or writes into it numbered and not yet visible (a
        send admitted and waiting for its sync): what a change of the queue must wait for."""
        return bool(self._index.count(queue_id)) or self._inflight.lowest(queue_id) is not None

    def records(self, queue_id: int) -> Iterator[StoredRecord]:
        """Live records of a queue in sequence order."""
        return iter(self._index.ordered(queue_id))

    def timings(self, queue_id: int) -> Iterator[tuple[int, int, int]]:
        """(sequence, priority, expires_ms) of each live record of a queue in sequence
        order, no record built (the gateway's delivery lanes and timers at start)."""
        return self._index.timings(queue_id)

    def unordered(self, queue_id: int) -> Iterator[StoredRecord]:
        """Live records of a queue in no particular order (no sort: for counting)."""
        return iter(self._index.unordered(queue_id))

    def record(self, queue_id: int, seq: int) -> StoredRecord | None:
        """The live record at ``seq`` in the queue, if any."""
        return self._index.get(queue_id, seq)

    @property
    def removals(self) -> int:
        """How many records have been removed since the store opened: unchanged across an
        await, every record read before it is still live (records never move)."""
        return self._index.removals

    def first_records(self, queue_id: int, after_seq: int, limit: int) -> list[StoredRecord]:
        """Up to ``limit`` live records with a sequence above ``after_seq``, in order."""
        return self._index.first(queue_id, after_seq, limit)

    def queue_ids(self) -> list[int]:
        return self._index.queue_ids()

    def flagged_since(self, flag: RecordFlags, lsn_min: int) -> list[StoredRecord]:
        """The live records carrying ``flag`` with an LSN of at least ``lsn_min``, oldest
        first (one pass over the index's packed ints)."""
        return self._index.flagged_since(int(flag), lsn_min)

    def keyed_records(self, limit: int) -> list[StoredRecord]:
        """The newest ``limit`` live ``KEYED`` records of all queues, oldest first."""
        return self._index.newest_flagged(_KEYED, limit)

    def seqs(self, queue_id: int) -> KeysView[int]:
        """The live sequence numbers of a queue, unordered (a live view: copy it to keep
        it); no record is built."""
        return self._index.seqs(queue_id)

    def count(self, queue_id: int) -> int:
        return self._index.count(queue_id)
