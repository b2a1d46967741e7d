"""Mutable run-time state shared by handlers: is the store open, and if not, why; and the
services that serve once it is (``Services``: all of them or none, so a handler asks once)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway.auth.outbound import OutboundPolicy
from gateway.errors import ProblemError
from gateway.queues.local_names import LocalNames

if TYPE_CHECKING:
    from gateway.inbound.sequencer import StreamSequencer
    from gateway.inbound.streams import IncomingStreams
    from gateway.outbound.landing import Landing
    from gateway.outbound.links import Links
    from gateway.outbound.receipt_sender import ReceiptSender
    from gateway.queues.manager import QueueManager
    from gateway.queues.range_consumers import RangeConsumers
    from gateway.queues.redrive import Redrive
    from gateway.queues.transactions import Transactions
    from mapping.loader import MappingLoader
    from store.message_store import MessageStore

__all__ = ["GatewayState", "Services"]


@dataclass(frozen=True, slots=True)
class Services:
    """What serves requests once the store is open and recovered (gateway.web.app builds
    them together)."""

    store: MessageStore
    queue_manager: QueueManager
    transactions: Transactions
    redrive: Redrive
    consumers: RangeConsumers
    links: Links
    receipts: ReceiptSender
    streams: IncomingStreams
    sequencer: StreamSequencer
    landings: tuple[Landing, ...]


@dataclass(slots=True)
class GatewayState:
    """What ``/readyz`` reports: the store is open and recovered, or it failed and why."""

    store: MessageStore | None = None
    services: Services | None = None  # set once every one of them is built
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
    # With server.workers > 1: every front process has served once (gateway.fronts); until
    # then /readyz says the gateway is starting (a front started again later does not).
    fronts_started: bool = True
    # With server.workers > 1: brings the fronts' request counts in before /metrics renders.
    before_scrape: Callable[[], Awaitable[None]] | None = None

    def serving(self, retry_after_s: int = 1) -> Services:
        """The services, or the 503 every route answers while the gateway cannot serve.

        Raises: ProblemError 503 with Retry-After ``retry_after_s``."""
        if self.services is None or not self.ready:
            raise self.unavailable(retry_after_s)
        return self.services

    def unavailable(self, retry_after_s: int = 1) -> ProblemError:
        """The 503 every route answers while the gateway cannot serve it."""
        return ProblemError(503, self.not_ready_reason() or "not ready", type_slug="not-ready",
                            headers={"Retry-After": str(retry_after_s)})

    def readiness(self) -> str:
        """Why ``/readyz`` answers 503 ("" when ready): ``not_ready_reason``, or the fronts
        still starting. ``entrepot_ready`` and the status page say the same."""
        return self.not_ready_reason() or (
            "" if self.fronts_started else "the front processes are starting")

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
