"""Which incoming stream positions are, for now, on disk only in the stream's own messages.

A stream message is stored flagged ``STREAM`` and carries its stream id and ordinal, so it holds
its stream's new position itself: no position record is written with it, so a stream
message costs one record. A position reaches disk elsewhere in two ways: the periodic
``MQInSeqs`` checkpoint, or a position record written just before a holding message is
removed (the store's removal hook). At start the checkpoint, the position records and the
queued ``STREAM`` messages stored after the checkpoint's LSN mark are merged, the highest
ordinal of each stream winning: what a crash can leave is never behind what was accepted.

The LSN mark: every message whose position a checkpoint may miss (its commit not yet back from
the store, or back but not yet entered in the table) has an LSN at or above the floor the store
gave when that commit was submitted; the mark is the lowest such floor (``begin``/``end``),
or the store's floor now when no commit is on its way. Pure bookkeeping, no I/O.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator

from gateway.srmp.eod import StreamKey
from store.records import StoredRecord

__all__ = ["HeldPositions"]


class HeldPositions:
    def __init__(self) -> None:
        # (queue id, sequence) of a queued message -> the stream and ordinal it holds.
        self._held: dict[tuple[int, int], tuple[StreamKey, int]] = {}
        # The highest ordinal of each stream on disk outside its messages: the greater of
        # the last checkpoint's position and a position record's written since.
        self._checkpoint: dict[StreamKey, int] = {}
        self._written: dict[StreamKey, int] = {}
        self._floors: dict[int, int] = {}
        self._tokens = itertools.count(1)

    def __len__(self) -> int:
        """Messages whose position is still on disk in them alone (a scan: for tests, logs)."""
        return sum(1 for key, ordinal in self._held.values() if ordinal > self._durable(key))

    def _durable(self, key: StreamKey) -> int:
        return max(self._checkpoint.get(key, 0), self._written.get(key, 0))

    def begin(self, floor: int) -> int:
        """A commit of stream messages is about to be submitted; ``floor`` is the store's
        ``lsn_floor()`` now. Returns the token for ``end``."""
        token = next(self._tokens)
        self._floors[token] = floor
        return token

    def end(self, token: int) -> None:
        """The commit's messages are in the table (or the commit failed)."""
        self._floors.pop(token, None)

    def mark(self, floor_now: int) -> int:
        """The LSN from which a checkpoint taken now must be completed at start."""
        return min(self._floors.values(), default=floor_now)

    def hold(self, record: StoredRecord, key: StreamKey, ordinal: int) -> None:
        if ordinal > self._durable(key):
            self._held[(record.queue_id, record.seq)] = (key, ordinal)

    def written(self, key: StreamKey, ordinal: int) -> None:
        """A position record (or a checkpoint) put ``ordinal`` of ``key`` on disk."""
        if ordinal > self._written.get(key, 0):
            self._written[key] = ordinal

    def checkpointed(self, positions: dict[StreamKey, int]) -> None:
        """A checkpoint holding ``positions`` (every stream the table knew; the dict is kept,
        not copied) is on disk: streams it no longer lists are forgotten, and a message it
        covers no longer counts as held. O(records written since the last one), not
        O(streams): the caller builds the positions a piece at a time, and then drops the
        covered messages with ``forget_covered``."""
        self._checkpoint = positions
        self._written = {key: ordinal for key, ordinal in self._written.items()
                         if ordinal > positions.get(key, ordinal)}

    def forget_covered(self, per_part: int) -> Iterator[None]:
        """Drop the held messages the positions on disk cover, ``per_part`` a step (the
        caller lets other work run between steps): else each would stay until it is removed
        from its queue (~150 bytes a queued stream message)."""
        wheres = list(self._held)
        for start in range(0, len(wheres), per_part):
            for where in itertools.islice(wheres, start, start + per_part):
                held = self._held.get(where)
                if held is not None and held[1] <= self._durable(held[0]):
                    del self._held[where]
            yield

    @property
    def entries(self) -> int:
        """Messages tracked, covered ones not yet dropped included."""
        return len(self._held)

    def to_write(self, records: Iterable[StoredRecord]) -> set[StreamKey]:
        """The streams whose position must be written before ``records`` may go."""
        keys = set()
        for record in records:
            held = self._held.get((record.queue_id, record.seq))
            if held is not None and held[1] > self._durable(held[0]):
                keys.add(held[0])
        return keys

    def released(self, records: Iterable[StoredRecord]) -> None:
        """``records`` no longer need holding (their positions are written)."""
        for record in records:
            self._held.pop((record.queue_id, record.seq), None)
