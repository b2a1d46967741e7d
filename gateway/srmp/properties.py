"""SRMP envelope -> the message properties the queue manager keeps (pure). docs/srmp.md,
"Envelope and header elements", "Message classes, acknowledgement and journal levels".

Time fields: ``expiresAt`` is taken as the time-to-be-received deadline (every example has
sentAt + TTBR there, 2038 meaning "never") and ``TTrq`` as time-to-reach-queue, which is only
checked before sending ([MC-MQSRM] §3.1.5.1.4). The raw envelope and the MIME head and tail around
the body are kept in the message's extra properties, so a reader can get the whole compound
message back byte for byte without the body being stored twice.

Acknowledgement levels (§3.1.5.1.1): ``deliveryReceiptRequest`` is POS_ARRIVAL, ``positiveOnly``
POS_RECEIVE, ``negativeOnly`` NEG_RECEIVE together with NEG_ARRIVAL (SRMP has no element of its
own for negative arrival; every MSMQ level that asks for negative receive asks for it too), so
a queue-quota drop is acknowledged negatively to whoever asked for negative receipts.
"""

from __future__ import annotations

import base64

from gateway.msmq.classes import AckLevel
from gateway.msmq.message import LABEL_CHARS_MAX, MessageProperties
from gateway.srmp.codec import SrmpMessage
from gateway.srmp.errors import EnvelopeError
from gateway.srmp.model import (
    INFINITE_TIME,
    NULL_GUID,
    Envelope,
    objectid_from_base64,
    parse_message_id,
    parse_srmp_time,
)

__all__ = ["message_properties", "add_mime_parts", "objectid_text", "format_name_of_url",
           "compound_message", "envelope_text"]


def objectid_text(guid: str, ordinal: int) -> str:
    """MSMQ's text form of an OBJECTID, as REST shows message ids: ``{guid}\\N``."""
    return f"{{{guid}}}\\{ordinal}"


def format_name_of_url(url: str) -> str:
    """A ``<via>``/``<sendTo>`` value as a format name (``MSMQ:`` + format name is allowed)."""
    if url[:5].upper() == "MSMQ:":
        return url[5:]
    return "DIRECT=" + url


def message_properties(message: SrmpMessage, raw: bytes, *, now_ms: int,
                       mime_parts: bool = True) -> MessageProperties:
    """``mime_parts=False`` leaves out the MIME head and tail (``add_mime_parts`` adds them
    where ``raw`` is at hand: a parse worker need not send them back).

    Raises: EnvelopeError for values SRMP allows but MSMQ does not (label too long)."""
    env = message.envelope
    label = env.label or ""
    if len(label) > LABEL_CHARS_MAX:
        raise EnvelopeError(f"label of {len(label)} characters is over {LABEL_CHARS_MAX} "
                            "(MQ_ERROR_LABEL_TOO_LONG)")
    ordinal, id_guid = parse_message_id(env.path.id)
    msmq = env.msmq
    services = env.services
    ack = AckLevel.NONE
    admin = ""
    extra = _extra(message, raw, mime_parts)
    if services is not None:
        if services.delivery_receipt_to:
            ack |= AckLevel.POS_ARRIVAL
            admin = format_name_of_url(services.delivery_receipt_to)
            extra["srmp_delivery_receipt_to"] = services.delivery_receipt_to
        if services.commitment_receipt_to:
            if services.positive_only:
                ack |= AckLevel.POS_RECEIVE
            if services.negative_only:
                ack |= AckLevel.NACK_RECEIVE  # with NEG_ARRIVAL, as MSMQ's named levels
            admin = format_name_of_url(services.commitment_receipt_to)
            extra["srmp_commitment_receipt_to"] = services.commitment_receipt_to
    expires = parse_srmp_time(env.expires_at)
    correlation = ""
    if msmq is not None and msmq.correlation is not None:
        guid, uniquifier = objectid_from_base64(msmq.correlation)
        if guid != NULL_GUID or uniquifier:
            correlation = objectid_text(guid, uniquifier)
    has_id = msmq is not None and id_guid != NULL_GUID
    journal = "none"
    if msmq is not None and msmq.dead_letter:
        journal = "deadletter"
    elif msmq is not None and msmq.journal:
        journal = "journal"
    return MessageProperties(
        label=label,
        priority=msmq.priority if msmq is not None else 3,
        recoverable=env.durable or env.stream is not None,
        message_class=msmq.message_class if msmq is not None else 0,
        reach_queue_by_ms=(_deadline_ms(parse_srmp_time(msmq.ttrq))
                           if msmq is not None and msmq.ttrq else 0),
        receive_by_ms=0 if expires >= INFINITE_TIME else _deadline_ms(expires),
        correlation_id=correlation,
        response_queue=format_name_of_url(env.path.rev_via) if env.path.rev_via else "",
        admin_queue=admin,
        ack=int(ack),
        journal=journal,
        app_specific=(msmq.app or 0) if msmq is not None else 0,
        content_type=message.body_content_type or "application/octet-stream",
        transactional=env.stream is not None,
        sent_at_ms=parse_srmp_time(env.sent_at) * 1000 if env.sent_at else now_ms,
        source_qm=msmq.source_qm if msmq is not None else id_guid,
        message_id=objectid_text(id_guid, ordinal) if has_id else "",
        extra=extra,
    )


