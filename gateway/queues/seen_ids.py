"""Finding a queued message by the id a client was shown (GET/DELETE .../messages/{id}).

An id the gateway composed names its queue and sequence. Others do not lead to their record by
themselves — copies in journals and dead-letter queues keep their original's id, SRMP senders
choose theirs — so the latest ones seen are remembered ((queue number, id) -> sequence), and
one not remembered is found by reading its queue.

Bounded, oldest out first: every message with such an id that was sent, received, forwarded
or read by a range reader was entered and never left, so a gateway carrying SRMP traffic
grew by every message it handled.
"""

from __future__ import annotations

from collections import OrderedDict

from gateway import jsonio
from gateway.msmq.message import decode_payload, parse_id
from gateway.queues.pages import pages
from store.message_store import MessageStore
from store.records import StoredRecord

__all__ = ["SeenIds", "locate", "SCAN_STEP"]

SEEN_IDS_MAX = 65_536  # ~10 MB at most; a browse page or a receive holds far fewer
SCAN_STEP = 1000  # records read per turn of the event loop while looking for an id


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


async def locate(store: MessageStore, seen: SeenIds, qm_guid: str, queue_id: int,
                 message_id: str, *, holds_copies: bool) -> StoredRecord | None:
    """The queued record shown as ``message_id``, or None."""
    record = None
    key = parse_id(message_id, qm_guid)
    if key is not None and key[0] == queue_id:
        record = store.record(queue_id, key[1])
    seq = seen.get(queue_id, message_id)
    if record is None and seq is not None:
        record = store.record(queue_id, seq)  # numbers are never reused: still that message
    if record is None and (key is None or holds_copies):
        record = await _scan(store, seen, queue_id, message_id)
    return record


async def _scan(store: MessageStore, seen: SeenIds, queue_id: int, message_id: str
                ) -> StoredRecord | None:
    """The queue read once for a kept id (a composed id of this queue was looked up above),
    ``SCAN_STEP`` records a turn of the event loop: a miss reads the whole queue, which for
    a million messages would hold the loop for seconds. Only a record whose
    bytes hold the id's JSON text is decoded — an ASCII id is written the same by any JSON
    encoder — so a miss costs a read and a substring search a message, not a decode."""
    plain = message_id.isascii() and message_id.isprintable()
    needle = jsonio.dumps(message_id) if plain else b""
    async for page in pages(store, queue_id, SCAN_STEP):  # the oldest copy first
        for candidate in page:
            payload = store.read(candidate)
            if needle not in payload:
                continue
            if decode_payload(payload).properties.message_id == message_id:
                seen.note(queue_id, message_id, candidate.seq)
                return candidate
    return None
