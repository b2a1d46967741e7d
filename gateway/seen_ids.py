"""Message ids seen lately that do not lead to their record by themselves: (queue number,
id) -> sequence, for copies in journals and dead-letter queues and for ids chosen by SRMP
senders.

Bounded, oldest out first: every message with such an id that was sent, received, forwarded
or read by a range reader was entered and never left, so a gateway carrying SRMP traffic
grew by every message it handled. An id that fell out is found by reading its queue
(``QueueManager.find``), as one never seen.
"""

from __future__ import annotations

from collections import OrderedDict

__all__ = ["SeenIds"]

SEEN_IDS_MAX = 65_536  # ~10 MB at most; a browse page or a receive holds far fewer


class SeenIds:
    def __init__(self, limit: int = SEEN_IDS_MAX) -> None:
        self._limit = limit
        # OrderedDict: its popitem(last=False) stays O(1) where a dict's first key is found
        # by skipping every deleted slot before it.
        self._seqs: OrderedDict[tuple[int, str], int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seqs)

    def note(self, queue_id: int, message_id: str, seq: int) -> None:
        self._seqs[(queue_id, message_id)] = seq
        if len(self._seqs) > self._limit:
            self._seqs.popitem(last=False)

    def get(self, queue_id: int, message_id: str) -> int | None:
        return self._seqs.get((queue_id, message_id))
