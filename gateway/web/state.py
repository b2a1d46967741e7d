"""Mutable run-time state shared by handlers: is the store open, and if not, why."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.auth.outbound import OutboundPolicy
from gateway.queues.destinations import LocalNames
from gateway.errors import ProblemError

if TYPE_CHECKING:
    from mapping.loader import MappingLoader
    from gateway.queues.manager import QueueManager
    from gateway.outbound.landing import Landing
    from gateway.outbound.links import Links
    from gateway.queues.range_consumers import RangeConsumers
    from gateway.outbound.receipt_sender import ReceiptSender
    from gateway.queues.redrive import Redrive
    from gateway.inbound.sequencer import StreamSequencer
    from gateway.inbound.streams import IncomingStreams
    from gateway.queues.transactions import Transactions
    from store.message_store import MessageStore

__all__ = ["GatewayState"]


@dataclass(slots=True)
class GatewayState:
    """What ``/readyz`` reports: the store is open and recovered, or it failed and why."""

    store: MessageStore | None = None
    queue_manager: QueueManager | None = None
    transactions: Transactions | None = None
    redrive: Redrive | None = None
    streams: IncomingStreams | None = None
    sequencer: StreamSequencer | None = None
    receipts: ReceiptSender | None = None
    links: Links | None = None
    consumers: RangeConsumers | None = None
    landings: list[Landing] = field(default_factory=list)
    ready: bool = False
    failure: str | None = None
    stopping: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    local: LocalNames = LocalNames(frozenset(), frozenset())
    # Where senders' words may make the gateway connect (receipts, acknowledgements).
    outbound: OutboundPolicy = field(default_factory=lambda: OutboundPolicy(()))
    mapping: MappingLoader | None = None
    reload_mapping: asyncio.Event = field(default_factory=asyncio.Event)
    started_at: float = field(default_factory=time.time)  # the status page's uptime

    def unavailable(self, retry_after_s: int = 1) -> ProblemError:
        """The 503 every route answers while the gateway cannot serve it."""
        return ProblemError(503, self.not_ready_reason() or "not ready", type_slug="not-ready",
                            headers={"Retry-After": str(retry_after_s)})

    def not_ready_reason(self) -> str:
        if self.stopping:
            return "the gateway is shutting down"
        if self.failure is not None:
            return f"the store failed: {self.failure}"
        if self.store is not None and self.store.failed is not None:
            return f"the store stopped all writes: {self.store.failed}"
        if not self.ready:
            return "the store is being opened and recovered"
        return ""
