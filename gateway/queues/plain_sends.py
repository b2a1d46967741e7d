"""Sends stored together: many messages that each need nothing but their own durable record
(outside any transaction, no journal copy, no reach-queue acknowledgement, not express), as
the store owner gets them from its fronts in one pass of its loop (gateway.fronts.commands).

One wait on the store for the lot, instead of a task and a wait each: the owner's cost per
message is what bounds the whole gateway. Each send still has its own fate: one refused
(quota, size) leaves the others stored, and every answer is the one ``QueueManager.send``
would give.

A front stamps and encodes such a message itself (``only_its_record``, ``stamp_and_encode``)
and the owner takes the record as it comes (``encoded_send``): the owner then builds no
properties and encodes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NamedTuple

from gateway.msmq.classes import JournalLevel, MessageClass
from gateway.msmq.message import MessageProperties, encode_payload
from gateway.queues import sending
from gateway.queues.acks import wants_ack
from gateway.queues.errors import QueueError
from gateway.queues.manager import QueueManager
from gateway.queues.model import Queue
from gateway.queues.send_rules import check_send_to
from gateway.queues.store_errors import queue_error
from store.errors import StoreError
from store.records import SendSpec

__all__ = ["PlainSend", "Stored", "encoded_send", "only_its_record", "plain_send",
           "send_plain", "stamp_and_encode"]


class PlainSend(NamedTuple):
    """A send checked and encoded: its queue, its record, and the id the message came with
    ("" for one whose id is made here)."""

    queue: Queue
    spec: SendSpec
    own_id: str


class Stored(NamedTuple):
    """What the answer to a stored send names."""

    message_id: str
    queue: str
    seq: int


def only_its_record(properties: MessageProperties) -> bool:
    """Whether a message outside any transaction needs nothing but its own durable record
    (no journal copy, no reach-queue acknowledgement, not express)."""
    return (properties.recoverable and properties.journal != JournalLevel.JOURNAL.value
            and not wants_ack(properties, MessageClass.ACK_REACH_QUEUE))


def stamp_and_encode(properties: MessageProperties, body: bytes, qm_guid: str) -> bytes:
    """The record's payload of a message sent outside any transaction, stamped as it
    arrives now (``properties`` completed in place)."""
    properties.transactional = False
    sending.stamp(properties, int(time.time() * 1000), qm_guid)
    return encode_payload(properties, body)


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
    if transactional or not only_its_record(properties):
        return None
    check_send_to(queue, transactional)
    payload = stamp_and_encode(properties, body, qm.qm_guid)
    return PlainSend(queue, sending.encoded(queue, payload, priority=properties.priority,
                                            expires_ms=properties.receive_by_ms)[1],
                     properties.message_id)


def encoded_send(qm: QueueManager, name: str, payload: bytes, priority: int,
                 receive_by_ms: int, transaction: str | None) -> PlainSend | None:
    """``plain_send`` of a message a front stamped and encoded (``stamp_and_encode``, with
    ``only_its_record`` true of it); None when the queue makes it transactional
    (``QueueManager.send`` does it all, on the decoded payload).

    Raises:
        QueueError: as ``plain_send``.
    """
    queue = qm.queue(name)
    if transaction is None and queue.settings.transactional:
        return None
    check_send_to(queue, False)
    return PlainSend(queue, sending.encoded(queue, payload, priority=priority,
                                            expires_ms=receive_by_ms)[1], "")


async def send_plain(qm: QueueManager, sends: Sequence[PlainSend]
                     ) -> list[Stored | QueueError | StoreError]:
    """Store ``plain_send``'s records together: for each, in order, what it became, or why
    not (the ``QueueError`` ``QueueManager.send`` would raise; a ``StoreError`` the queue
    domain does not name).

    Raises:
        QueueError: the store takes no writes (503); none was stored.
    """
    made = await sending.commit_each(qm.store, [(send.queue, send.spec) for send in sends],
                                     qm.arrived)
    answers: list[Stored | QueueError | StoreError] = []
    for send, record in zip(sends, made):
        if isinstance(record, StoreError):
            answers.append(queue_error(record) or record)
            continue
        answers.append(Stored(qm.id_of(send.queue, record, send.own_id),
                              send.queue.path.display, record.seq))
    return answers
