"""The ordinals of the SRMP message ids this queue manager composes (``uuid:N@QM GUID``).

An MSMQ message id is an OBJECTID: the sending QM's GUID and a 32-bit counter ([MC-MQSRM]
§2.2.4.3, SRMPState.MessageIdOrdinal; docs/srmp.md, "Message ids"), so N runs from 1 to
4294967295. One counter serves every id sent on the wire: messages to remote queues,
delivery/commitment receipts, stream receipts.

The counter survives restarts without a write per id: ids are handed out from blocks, and a
block is reserved durably (a small record in an internal queue, written in one atomic store
commit that also removes the previous one) before its first id is used. After a restart
counting resumes above the last reserved block, so an id is never used twice; the unused
rest of a block is skipped.

The counter is kept as a 64-bit count of ids ever reserved; the ordinal is that count
folded into 1..4294967295, so after 4294967295 comes 1 again. That is safe: a receiver
remembers ids for its duplicate window (Windows: 30 minutes, at most 10,000 ids), and using
2^32 ids within 30 minutes would take 2.4 million ids a second, far beyond what a gateway
sustains.
"""

from __future__ import annotations

import asyncio
import json

from gateway.logs import server_log
from gateway.queues import sending
from gateway.queues.internal import WIRE_IDS_QUEUE
from gateway.queues.state_records import Quarantine, StateQueue, read_state
from gateway.queues.store_errors import store_call
from store.message_store import MessageStore
from store.records import StoredRecord

__all__ = ["WireIds", "ORDINAL_MAX", "FIRST_COUNT", "ordinal_of", "local_id", "parse_record"]

ORDINAL_MAX = 0xFFFFFFFF
# Where a queue manager without a reservation starts (its first id is 2^31 + 1): an earlier
# version sent ids whose low 32 bits (all a Windows receiver keeps) were the sequence numbers
# of its outgoing queues, small numbers; after an upgrade a receiver may still hold those in
# its duplicate window, so the new ids start far above them.
FIRST_COUNT = 1 << 31
_BLOCK = 4096  # ids reserved by one durable write


def parse_record(raw: bytes) -> int:
    """The reservation a record holds.

    Raises:
        ValueError, KeyError, TypeError: not a record this module wrote.
    """
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise TypeError("a message-id record is a JSON object")
    reserved = doc["reserved"]
    if not isinstance(reserved, int) or reserved < 0:
        raise ValueError(f"reserved is not a count: {reserved!r}")
    return reserved


WIRE_IDS_STATE = StateQueue(WIRE_IDS_QUEUE, parse_record)


def ordinal_of(count: int) -> int:
    """The 32-bit ordinal of the ``count``-th id (1-based): 1..ORDINAL_MAX, then 1 again."""
    return (count - 1) % ORDINAL_MAX + 1


def local_id(qm_guid: str, ordinal: int) -> str:
    """The id as REST shows it, ``{QM GUID}\\N``: one-to-one with ``uuid:N@QM GUID`` on the
    wire and with the OBJECTID a receipt's ``Correlation`` carries."""
    return f"{{{qm_guid}}}\\{ordinal}"


class WireIds:
    """The per-QM id counter. ``next`` awaits only when a new block must be reserved."""

    def __init__(self, store: MessageStore, queue_id: int, *, block: int = _BLOCK,
                 quarantine: Quarantine | None = None) -> None:
        self.store = store
        self.queue_id = queue_id
        self.block = block
        self._lock = asyncio.Lock()
        self._record: StoredRecord | None = None
        self._stale: list[StoredRecord] = []
        reserved = FIRST_COUNT
        readable = (quarantine.read(WIRE_IDS_STATE, queue_id) if quarantine is not None
                    else read_state(store, WIRE_IDS_STATE, queue_id)[0])
        for record, value in readable:
            if value >= reserved:
                if self._record is not None:
                    self._stale.append(self._record)
                reserved, self._record = value, record
            else:
                self._stale.append(record)
        self._count = reserved  # ids handed out (and every one up to it may have been sent)
        self._reserved = reserved

    @property
    def count(self) -> int:
        """Ids handed out so far (64-bit; the ordinal is this folded to 32 bits)."""
        return self._count

    async def next(self) -> int:
        """The next ordinal, 1..4294967295; its block is on disk before it is returned.

        Raises: QueueError (503/507) when the store cannot write the reservation.
        """
        while self._count >= self._reserved:
            async with self._lock:
                if self._count >= self._reserved:
                    await self._reserve(self._count + self.block)
        self._count += 1
        return ordinal_of(self._count)

    async def _reserve(self, upto: int) -> None:
        doc = json.dumps({"reserved": upto}).encode()
        removes = [r for r in (self._record, *self._stale) if r is not None]
        [record] = await store_call(self.store.commit(
            [sending.state(self.queue_id, doc)], removes=removes))
        self._record, self._stale, self._reserved = record, [], upto
        server_log.debug("message ids reserved up to %d", upto)
