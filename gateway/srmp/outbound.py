"""A stored message -> the SRMP envelope a link sends (pure). docs/srmp.md,
"Envelope and header elements", "Framing", "Message classes, acknowledgement and journal
levels".

Windows' choices are followed: ``Correlation``, ``App`` and ``HashAlgorithm`` always (zeros
and SHA-1 when unset, as in V02), ``previous`` only when it is not
``current - 1``, ``<start>`` only on the first message of a stream, ``expiresAt`` from
time-to-be-received (2038 when none), ``TTrq`` from time-to-reach-queue (sent + 4 days when
none), receipt requests from the acknowledgement level.
"""

from __future__ import annotations

import re

from gateway.msmq.classes import AckLevel
from gateway.msmq.message import MessageProperties
from gateway.srmp.model import (
    INFINITE_TEXT,
    Envelope,
    MsmqHeader,
    Path,
    Services,
    Stream,
    format_message_id,
    format_srmp_time,
    objectid_to_base64,
)

__all__ = ["StreamPosition", "outbound_envelope", "url_of_format_name"]

_OBJECTID = re.compile(r"^\{([0-9a-fA-F-]{36})\}\\(\d+)\Z")
_TTRQ_DEFAULT_S = 4 * 86400
_NO_CORRELATION = objectid_to_base64("00000000-0000-0000-0000-000000000000", 0)
_HASH_SHA1 = 32772  # CALG_SHA1, Windows' default HashAlgorithm (V02)


class StreamPosition:
    """Where a message stands in its outgoing stream."""

    __slots__ = ("stream_id", "current", "previous", "receipts_to", "element")

    def __init__(self, stream_id: str, current: int, previous: int, receipts_to: str,
                 element: str = "stream") -> None:
        self.stream_id = stream_id
        self.current = current
        self.previous = previous
        self.receipts_to = receipts_to
        self.element = element


def url_of_format_name(name: str) -> str | None:
    """``DIRECT=HTTP(S)://...`` -> the URL SRMP carries (``http(s)://...``); other format
    names -> ``MSMQ:`` + name; empty -> None."""
    if not name:
        return None
    upper = name.upper()
    for scheme in ("http", "https"):  # Windows writes the scheme lower-case (spec examples)
        if upper.startswith(f"DIRECT={scheme.upper()}://"):
            return scheme + name[len("DIRECT=") + len(scheme):]
    return "MSMQ:" + name


def outbound_envelope(props: MessageProperties, *, to: str, ordinal: int, qm_guid: str,
                      admin_url: str | None, response_url: str | None,
                      stream: StreamPosition | None) -> Envelope:
    sent_s = props.sent_at_ms // 1000
    ack = AckLevel(props.ack)
    delivery = admin_url if admin_url and ack & AckLevel.POS_ARRIVAL else None
    commitment = admin_url if admin_url and ack & (AckLevel.POS_RECEIVE
                                                     | AckLevel.NEG_RECEIVE) else None
    services = None
    if props.recoverable or delivery or commitment or stream is not None:
        services = Services(durable=props.recoverable or stream is not None,
                            delivery_receipt_to=delivery, commitment_receipt_to=commitment,
                            positive_only=bool(commitment and ack & AckLevel.POS_RECEIVE),
                            negative_only=bool(commitment and ack & AckLevel.NEG_RECEIVE))
    correlation = _NO_CORRELATION  # Windows writes Correlation, App, HashAlgorithm always
    match = _OBJECTID.match(props.correlation_id)
    if match is not None:
        correlation = objectid_to_base64(match.group(1), int(match.group(2)))
    stream_el = None
    if stream is not None:
        stream_el = Stream(stream.stream_id, stream.current,
                           None if stream.previous == stream.current - 1 else stream.previous,
                           stream.receipts_to if stream.current == 1 else None, stream.element)
    ttrq_s = props.reach_queue_by_ms // 1000 if props.reach_queue_by_ms else (
        sent_s + _TTRQ_DEFAULT_S)
    return Envelope(
        path=Path(action="MSMQ:" + props.label, to=to, id=format_message_id(ordinal, qm_guid),
                  rev_via=response_url),
        expires_at=(format_srmp_time(props.receive_by_ms // 1000) if props.receive_by_ms
                    else INFINITE_TEXT),
        sent_at=format_srmp_time(sent_s),
        services=services,
        stream=stream_el,
        msmq=MsmqHeader(message_class=props.message_class, priority=props.priority,
                        journal=props.journal == "journal",
                        dead_letter=props.journal == "deadletter", correlation=correlation,
                        app=props.app_specific & 0xFFFFFFFF,  # stored signed before: a ULONG
                        body_type=int(props.extra.get("body_type", "0") or 0),
                        hash_algorithm=int(props.extra.get("hash_algorithm", "")
                                           or _HASH_SHA1),
                        source_qm=props.source_qm or qm_guid, ttrq=format_srmp_time(ttrq_s)))
