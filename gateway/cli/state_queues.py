"""Every internal queue with the reader the gateway reads its records with.

Each module declares its queue's ``StateQueue`` next to its reader and reads through it at
start; ``entrepot check`` reads every live record of these queues with the same readers,
taken from this table, so what it reports is what a start would set aside.
"""

from __future__ import annotations

from gateway.inbound.streams import STREAMS_STATE
from gateway.outbound.outbox import OUTBOX_STATE
from gateway.outbound.outgoing import LINKS_STATE
from gateway.queues.dedup import DEDUP_STATE
from gateway.queues.range_consumers import CONSUMERS_STATE
from gateway.queues.state_records import StateQueue
from gateway.queues.wire_ids import WIRE_IDS_STATE

__all__ = ["STATE_QUEUES"]

# internal queue path -> its declaration
STATE_QUEUES: dict[str, StateQueue[object]] = {
    state.queue: state for state in (DEDUP_STATE, STREAMS_STATE, OUTBOX_STATE, LINKS_STATE,
                                     CONSUMERS_STATE, WIRE_IDS_STATE)}
