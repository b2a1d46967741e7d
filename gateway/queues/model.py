"""A queue and a received message as the queue manager holds them (no behaviour of their
own: the manager decides, gateway.queues.manager), and ``QueueHost``: the part of the
manager its helpers (copies, expiry, purge, sending) may use, so that they depend on a
narrow protocol and not on the manager that calls them."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gateway.msmq.classes import MessageClass
from gateway.msmq.message import MessageProperties
from gateway.queues.events import QueueEvents
from gateway.queues.local_names import LocalNames
from gateway.queues.settings import QueueSettings
from mapping.names import DEADLETTER, DEADXACT, QueuePath
from store.lqs import QueueInfo
from store.message_store import MessageStore
from store.records import StoredRecord

__all__ = ["Queue", "ReceivedMessage", "QueueHost"]


@dataclass(slots=True)
class Queue:
    """A queue in memory: its registration, delivery order, and who waits on it."""

    info: QueueInfo
    path: QueuePath
    settings: QueueSettings
    order: list[collections.deque[int]]  # sequences by priority (index 0 = priority 7)
    reserved: set[int] = field(default_factory=set)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    # The lowest committed position of its registered range consumers (None: none). Nothing
    # at or above it may be removed except by a purge (``gateway.queues.range_consumers``).
    pin: int | None = None

    @property
    def queue_id(self) -> int:
        return self.info.queue_id

    @property
    def is_dead_letter(self) -> bool:
        return self.path.canonical in (DEADLETTER, DEADXACT)


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    message_id: str
    queue: str
    seq: int
    properties: MessageProperties
    body: bytes


class QueueHost(Protocol):
    """What the manager's helpers may ask of it."""

    store: MessageStore
    qm_guid: str
    events: QueueEvents  # what happened to each queue's messages since start (the metrics)
    local_names: LocalNames  # what names this gateway in a format name

    def internal(self, name: str) -> Queue:
        """One of the gateway's own queues (dead-letter, outbox, ...), by canonical name."""

    def lookup(self, canonical: str) -> Queue | None:
        """A queue by canonical name, None when there is none."""

    def queue_by_id(self, queue_id: int) -> Queue:
        """A registered queue by its store id."""

    def queue_by_id_or_none(self, queue_id: int) -> Queue | None:
        """A queue by its store id, None once it was deleted."""

    def arrived(self, queue: Queue, record: StoredRecord) -> None:
        """A committed record became visible in ``queue``."""

    def sent_to_in_transactions(self, queue_id: int) -> bool:
        """An open or prepared transaction sends to the queue."""

    async def purge(self, name: str, *, reason: MessageClass) -> int:
        """Remove every message not being received, with the acknowledgements they ask."""

    def forget(self, queue: Queue) -> None:
        """The queue is no longer known by its name or id."""

    async def finish(self, queue: Queue, records: Sequence[StoredRecord], *,
                     ack: MessageClass, journal: bool = False,
                     dead_letter: MessageClass | None = None) -> list[ReceivedMessage]:
        """Remove ``records`` with the copies and acknowledgements their removal causes."""
