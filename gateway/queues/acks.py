"""Acknowledgement messages (pure): which ones a message's level asks for, and what they hold.

docs/srmp.md, "Message classes, acknowledgement and journal levels". An acknowledgement is a
message to the admin queue whose class names what
happened and whose correlation id is the original message's id. Negative ones carry the
original body (so the sender can see what failed); positive ones carry none.
"""

from __future__ import annotations

from dataclasses import replace

from gateway.msmq.classes import AckLevel, MessageClass
from gateway.msmq.message import MessageProperties

__all__ = ["wants_ack", "ack_properties", "negative"]

_ASKED_BY: dict[MessageClass, AckLevel] = {
    MessageClass.ACK_REACH_QUEUE: AckLevel.POS_ARRIVAL,
    MessageClass.ACK_RECEIVE: AckLevel.POS_RECEIVE,
    MessageClass.NACK_RECEIVE_TIMEOUT: AckLevel.NEG_RECEIVE,
    MessageClass.NACK_Q_PURGED: AckLevel.NEG_RECEIVE,
    MessageClass.NACK_Q_DELETED: AckLevel.NEG_RECEIVE,
    MessageClass.NACK_REACH_QUEUE_TIMEOUT: AckLevel.NEG_ARRIVAL,
    MessageClass.NACK_BAD_DST_Q: AckLevel.NEG_ARRIVAL,
    MessageClass.NACK_Q_EXCEED_QUOTA: AckLevel.NEG_ARRIVAL,
    MessageClass.NACK_NOT_TRANSACTIONAL_Q: AckLevel.NEG_ARRIVAL,
    MessageClass.NACK_BAD_SIGNATURE: AckLevel.NEG_ARRIVAL,
}


def wants_ack(properties: MessageProperties, message_class: MessageClass) -> bool:
    """True when the message names an admin queue and its level asks for this class."""
    asked = _ASKED_BY.get(message_class)
    return bool(properties.admin_queue) and asked is not None and bool(
        AckLevel(properties.ack) & asked)


def ack_properties(original: MessageProperties, original_id: str,
                   message_class: MessageClass, *, now_ms: int, qm_guid: str) -> MessageProperties:
    """The acknowledgement's properties (its body is the original's for negative classes)."""
    return replace(
        MessageProperties(),
        label=original.label,
        message_class=int(message_class),
        correlation_id=original_id,
        sent_at_ms=now_ms,
        source_qm=qm_guid,
        recoverable=True,
        extra={"acknowledged_queue": original.extra.get("queue", "")},
    )


def negative(message_class: MessageClass) -> bool:
    return bool(int(message_class) & 0x8000)

