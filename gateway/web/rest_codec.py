"""REST message properties: ``Mq-*`` headers in, JSON out (pure: no I/O).

Every header is checked; a bad one raises ``HeaderError`` naming the header and the value.
"""

from __future__ import annotations

import base64
import difflib
import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import overload
from urllib.parse import quote, unquote

from gateway.msmq.classes import MessageClass, parse_ack_level, parse_journal_level
from gateway.msmq.message import LABEL_CHARS_MAX, MessageProperties
from gateway.srmp.properties import envelope_text

__all__ = ["HeaderError", "SendRequest", "header_text", "parse_send_headers", "message_json",
           "iso_ms", "message_location", "REPLAYED"]

# On the answer to a send whose Idempotency-Key was seen with the same body: the first
# answer, and nothing stored this time.
REPLAYED = {"Idempotency-Replayed": "true"}

# MSMQ's AppSpecific is a ULONG (SRMP's <App>), which .NET shows as an Int32: either view.
_U32_MAX = 2**32 - 1
_PLAIN_INT = re.compile(r" *-?[0-9]{1,20} *", re.ASCII)  # int() takes '٧', '1_000', '+1'
_PLAIN_SECONDS = re.compile(r" *[0-9]+(?:\.[0-9]+)? *", re.ASCII)

_TEXT_CHARS_MAX = 1024


class HeaderError(ValueError):
    """A request header with a bad value; the message names it."""

    def __init__(self, header: str, detail: str, *, type_slug: str = "bad-header") -> None:
        super().__init__(f"{header}: {detail}")
        self.header = header
        self.detail = detail
        self.type_slug = type_slug


@dataclass(frozen=True, slots=True)
class SendRequest:
    properties: MessageProperties
    transaction: str | None  # None, "single", "none" or a transaction id
    idempotency_key: str | None


def parse_send_headers(headers: Mapping[str, str], *, now_ms: int,
                       by_format_name: bool = False) -> SendRequest:
    """Read the ``Mq-*`` headers of a send (``by_format_name``: ``POST /v1/messages``'s,
    which names its destinations in ``Mq-Destination``).

    Raises:
        HeaderError: the first header with a bad value.
    """
    if _defaults_only(headers):  # most sends: one pass over a few headers, not 15 look-ups
        return SendRequest(MessageProperties(
            content_type=header_text(headers, "Content-Type", "application/octet-stream"),
            sent_at_ms=now_ms), None, None)
    _check_names(headers, by_format_name)
    label = header_text(headers, "Mq-Label", "")
    encoding = header_text(headers, "Mq-Label-Encoding")
    if encoding is not None:  # as an entrepot webhook sends a label no header can carry
        if encoding.strip().lower() != "percent":
            raise HeaderError("Mq-Label-Encoding", f"must be percent, not {encoding[:64]!r}")
        label = _percent_decoded(label)
    if len(label) > LABEL_CHARS_MAX:
        raise HeaderError("Mq-Label", f"{len(label)} characters; at most {LABEL_CHARS_MAX}",
                          type_slug="MQ_ERROR_LABEL_TOO_LONG")
    priority = _int(headers, "Mq-Priority", 3, 0, 7)
    delivery = header_text(headers, "Mq-Delivery", "recoverable").strip().lower()
    if delivery not in ("express", "recoverable"):
        raise HeaderError("Mq-Delivery", f"must be express or recoverable, not {delivery!r}")
    ack_text = header_text(headers, "Mq-Acknowledge")
    try:
        ack = int(parse_ack_level(ack_text)) if ack_text is not None else 0
    except ValueError as exc:
        raise HeaderError("Mq-Acknowledge", str(exc)) from exc
    try:
        journal = parse_journal_level(header_text(headers, "Mq-Journal", "none")).value
    except ValueError as exc:
        raise HeaderError("Mq-Journal", str(exc)) from exc
    transaction = header_text(headers, "Mq-Transaction")
    if transaction is not None:
        transaction = transaction.strip()
        if not transaction:
            raise HeaderError("Mq-Transaction", "empty (use a transaction id, single or none)")
    key = header_text(headers, "Idempotency-Key")
    if key is not None and not 0 < len(key) <= 255:
        raise HeaderError("Idempotency-Key", "must be 1..255 characters")
    if key is not None and transaction not in (None, "single", "none"):
        raise HeaderError("Idempotency-Key", "does not apply to a send held in a transaction "
                          "(Mq-Transaction: an id): its commit stores the transaction's sends "
                          "once")
    properties = MessageProperties(
        label=label,
        priority=priority,
        recoverable=delivery == "recoverable",
        reach_queue_by_ms=_deadline(headers, "Mq-Time-To-Reach-Queue", now_ms),
        receive_by_ms=_deadline(headers, "Mq-Time-To-Be-Received", now_ms),
        correlation_id=_text(headers, "Mq-Correlation-Id"),
        response_queue=_text(headers, "Mq-Response-Queue"),
        admin_queue=_text(headers, "Mq-Admin-Queue"),
        ack=ack,
        journal=journal,
        app_specific=_int(headers, "Mq-App-Specific", 0, -(2**31), _U32_MAX),
        content_type=header_text(headers, "Content-Type", "application/octet-stream"),
        sent_at_ms=_sent_time(headers, now_ms),
    )
    return SendRequest(properties, transaction, key)


