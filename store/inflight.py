"""Sequence numbers handed out but not yet resolved, per queue.

A range reader (Spark) may only be told about sequences below the lowest one still in flight:
a message numbered earlier than one already visible (a prepared transaction, a send still in
the writer, a reservation whose send is being built) would otherwise appear later inside a
range the reader already took, and the same range would not return the same bytes twice.
Loop-thread only: reservations, submissions and ``_on_durable`` all run on the event loop.
"""

from __future__ import annotations

from collections.abc import Iterable

from store.records import Placed

__all__ = ["InFlight"]


class InFlight:
    """Per queue, the sequences that may still become visible."""

    def __init__(self) -> None:
        self._by_queue: dict[int, set[int]] = {}

    def add(self, queue_id: int, seq: int) -> None:
        self._by_queue.setdefault(queue_id, set()).add(seq)

    def discard(self, queue_id: int, seq: int) -> None:
        pending = self._by_queue.get(queue_id)
        if pending is not None:
            pending.discard(seq)
            if not pending:
                del self._by_queue[queue_id]

    def discard_many(self, records: Iterable[Placed]) -> None:
        """``discard`` of a batch's records, inlined: it runs once per message sent."""
        by_queue = self._by_queue
        for record in records:
            pending = by_queue.get(record.queue_id)
            if pending is not None:
                pending.discard(record.seq)
                if not pending:
                    del by_queue[record.queue_id]

    def lowest(self, queue_id: int) -> int | None:
        """The lowest sequence of the queue still in flight, or None."""
        pending = self._by_queue.get(queue_id)
        return min(pending) if pending else None

    def of(self, queue_id: int) -> frozenset[int]:
        """The queue's sequences in flight now."""
        return frozenset(self._by_queue.get(queue_id, ()))

    def count(self, queue_id: int) -> int:
        return len(self._by_queue.get(queue_id, ()))
