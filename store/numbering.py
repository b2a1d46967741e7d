"""Queue sequence numbers and transaction ids, handed out on the event loop.

Numbers are taken in submission order (the writer keeps that order), so express messages held
in RAM get theirs without a trip to the disk, and a caller may learn a message's number before
its bytes are built (``take``). What is numbered but not yet visible stays in ``in_flight``:
it bounds a range reader's head (``readable_end``). The lock is for the writer thread, which
copies the counters into each checkpoint (``snapshot``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from store.inflight import InFlight
from store.records import SendSpec

__all__ = ["Numbering"]


class Numbering:
    """Next sequence per queue, next transaction id, and what is still in flight."""

    def __init__(self, next_seq: dict[int, int], next_tx: int) -> None:
        self._lock = threading.Lock()
        self._next_seq = dict(next_seq)
        self._next_tx = next_tx
        self.in_flight = InFlight()

    def take_tx_id(self) -> int:
        with self._lock:
            tx_id = self._next_tx
            self._next_tx += 1
            return tx_id

    def take(self, queue_id: int) -> int:
        """The queue's next sequence number, in flight from now on."""
        with self._lock:
            seq = self._next_seq.get(queue_id, 1)
            self._next_seq[queue_id] = seq + 1
        self.in_flight.add(queue_id, seq)
        return seq

    def number(self, sends: Sequence[SendSpec]) -> list[SendSpec]:
        """``sends`` with a sequence number each (one taken by ``take`` is kept)."""
        with self._lock:
            numbered = []
            for send in sends:
                if send.seq:
                    numbered.append(send)
                    continue
                seq = self._next_seq.get(send.queue_id, 1)
                self._next_seq[send.queue_id] = seq + 1
                self.in_flight.add(send.queue_id, seq)
                # The constructor, not dataclasses.replace: this runs once per message.
                numbered.append(SendSpec(send.queue_id, send.payload, send.priority,
                                         send.expires_ms, send.flags, send.journal,
                                         send.express, seq))
            return numbered

    def forget(self, sends: Sequence[SendSpec]) -> None:
        """Numbered sends that will not become visible: no longer in flight."""
        for send in sends:
            if send.seq:
                self.in_flight.discard(send.queue_id, send.seq)

    def readable_end(self, queue_id: int) -> int:
        with self._lock:
            next_seq = self._next_seq.get(queue_id, 1)
        lowest = self.in_flight.lowest(queue_id)
        return next_seq if lowest is None else min(lowest, next_seq)

    def unresolved(self, queue_id: int) -> tuple[int, frozenset[int]]:
        """(The queue's next sequence, the sequences below it still in flight)."""
        with self._lock:
            next_seq = self._next_seq.get(queue_id, 1)
        return next_seq, self.in_flight.of(queue_id)

    def snapshot(self) -> dict[int, int]:
        """The next sequence of every queue, for the writer thread's checkpoints."""
        with self._lock:
            return dict(self._next_seq)
