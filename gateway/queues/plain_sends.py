"""Sends stored together: many messages that each need nothing but their own durable record
(outside any transaction, no journal copy, no reach-queue acknowledgement, not express), as
the store owner gets them from its fronts in one pass of its loop (gateway.fronts.commands).

One wait on the store for the lot, instead of a task and a wait each: the owner's cost per
message is what bounds the whole gateway. Each send still has its own fate: one refused
(quota, size) leaves the others stored, and every answer is the one ``QueueManager.send``
would give.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NamedTuple

from gateway.msmq.classes import JournalLevel, MessageClass
from gateway.msmq.message import MessageProperties
from gateway.queues import sending
from gateway.queues.acks import wants_ack
from gateway.queues.errors import QueueError
from gateway.queues.manager import QueueManager
from gateway.queues.model import Queue, ReceivedMessage
from gateway.queues.send_rules import check_send_to
from gateway.queues.store_errors import queue_error, store_call
from store.errors import StoreError
from store.records import SendSpec

__all__ = ["PlainSend", "plain_send", "send_plain"]


class PlainSend(NamedTuple):
    """A send ``plain_send`` checked and encoded: its queue, its record, and the properties
    and body its answer names."""

    queue: Queue
    spec: SendSpec
    properties: MessageProperties
    body: bytes


def plain_send(qm: QueueManager, name: str, body: bytes, properties: MessageProperties,
               transaction: str | None) -> PlainSend | None:
    """The send, stamped and encoded for ``send_plain``; None when it needs more than its
    own record (``QueueManager.send`` does it all). ``properties`` are the caller's own:
    they are completed in place.

    Raises:
        QueueError: the refusals of ``QueueManager.send`` (no such queue, one nobody sends
            to).
    """
    queue = qm.queue(name)
    transactional = queue.settings.transactional if transaction is None else (
        transaction != "none")
    if (transactional or not properties.recoverable
            or properties.journal == JournalLevel.JOURNAL.value
            or wants_ack(properties, MessageClass.ACK_REACH_QUEUE)):
        return None
    check_send_to(queue, transactional)
    properties.transactional = False
    sending.stamp(properties, int(time.time() * 1000), qm.qm_guid)
    return PlainSend(queue, sending.message(queue, properties, body)[1], properties, body)


async def send_plain(qm: QueueManager, sends: Sequence[PlainSend]
                     ) -> list[ReceivedMessage | QueueError | StoreError]:
    """Store ``plain_send``'s records together: for each, in order, the message it became,
    or why not (the ``QueueError`` ``QueueManager.send`` would raise; a ``StoreError`` the
    queue domain does not name).

    Raises:
        QueueError: the store takes no writes (503); none was stored.
    """
    made = await store_call(qm.store.append_many([send.spec for send in sends]))
    answers: list[ReceivedMessage | QueueError | StoreError] = []
    for send, record in zip(sends, made):
        if isinstance(record, StoreError):
            answers.append(queue_error(record) or record)
            continue
        qm.arrived(send.queue, record)
        answers.append(ReceivedMessage(qm.message_id(send.queue, record, send.properties),
                                       send.queue.path.display, record.seq, send.properties,
                                       send.body))
    return answers
