"""Receipts this gateway sends (pure): stream receipts, delivery and commitment receipts.
docs/srmp.md, "Message types and receipts", "Stream receipts and the order queue", "Final
stream receipts", "Commitment receipts"; vectors V05, V07 (the shape Windows sends).
"""

from __future__ import annotations

from gateway.srmp.model import (
    INFINITE_TEXT,
    NULL_GUID,
    CommitmentReceipt,
    DeliveryReceipt,
    Envelope,
    MsmqHeader,
    Path,
    StreamReceipt,
    format_message_id,
    format_srmp_time,
    objectid_to_base64,
)

__all__ = ["stream_receipt", "delivery_receipt", "commitment_receipt", "ORDER_ACK_ACTION",
           "TTRQ_S"]

ORDER_ACK_ACTION = "MSMQ:QM Ordering Ack"
TTRQ_S = 4 * 86400  # Windows' default time-to-reach-queue (LongLiveTime)


def _lower_scheme(url: str) -> str:
    """``HTTP://host/...`` as Windows writes it, ``http://host/...`` (V05, V07): a sender may
    name its receipt address in any case, the scheme is case-insensitive (RFC 3986)."""
    scheme, sep, rest = url.partition("://")
    return scheme.lower() + sep + rest if sep else url


def _msmq(qm_guid: str, message_class: int, priority: int, now_s: int,
          correlation: str | None = None) -> MsmqHeader:
    # Correlation and App are written even when zero, as Windows does in every receipt of
    # the spec (4.3, and 4.4's stream receipts: 20 zero bytes when there is no original).
    return MsmqHeader(message_class=message_class, priority=priority,
                      correlation=correlation or objectid_to_base64(NULL_GUID, 0), app=0,
                      body_type=0,
                      hash_algorithm=0, source_qm=qm_guid,
                      ttrq=format_srmp_time(now_s + TTRQ_S))


def stream_receipt(*, stream_id: str, last_ordinal: int, send_to: str, queue_url: str,
                   qm_guid: str, ordinal: int, now_s: int,
                   final: CommitmentReceipt | None = None, final_class: int = 0,
                   correlation: str | None = None) -> Envelope:
    """An order acknowledgement (class 255), or with ``final`` a final stream receipt, whose
    class says how the message left (ACK_RECEIVE, NACK_Q_PURGED, ...; docs/srmp.md,
    "Final stream receipts")."""
    return Envelope(
        path=Path(action=ORDER_ACK_ACTION, to=_lower_scheme(send_to),
                  id=format_message_id(ordinal, qm_guid),
                  rev_via=queue_url),
        expires_at=INFINITE_TEXT, sent_at=format_srmp_time(now_s),
        commitment_receipt=final,
        stream_receipt=StreamReceipt(stream_id, last_ordinal),
        msmq=_msmq(qm_guid, final_class if final is not None else 255, 0, now_s,
                   correlation if final is not None else None))


def delivery_receipt(*, original_id: str, label: str, send_to: str, queue_url: str,
                     received_at_s: int, qm_guid: str, ordinal: int, now_s: int,
                     correlation: str) -> Envelope:
    """MQMSG_CLASS_ACK_REACH_QUEUE (2) for ``original_id`` (V05)."""
    return Envelope(
        path=Path(action="MSMQ:" + label, to=_lower_scheme(send_to),
                  id=format_message_id(ordinal, qm_guid),
                  rev_via=queue_url),
        expires_at=INFINITE_TEXT, sent_at=format_srmp_time(now_s),
        delivery_receipt=DeliveryReceipt(format_srmp_time(received_at_s), original_id),
        msmq=_msmq(qm_guid, 2, 3, now_s, correlation))


def commitment_receipt(*, original_id: str, label: str, send_to: str, queue_url: str,
                       message_class: int, qm_guid: str, ordinal: int, now_s: int,
                       correlation: str) -> Envelope:
    """ACK_RECEIVE (positive) or one of the negative receive classes (V07)."""
    decision = "negative" if message_class & 0x8000 else "positive"
    return Envelope(
        path=Path(action="MSMQ:" + label, to=_lower_scheme(send_to),
                  id=format_message_id(ordinal, qm_guid),
                  rev_via=queue_url),
        expires_at=INFINITE_TEXT, sent_at=format_srmp_time(now_s),
        commitment_receipt=CommitmentReceipt(format_srmp_time(now_s), decision, original_id),
        msmq=_msmq(qm_guid, message_class, 3, now_s, correlation))