def add_mime_parts(extra: dict[str, str], raw: bytes, body_start: int, body_end: int) -> None:
    """The request around the body, base64 (when there is any: not for a lone envelope)."""
    if body_end > body_start or body_start < len(raw):
        extra["srmp_mime_head"] = base64.b64encode(raw[:body_start]).decode()
        extra["srmp_mime_tail"] = base64.b64encode(raw[body_end:]).decode()


def _extra(message: SrmpMessage, raw: bytes, mime_parts: bool) -> dict[str, str]:
    env: Envelope = message.envelope
    extra = {"front_door": "srmp", "srmp_id": env.path.id, "srmp_to": env.path.to}
    mime = message.body_end > message.body_start or message.body_start < len(raw)
    if mime_parts:
        add_mime_parts(extra, raw, message.body_start, message.body_end)
    if mime and message.envelope_end <= message.body_start:
        # The envelope is inside the head: keep where, not a second copy.
        extra["srmp_envelope_span"] = f"{message.envelope_start}:{message.envelope_end}"
    else:
        extra["srmp_envelope"] = message.envelope_raw.decode("utf-8", "replace")
    msmq = env.msmq
    if msmq is not None:
        extra["body_type"] = str(msmq.body_type)
        if msmq.hash_algorithm is not None:
            extra["hash_algorithm"] = str(msmq.hash_algorithm)
        if msmq.journal:
            extra["source_journal"] = "1"
    if env.stream is not None:
        extra["stream_id"] = env.stream.stream_id
        extra["stream_current"] = str(env.stream.current)
    return extra


def envelope_text(properties: MessageProperties) -> str | None:
    """The SOAP envelope as it arrived (PROPID_M_SOAP_ENVELOPE), or None."""
    if "srmp_envelope" in properties.extra:
        return properties.extra["srmp_envelope"]
    span = properties.extra.get("srmp_envelope_span")
    head = properties.extra.get("srmp_mime_head")
    if span is None or head is None:
        return None
    start, _, end = span.partition(":")
    return base64.b64decode(head)[int(start):int(end)].decode("utf-8", "replace")


def compound_message(properties: MessageProperties, body: bytes) -> bytes | None:
    """The whole MIME message as it arrived (PROPID_M_COMPOUND_MESSAGE), or None."""
    head = properties.extra.get("srmp_mime_head")
    tail = properties.extra.get("srmp_mime_tail")
    if head is None or tail is None:
        return None
    return base64.b64decode(head) + body + base64.b64decode(tail)


def _deadline_ms(seconds: int) -> int:
    """A deadline in ms since 1970; one before 1970 (the SRMP form reaches back to year 1) is
    as past as 1970's first millisecond: the message has already expired (0 is "none")."""
    return max(1, seconds * 1000)