# Every Mq- header a send takes (Mq-Destination: POST /v1/messages), in lower case; and
# those an entrepot webhook adds (gateway.outbound.webhook_headers), so that one gateway's
# webhook may post into another's REST API: the source's id and time, for the record only.
SEND_HEADERS = frozenset(name.lower() for name in (
    "Mq-Label", "Mq-Priority", "Mq-Delivery", "Mq-Time-To-Reach-Queue",
    "Mq-Time-To-Be-Received", "Mq-Correlation-Id", "Mq-Response-Queue", "Mq-Admin-Queue",
    "Mq-App-Specific", "Mq-Acknowledge", "Mq-Journal", "Mq-Sent-Time", "Mq-Transaction",
    "Mq-Destination", "Mq-Label-Encoding", "Mq-Message-Id", "Mq-Sent-At"))


_BAD_ESCAPE = re.compile("%(?![0-9A-Fa-f]{2})")


def _percent_decoded(label: str) -> str:
    """``Mq-Label`` as ``Mq-Label-Encoding: percent`` sends it: UTF-8, escaped. It carries
    what a header cannot (a line break, a control character: an SRMP sender's label may
    hold them), but NUL, which ends an MSMQ label.

    Raises: HeaderError for a bad escape, bytes that are not UTF-8, or a NUL."""
    if _BAD_ESCAPE.search(label):
        raise HeaderError("Mq-Label", "a % not followed by two hex digits")
    try:
        decoded = unquote(label, errors="strict")
    except UnicodeDecodeError:
        raise HeaderError("Mq-Label", "percent-encoded bytes that are not UTF-8") from None
    if "\0" in decoded:
        raise HeaderError("Mq-Label", "decodes to a NUL character, which ends an MSMQ label")
    return decoded


def _check_names(headers: Mapping[str, str], by_format_name: bool) -> None:
    """Raises: HeaderError for an ``Mq-`` header no send takes: a misspelt one would leave
    the property it meant at its default (a deadline, a priority) without a word; and for
    ``Mq-Destination`` on a send that names its queue in the path."""
    for name in headers:
        if not by_format_name and name.lower() == "mq-destination":
            raise HeaderError(name, "is POST /v1/messages's: a send to a queue is addressed "
                              "by its path")
        if name[:3].lower() == "mq-" and name.lower() not in SEND_HEADERS:
            close = difflib.get_close_matches(name.lower(), SEND_HEADERS, n=1)
            hint = f" (did you mean {_spelled(close[0])}?)" if close else ""
            raise HeaderError(name[:64], f"is not a header entrepot takes{hint}")


def _spelled(lower: str) -> str:
    return "-".join(part.capitalize() for part in lower.split("-"))


def _defaults_only(headers: Mapping[str, str]) -> bool:
    """No ``Mq-*`` header and no ``Idempotency-Key``: every property but the content type
    and the time sent takes its default."""
    for name in headers:
        if name[:3].lower() == "mq-" or name.lower() == "idempotency-key":
            return False
    return True


@overload
def header_text(headers: Mapping[str, str], name: str) -> str | None: ...


@overload
def header_text(headers: Mapping[str, str], name: str, default: str) -> str: ...


def header_text(headers: Mapping[str, str], name: str, default: str | None = None
                ) -> str | None:
    """A request header's value (``default`` when it is absent).

    Raises:
        HeaderError: its bytes are not UTF-8. aiohttp keeps such bytes as lone surrogates
            (``surrogateescape``), which no store, log line or answer can encode.
    """
    value = headers.get(name)
    if value is None:
        return default
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise HeaderError(name, "not UTF-8 text") from None
    return value


