"""The sequence numbers of one queue in ascending order, removals applied lazily (pure).

Why: the index keeps a queue's entries in a dict, in the order they became visible, which is
not sequence order (a reserved number or a prepared transaction becomes visible after later
ones). Finding the lowest numbers by walking the whole dict made every pull of a forwarding
link and every range read's floor cost O(queued): 22 ms for one pull of 100 from a million.
Here a pull is a bisection and a walk over what it returns.

A removed number stays in the list until the front passes it or the dead ones outnumber the
live (one compaction then: amortised O(1) a removal). Numbers mostly arrive in order, so an
add is usually an append; one that arrives late is inserted where it belongs.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Container, Iterator
from itertools import islice

__all__ = ["SeqOrder"]

_SLACK = 1024  # dead numbers tolerated before a compaction or a trim of the front
_BULK = 4096  # an out-of-order extend this long is merged by one sort (recovery)


class SeqOrder:
    __slots__ = ("_seqs", "_head")

    def __init__(self) -> None:
        self._seqs: list[int] = []
        self._head = 0  # everything before it is dead

    def __len__(self) -> int:
        """Numbers listed, dead ones included (for tests and compaction)."""
        return len(self._seqs) - self._head

    def add(self, seq: int) -> None:
        seqs = self._seqs
        if not seqs or seq > seqs[-1]:
            seqs.append(seq)
            return
        at = bisect_left(seqs, seq, self._head)
        if at == len(seqs) or seqs[at] != seq:  # listed already when it was removed before
            seqs.insert(at, seq)

    def extend(self, new: list[int]) -> None:
        seqs = self._seqs
        last = seqs[-1] if seqs else -1
        if new[0] > last and (len(new) == 1 or new == sorted(set(new))):  # C, O(n) if sorted
            seqs.extend(new)
        elif len(new) >= _BULK:
            self._seqs = sorted(set(islice(seqs, self._head, None)).union(new))
            self._head = 0
        else:
            for seq in new:
                self.add(seq)

    def removed(self, seq: int, live: Container[int], live_count: int) -> None:
        """``seq`` was removed from ``live``, which now holds ``live_count`` numbers."""
        seqs, head = self._seqs, self._head
        if head < len(seqs) and seqs[head] == seq:  # the front moves on (a queue drained)
            head += 1
            while head < len(seqs) and seqs[head] not in live:
                head += 1
            if head > _SLACK and head * 2 > len(seqs):
                del seqs[:head]
                head = 0
            self._head = head
        elif len(seqs) - head - live_count > live_count + _SLACK:
            self._seqs = [seq for seq in islice(seqs, head, None) if seq in live]
            self._head = 0

    def first(self, live: Container[int], after: int, limit: int) -> list[int]:
        """Up to ``limit`` live numbers above ``after``, ascending."""
        seqs = self._seqs
        at = bisect_right(seqs, after, self._head)
        chosen: list[int] = []
        end = len(seqs)
        while at < end and len(chosen) < limit:
            seq = seqs[at]
            if seq in live:
                chosen.append(seq)
            at += 1
        return chosen

    def live(self, live: Container[int]) -> Iterator[int]:
        """Every live number, ascending."""
        return (seq for seq in islice(self._seqs, self._head, None) if seq in live)
