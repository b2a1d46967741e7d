"""Queues the gateway keeps for itself: never listed, never addressable by clients.

Each holds small records written in the same atomic store commit as the messages they
guard, which is what makes them survive a crash together.
"""

from __future__ import annotations

from mapping.names import SYSTEM_QUEUES, QueuePath

__all__ = ["DEDUP_QUEUE", "STREAMS_QUEUE", "OUTBOX_QUEUE", "LINKS_QUEUE", "CONSUMERS_QUEUE",
           "WIRE_IDS_QUEUE", "INTERNAL_QUEUES", "OUTGOING_PREFIX", "is_internal", "not_creatable"]

DEDUP_QUEUE = "private$/entrepot_dedup$"  # duplicate-detection window (gateway.queues.dedup)
STREAMS_QUEUE = "private$/entrepot_streams$"  # incoming stream positions (gateway.inbound.streams)
OUTBOX_QUEUE = "private$/entrepot_outbox$"  # SRMP receipts to remote admin queues (outbox)
LINKS_QUEUE = "private$/entrepot_links$"  # outgoing streams: id and first sequence (links)
CONSUMERS_QUEUE = "private$/entrepot_consumers$"  # range consumers and floors (range_consumers)
WIRE_IDS_QUEUE = "private$/entrepot_ids$"  # reserved blocks of SRMP message ids (wire_ids)
INTERNAL_QUEUES = (DEDUP_QUEUE, STREAMS_QUEUE, OUTBOX_QUEUE, LINKS_QUEUE, CONSUMERS_QUEUE,
                   WIRE_IDS_QUEUE)
# Outgoing queues, one per remote destination: this prefix + a hash of the destination.
OUTGOING_PREFIX = "private$/entrepot_out$"


# Names of this form are the gateway's, present ones and any it may add: no client creates,
# sends to or names one (nor its journal) as an admin or response queue.
_RESERVED_PREFIX = "private$/entrepot_"


def not_creatable(path: QueuePath) -> bool:
    """A system queue, a journal or a name of the gateway's: no client creates one (the
    API's PUT, a configuration's ``[[queues]]``)."""
    return (path.system or path.journal or path.canonical in SYSTEM_QUEUES
            or is_internal(path.canonical))


def is_internal(canonical: str) -> bool:
    """Not a client's queue: not listed, not addressable, never a reply address."""
    base = canonical.removesuffix(";journal")
    return (base in INTERNAL_QUEUES or base.startswith(OUTGOING_PREFIX)
            or (base.startswith(_RESERVED_PREFIX) and base.endswith("$")))