def _sent_time(headers: Mapping[str, str], now_ms: int) -> int:
    """``Mq-Sent-Time``: when the producer sent it (ISO 8601; default now), so end-to-end
    latency can be measured; at most a minute in the future (clock skew)."""
    raw = header_text(headers, "Mq-Sent-Time")
    if raw is None:
        return now_ms
    try:
        moment = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
    except ValueError:
        raise HeaderError("Mq-Sent-Time", f"{raw!r} is not an ISO 8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    sent_ms = int(moment.timestamp() * 1000)
    if not 0 < sent_ms <= now_ms + 60_000:
        raise HeaderError("Mq-Sent-Time", f"{raw!r} is in the future or before 1970")
    return sent_ms


def _int(headers: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    raw = header_text(headers, name)
    if raw is None:
        return default
    if not _PLAIN_INT.fullmatch(raw):
        raise HeaderError(name, f"{raw[:64]!r} is not a whole number {low}..{high} (ASCII "
                          "digits)")
    value = int(raw)
    if not low <= value <= high:
        raise HeaderError(name, f"{value} is out of range {low}..{high}")
    return value


def _deadline(headers: Mapping[str, str], name: str, now_ms: int) -> int:
    raw = header_text(headers, name)
    if raw is None:
        return 0
    if not _PLAIN_SECONDS.fullmatch(raw):  # float() would take '1e3', '1_0', '５', 'inf'
        raise HeaderError(name, f"{raw!r} is not a number of seconds (ASCII digits, an "
                          "optional fraction)")
    seconds = float(raw)
    if not math.isfinite(seconds) or seconds < 0 or seconds > 10 * 365 * 86400:
        raise HeaderError(name, f"{raw!r} is out of range (0 .. ten years)")
    return now_ms + int(seconds * 1000)


def _text(headers: Mapping[str, str], name: str) -> str:
    value = header_text(headers, name, "")
    if len(value) > _TEXT_CHARS_MAX:
        raise HeaderError(name, f"longer than {_TEXT_CHARS_MAX} characters")
    return value


def message_location(queue: str, message_id: str) -> str:
    """The ``Location`` of a stored message: ``GET`` there reads it (until it is received)."""
    guid, backslash, number = message_id.rpartition("\\")
    if backslash and number.isdigit() and number.isascii():  # {GUID}\N: the GUID's escape kept
        escaped = f"{_escaped_guid(guid)}%5C{number}"
    else:
        escaped = _escaped(message_id)
    return f"/v1/queues/{_queue_part(queue)}/messages/{escaped}"


def _escaped(text: str) -> str:
    return text.translate(_ESCAPES) if text.isascii() else quote(text, safe="")


# A message id is its queue manager's GUID and a number: the GUIDs are few (this gateway's
# and its peers'), and escaping one costs more than the rest of the Location.
_escaped_guid = functools.lru_cache(maxsize=256)(_escaped)


# ``quote(text, safe="")`` of ASCII text as one ``str.translate``: every 201 has a Location,
# and quote's Python costs a front more than the rest of the header.
_ESCAPES = {c: f"%{c:02X}" for c in range(128)
            if not (chr(c).isascii() and (chr(c).isalnum() or chr(c) in "_.-~"))}


@functools.lru_cache(maxsize=1024)
def _queue_part(queue: str) -> str:
    return quote(queue, safe="$/")


def iso_ms(ms: int) -> str | None:
    if not ms:
        return None
    return _iso_seconds(ms // 1000) + f".{ms % 1000:03d}Z"


@functools.lru_cache(maxsize=4096)
def _iso_seconds(seconds: int) -> str:
    """Cached: every message received shows two or more times, mostly of the same seconds,
    and datetime + strftime is costly to repeat for each."""
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")


@functools.lru_cache(maxsize=512)
def _class_name(number: int) -> str:
    try:
        return MessageClass(number).msmq_name
    except ValueError:
        return str(number)


def message_json(*, message_id: str, queue: str, seq: int, properties: MessageProperties,
                 body: bytes) -> dict[str, object]:
    p = properties
    class_name = _class_name(p.message_class)
    return {
        "id": message_id,
        "seq": seq,
        "queue": queue,
        "label": p.label,
        "priority": p.priority,
        "class": class_name,
        "delivery": "recoverable" if p.recoverable else "express",
        "correlation_id": p.correlation_id,
        "response_queue": p.response_queue,
        "admin_queue": p.admin_queue,
        "app_specific": p.app_specific,
        "sent_at": iso_ms(p.sent_at_ms),
        "arrived_at": iso_ms(p.arrived_at_ms),
        "content_type": p.content_type,
        "body_base64": base64.b64encode(body).decode(),
        "properties": {
            "transactional": p.transactional,
            "acknowledge": p.ack,
            "journal": p.journal,
            "time_to_reach_queue_deadline": iso_ms(p.reach_queue_by_ms),
            "time_to_be_received_deadline": iso_ms(p.receive_by_ms),
            "source_qm": p.source_qm,
            **_extras(p),
        },
    }


# Extra properties that are numbers (a message keeps its extras as text): shown as numbers.
_NUMERIC_EXTRAS = frozenset({"dead_lettered_at_ms", "received_at_ms", "body_type",
                             "hash_algorithm", "stream_current", "final_ordinal"})


def _extras(p: MessageProperties) -> Mapping[str, object]:
    extra = _srmp_extra(p)
    if _NUMERIC_EXTRAS.isdisjoint(extra):
        return extra
    return {k: int(v) if k in _NUMERIC_EXTRAS and v.isascii() and v.isdigit() else v
            for k, v in extra.items()}


def _srmp_extra(p: MessageProperties) -> dict[str, str]:
    """Extra properties, with the SRMP envelope as text rather than offsets into the head."""
    if "srmp_envelope_span" not in p.extra:
        return p.extra
    extra = {k: v for k, v in p.extra.items() if k != "srmp_envelope_span"}
    extra["srmp_envelope"] = envelope_text(p) or ""
    return extra
