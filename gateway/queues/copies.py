"""Copies a message's fate causes: dead-letter copies and acknowledgements
(docs/architecture.md §Queue semantics).

Both are records composed by gateway.queues.sending, committed by the caller in the same
atomic commit as whatever caused them (a removal, an expiry, a refusal). An acknowledgement
for an admin queue on another host goes to the outbox (an internal queue), from which
gateway.outbound.outbox posts it as an SRMP receipt; it is thereby as durable as the commit
that caused it.
"""

from __future__ import annotations

from dataclasses import replace

from gateway.logs import server_log
from gateway.msmq.classes import MessageClass
from gateway.queues import sending
from gateway.queues.acks import ack_properties, negative, wants_ack
from gateway.queues.internal import OUTBOX_QUEUE, is_internal
from gateway.queues.local_names import local_queue
from gateway.queues.model import Queue, QueueHost, ReceivedMessage
from mapping.names import DEADLETTER, DEADXACT, MACHINE_JOURNAL

__all__ = ["dead_letter_spec", "ack_specs"]

_NOT_ADMIN = (DEADLETTER, DEADXACT, MACHINE_JOURNAL)


def dead_letter_spec(qm: QueueHost, queue: Queue, message: ReceivedMessage,
                     reason: MessageClass, now_ms: int) -> sending.Send:
    target = qm.internal(DEADXACT if message.properties.transactional else DEADLETTER)
    props = replace(message.properties, message_class=int(reason),
                    message_id=message.message_id,
                    extra={**message.properties.extra, "dead_letter_class": reason.msmq_name,
                           "source_queue": queue.path.display,
                           "dead_lettered_at_ms": str(now_ms)})
    return sending.copy(target, props, message.body, priority=props.priority)


def ack_specs(qm: QueueHost, queue: Queue, message: ReceivedMessage,
              message_class: MessageClass, now_ms: int) -> list[sending.Send]:
    """The acknowledgement ``message``'s level asks for, if any: into a local admin queue, or
    into the outbox for an admin queue named by an http(s) URL."""
    props = message.properties
    final = _final_stream_receipt(qm, queue, message, message_class, now_ms)
    if not wants_ack(props, message_class):
        return final
    receipt_to = ""
    # A path, or a format name of this gateway ("DIRECT=OS:.\\private$\\q"): the local queue,
    # as the send was checked.
    canonical = local_queue(props.admin_queue, qm.local_names)
    if canonical is not None:
        # Never into a queue the gateway keeps for itself or a dead-letter queue or journal,
        # whatever a sender wrote (requests naming one are refused; this holds for messages
        # stored before that check existed).
        admin = None if (is_internal(canonical) or canonical in _NOT_ADMIN
                         or canonical.endswith(";journal")) else qm.lookup(canonical)
    else:
        receipt_to = _receipt_url(props.admin_queue, props.extra, message_class)
        admin = qm.internal(OUTBOX_QUEUE) if receipt_to else None
    if admin is None or admin.settings.transactional:
        # A transactional admin queue cannot take acknowledgements (MSMQ rule).
        server_log.warning("acknowledgement %s for %s not deliverable to %r",
                           message_class.msmq_name, message.message_id, props.admin_queue)
        return final
    ack_props = ack_properties(replace(props, extra={"queue": queue.path.display}),
                               message.message_id, message_class, now_ms=now_ms,
                               qm_guid=qm.qm_guid)
    if admin.path.canonical == OUTBOX_QUEUE:
        ack_props = replace(ack_props, extra={
            **ack_props.extra, "receipt_to": receipt_to,
            "original_srmp_id": props.extra.get("srmp_id", ""),
            "queue_url": props.extra.get("srmp_to", ""),
            "received_at_ms": str(props.arrived_at_ms or now_ms)})
    body = message.body if negative(message_class) else b""
    return [*final, sending.copy(admin, ack_props, body)]


_FINAL_CLASSES = (MessageClass.ACK_RECEIVE, MessageClass.NACK_Q_PURGED,
                  MessageClass.NACK_Q_DELETED, MessageClass.NACK_RECEIVE_TIMEOUT,
                  MessageClass.NACK_RECEIVE_REJECTED, MessageClass.NACK_PURGED)


def _final_stream_receipt(qm: QueueHost, queue: Queue, message: ReceivedMessage,
                          message_class: MessageClass, now_ms: int
                          ) -> list[sending.Send]:
    """A stream message that asked for negative source journaling (``DeadLetter/``) tells
    its sender how it left the queue: a final stream receipt, positive when read, negative
    when purged, deleted with its queue or timed out; nothing otherwise (docs/srmp.md,
    "Final stream receipts"; [MC-MQSRM] §3.1.7.3.3)."""
    extra = message.properties.extra
    receipts_to = extra.get("stream_receipts_to", "")
    if (message.properties.journal != "deadletter" or not receipts_to
            or message_class not in _FINAL_CLASSES):
        return []
    outbox = qm.internal(OUTBOX_QUEUE)
    props = ack_properties(replace(message.properties, extra={"queue": queue.path.display}),
                           message.message_id, message_class, now_ms=now_ms,
                           qm_guid=qm.qm_guid)
    props = replace(props, extra={
        **props.extra, "receipt_to": receipts_to, "final_stream_id": extra["stream_id"],
        "final_ordinal": extra["stream_current"], "original_srmp_id": extra.get("srmp_id", ""),
        "queue_url": extra.get("srmp_to", "")})
    return [sending.copy(outbox, props, b"")]


def _receipt_url(admin_queue: str, extra: dict[str, str], message_class: MessageClass) -> str:
    """The URL an SRMP receipt of this class goes to: the sender may have named one for
    delivery receipts and another for commitment receipts."""
    named = extra.get("srmp_delivery_receipt_to" if message_class is MessageClass.ACK_REACH_QUEUE
                      else "srmp_commitment_receipt_to")
    if named and named.lower().startswith(("http://", "https://")):
        return named
    if admin_queue.upper().startswith(("DIRECT=HTTP://", "DIRECT=HTTPS://")):
        return admin_queue[len("DIRECT="):]
    return ""
