"""Target journaling: the copy a queue's journal keeps of each message received from it.

As MSMQ does, a copy that the journal's quota or the machine journal quota has no room for
is not made, and the receive goes on without it: failing the receive instead would block the
queue for as long as nobody empties its journal, and for ever for a message larger than the
journal's whole quota. Each copy left out is counted (``not_journaled``), and a WARNING
names the queue, at most once a minute for each journal.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Protocol

from gateway.queues import sending
from gateway.queues.events import QueueEvents
from gateway.queues.model import Queue, ReceivedMessage
from gateway.queues.settings import QueueSettings
from gateway.queues.store_errors import store_call
from mapping.names import QueuePath, journal_of
from store.framing import record_size
from store.message_store import MessageStore
from store.quota import Charge, QuotaBook


class _Queues(Protocol):
    """What ``sync_journal`` needs of the queue manager."""

    store: MessageStore

    def lookup(self, canonical: str) -> Queue | None: ...

    async def register(self, path: QueuePath, settings: QueueSettings, *,
                       journal_class: bool = False, extra: dict[str, str] | None = None
                       ) -> Queue: ...

__all__ = ["JournalCopies", "sync_journal"]

log = logging.getLogger("entrepot.queues.journal")

_WARN_EVERY_S = 60.0
_WARNED_MAX = 4096


async def sync_journal(qm: _Queues, queue: Queue) -> None:
    """The queue's journal made when it is first asked for, and its quota kept as set."""
    journal_path = journal_of(queue.path)
    journal = qm.lookup(journal_path.canonical)
    if journal is None and queue.settings.journal:
        await qm.register(journal_path, QueueSettings(
            journal_quota=queue.settings.journal_quota), journal_class=True)
    elif journal is not None:
        await store_call(qm.store.update_queue(
            journal.queue_id, {"quota": str(queue.settings.journal_quota)}))


class JournalCopies:
    """Makes the journal copies of a receive, within the quotas."""

    def __init__(self, quotas: QuotaBook, events: QueueEvents) -> None:
        self._quotas = quotas
        self._events = events
        self._warned: dict[int, float] = {}  # journal -> when its last WARNING was

    def copies(self, queue: Queue, journal: Queue, messages: Sequence[ReceivedMessage],
               charges: list[Charge] | None = None) -> list[sending.Send]:
        """The copies of ``messages`` that fit, in order; those that do not are left out.
        ``charges``: copies already made for the same commit (each made one is added)."""
        made: list[sending.Send] = []
        charges = [] if charges is None else charges
        left_out = 0
        for message in messages:
            copy = sending.copy(journal, replace(message.properties,
                                                 message_id=message.message_id), message.body)
            charge = Charge(journal.queue_id, record_size(len(copy[1].payload)), True)
            if self._quotas.fits([*charges, charge]):
                made.append(copy)
                charges.append(charge)
            else:
                left_out += 1
        if left_out:
            self._events.count(queue.path.display, "not_journaled", left_out)
            now = time.monotonic()
            if now - self._warned.get(journal.queue_id, -_WARN_EVERY_S) >= _WARN_EVERY_S:
                if len(self._warned) >= _WARNED_MAX:
                    self._warned.clear()
                self._warned[journal.queue_id] = now
                log.warning("the journal of %s has no room (its journal_quota or the machine "
                            "journal quota): %d received message(s) not journaled",
                            queue.path.display, left_out)
        return made
