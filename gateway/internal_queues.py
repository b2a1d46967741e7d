"""Queues the gateway keeps for itself: never listed, never addressable by clients.

Each holds small records written in the same atomic store commit as the messages they
guard, which is what makes them survive a crash together.
"""

from __future__ import annotations

__all__ = ["DEDUP_QUEUE", "STREAMS_QUEUE", "OUTBOX_QUEUE", "INTERNAL_QUEUES"]

DEDUP_QUEUE = "private$/entrepot_dedup$"  # duplicate-detection window (gateway.dedup)
STREAMS_QUEUE = "private$/entrepot_streams$"  # incoming stream positions (gateway.srmp_streams)
OUTBOX_QUEUE = "private$/entrepot_outbox$"  # SRMP receipts to remote admin queues (outbox)
INTERNAL_QUEUES = (DEDUP_QUEUE, STREAMS_QUEUE, OUTBOX_QUEUE)
