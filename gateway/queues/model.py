"""A queue and a received message as the queue manager holds them (no behaviour of their
own: the manager decides, gateway.queues.manager)."""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass, field

from gateway.msmq.message import MessageProperties
from gateway.queues.settings import QueueSettings
from mapping.names import DEADLETTER, DEADXACT, QueuePath
from store.lqs import QueueInfo

__all__ = ["Queue", "ReceivedMessage"]


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
