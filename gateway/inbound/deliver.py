"""Storing what arrives over SRMP: the receiver pipeline after parsing (docs/srmp.md,
"Receiver pipeline and status codes", "Exactly-once in-order delivery: receiver rule").

- Stream (transactional) messages pass the EOD rule; the message and its stream position go
  in one atomic commit. A duplicate or out-of-order one is not stored (200: the sender must
  not retry it) and the sender is re-acknowledged.
- Other messages are checked against the duplicate window by their SRMP id (skipped for the
  "no id" id {NULL GUID, 1} of messages without ``<Msmq>``); a duplicate is answered 200. A
  recoverable message's id is written in the message's own commit, so a resend after a crash
  is still recognised (exactly once in the queue); an express one's is kept in memory.
- A queue over its quota drops the message (MSMQ enqueue status 1): for a non-stream message
  with a dead-letter copy and a negative acknowledgement (NACK_Q_EXCEED_QUOTA) as the message
  asks; a stream message is not accepted, so the sender resends it once there is room. Always
  counted and logged. The machine quota is 503 with Retry-After (Windows retries any 5xx).

A recoverable non-stream message that needs nothing but its own record (no reach-queue
acknowledgement) and whose id is not being stored already is a ``PlainDelivery``: those of
one pass of the loop (a store owner's, from every front, or one process's) are stored
together (``deliver_plain``: one wait on the store for the lot), as plain REST sends are.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Sequence
from typing import NamedTuple

from gateway.inbound.sequencer import StreamSequencer
from gateway.logs import server_log
from gateway.msmq.classes import MessageClass
from gateway.msmq.message import MessageProperties, compose_id
from gateway.queues import sending
from gateway.queues.acks import wants_ack
from gateway.queues.copies import ack_specs, dead_letter_spec
from gateway.queues.dedup import SRMP_KEYED_BY_BODY, DedupWindow
from gateway.queues.errors import QueueError, QueueFull
from gateway.queues.manager import Queue, QueueManager, ReceivedMessage
from gateway.queues.plain_sends import PlainSend, Stored, send_plain
from gateway.srmp.model import Stream
from store.errors import StoreError
from store.framing import RecordFlags
from store.records import StoredRecord

__all__ = ["Outcome", "PlainDelivery", "deliver", "deliver_plain", "plain_delivery"]


class Outcome(enum.Enum):
    STORED = "stored"
    DUPLICATE = "duplicate"
    OUT_OF_ORDER = "out_of_order"
    QUOTA_DROPPED = "quota_dropped"


async def deliver(qm: QueueManager, sequencer: StreamSequencer, queue: Queue,
                  props: MessageProperties, body: bytes, *, stream: Stream | None,
                  queue_url: str, vouched: bool = True) -> Outcome:
    """``props``: made for this message alone (completed in place when it is stored).
    ``vouched``: False for a sender with no certificate from outside ``srmp.allow_networks``
    (its duplicates are told by id, destination and body: ``DedupWindow.srmp_entry``).

    Raises: QueueError (400 transactional mismatch, 503/507 store full or stopped)."""
    queue = qm.check_send(queue.path.display, transactional=stream is not None)
    if stream is None:
        return await _deliver_single(qm, queue, props, body, vouched)
    return Outcome(await sequencer.deliver(queue, props, body, stream, queue_url))


class PlainDelivery(NamedTuple):
    """A message for ``deliver_plain``: its record, and its duplicate-window key (None for a
    message without an id), digest and answer."""

    send: PlainSend
    props: MessageProperties
    body: bytes
    key: str | None
    digest: str
    answer: dict[str, object]


def plain_delivery(qm: QueueManager, queue: Queue, props: MessageProperties, body: bytes, *,
                   vouched: bool) -> PlainDelivery | Outcome | None:
    """``deliver`` of a non-stream message, up to its store commit: the message for
    ``deliver_plain``, or ``Outcome.DUPLICATE``; None when it takes ``deliver``'s whole way
    (express, an acknowledgement asked for, or its id being stored now). Its id is then
    being stored until ``deliver_plain`` has run.

    Raises: as ``deliver``."""
    queue = qm.check_send(queue.path.display, transactional=False)
    dedup = qm.dedup
    assert dedup is not None
    if not props.recoverable or wants_ack(props, MessageClass.ACK_REACH_QUEUE):
        return None
    key, digest, answer = _entry(dedup, queue, props, body, vouched)
    if key is not None:
        if dedup.busy(key):
            return None
        if dedup.known(key, digest) is not None:
            return Outcome.DUPLICATE
    props.arrive(int(time.time() * 1000))
    _, spec = sending.message(queue, props, body,
                              flags=RecordFlags.NONE if key is None else RecordFlags.KEYED)
    if key is not None:
        dedup.begin(key)
    return PlainDelivery(PlainSend(queue, spec, props.message_id), props, body, key, digest,
                         answer)


async def deliver_plain(qm: QueueManager, deliveries: Sequence[PlainDelivery]
                        ) -> list[Outcome | QueueError | StoreError]:
    """Store ``plain_delivery``'s messages together: for each, in order, its outcome or why
    it was not stored (as ``deliver`` would raise it; a ``StoreError`` the queue domain does
    not name). A queue over its quota drops its message, as ``deliver`` does.

    Raises:
        QueueError: the store takes no writes (503); none was stored.
    """
    dedup = qm.dedup
    assert dedup is not None
    try:
        made = await send_plain(qm, [delivery.send for delivery in deliveries])
        outcomes: list[Outcome | QueueError | StoreError] = []
        for delivery, stored in zip(deliveries, made):
            if isinstance(stored, Stored):
                if delivery.key is not None:
                    dedup.held(delivery.key, delivery.digest, delivery.answer,
                               (delivery.send.queue.queue_id, stored.seq))
                outcomes.append(Outcome.STORED)
            elif isinstance(stored, QueueFull):
                try:
                    await _quota_nack(qm, delivery.send.queue, delivery.props, delivery.body)
                except (QueueError, StoreError) as exc:  # this message's answer, as deliver's
                    outcomes.append(exc)
                else:
                    outcomes.append(Outcome.QUOTA_DROPPED)
            else:
                outcomes.append(stored)
        return outcomes
    finally:
        for delivery in deliveries:
            if delivery.key is not None:
                dedup.failed(delivery.key)  # no-op for one stored


def _entry(dedup: DedupWindow, queue: Queue, props: MessageProperties, body: bytes,
           vouched: bool) -> tuple[str | None, str, dict[str, object]]:
    """The message's duplicate-window key (None without an id), digest and answer."""
    if not vouched:
        props.extra[SRMP_KEYED_BY_BODY] = "1"
    entry, digest, answer = dedup.srmp_entry(props.message_id, queue.path.canonical,
                                             None if vouched else body)
    return (entry if props.message_id else None), digest, answer


async def _deliver_single(qm: QueueManager, queue: Queue, props: MessageProperties,
                          body: bytes, vouched: bool) -> Outcome:
    dedup = qm.dedup
    assert dedup is not None
    key, digest, answer = _entry(dedup, queue, props, body, vouched)
    if key is not None:
        if await dedup.seen(key, digest):
            return Outcome.DUPLICATE
        dedup.begin(key)
    # A recoverable message holds its id itself (a KEYED record) until the window flushes
    # it: a sender that lost the 200 in a crash resends it, and the resend must find the id
    # (gateway.queues.dedup says how it is found). An express message does not survive a restart,
    # so its id is kept in memory only.
    keyed = key is not None and props.recoverable
    try:
        made = await _commit(qm, queue, props, body, keyed=keyed)
        if made is None:
            await _quota_nack(qm, queue, props, body)
            return Outcome.QUOTA_DROPPED
        if key is not None:
            if keyed:
                dedup.held(key, digest, answer, (made[0].queue_id, made[0].seq))
            else:
                dedup.remember(key, digest, answer)
        return Outcome.STORED
    finally:
        if key is not None:
            dedup.failed(key)  # no-op when it was stored


async def _commit(qm: QueueManager, queue: Queue, props: MessageProperties, body: bytes, *,
                  keyed: bool) -> list[StoredRecord] | None:
    """Store the message and the delivery acknowledgement it asks for; None when the queue
    is over its quota. A lone message takes the cheaper non-transactional append (one fsync,
    no QMLog)."""
    now_ms = int(time.time() * 1000)
    props.arrive(now_ms)
    seq = sending.reserve(qm.store, queue)
    acks: list[sending.Send] = []
    try:
        if wants_ack(props, MessageClass.ACK_REACH_QUEUE):
            message = ReceivedMessage(props.message_id or compose_id(
                qm.qm_guid, queue.queue_id, seq), queue.path.display, seq, props, body)
            acks = ack_specs(qm, queue, message, MessageClass.ACK_REACH_QUEUE, now_ms)
    except BaseException:
        qm.store.release_seq(queue.queue_id, seq)
        raise
    sends = [sending.message(queue, props, body, seq=seq,
                             flags=RecordFlags.KEYED if keyed else RecordFlags.NONE), *acks]
    try:
        return await sending.commit(qm.store, sends, arrived=qm.arrived)
    except QueueFull:
        return None


async def _quota_nack(qm: QueueManager, queue: Queue, props: MessageProperties,
                      body: bytes) -> None:
    now_ms = int(time.time() * 1000)
    nack = MessageClass.NACK_Q_EXCEED_QUOTA
    props.arrive(now_ms)
    message = ReceivedMessage(props.message_id, queue.path.display, 0, props, body)
    specs = ack_specs(qm, queue, message, nack, now_ms)
    acknowledged = bool(specs)
    if props.journal == "deadletter":
        specs.append(dead_letter_spec(qm, queue, message, nack, now_ms))
    if specs:
        await sending.commit(qm.store, specs, atomic=True, arrived=qm.arrived)
    server_log.warning("queue %s over its quota: message %s dropped (%s; dead-lettered=%s, "
                       "acknowledged=%s)", queue.path.display, props.message_id or "(no id)",
                       nack.msmq_name, props.journal == "deadletter",
                       acknowledged)
