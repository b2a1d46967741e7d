"""The SRMP envelope as values (pure). docs/srmp.md, "Envelope and header elements", "Data
formats (times, ids)".

Optional elements are ``None`` when absent, so that parsing and printing an envelope gives
back the same bytes: what Windows leaves out (``App`` when zero, ``previous``) is decided by
whoever builds the envelope, not by the printer.

The classes are not frozen dataclasses, though nothing changes an envelope once parsed: a
frozen dataclass sets each field through ``object.__setattr__`` (four times the cost of an
assignment), and every SRMP request builds a few of them, about 40 fields in all.
"""

from __future__ import annotations

import base64
import functools
import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

__all__ = [
    "Envelope", "Path", "Services", "Stream", "MsmqHeader", "DeliveryReceipt",
    "CommitmentReceipt", "StreamReceipt", "Signature", "Reference", "Kind",
    "parse_srmp_time", "format_srmp_time", "INFINITE_TIME", "INFINITE_TEXT",
    "parse_message_id", "format_message_id", "parse_stream_id", "objectid_from_base64",
    "objectid_to_base64", "NULL_GUID",
]

NULL_GUID = "00000000-0000-0000-0000-000000000000"
INFINITE_TIME = 0x7FFFFFFF  # seconds since 1970: "never" in expiresAt
INFINITE_TEXT = "20380119T031407"
_TIME = re.compile(r"^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z?\Z")
_GUID_RE = r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}"
_MESSAGE_ID = re.compile(rf"^uuid:(\d{{1,20}})@({_GUID_RE})$")
_STREAM_ID = re.compile(rf"^uid:({_GUID_RE})\\(\d{{1,20}})$")


@functools.lru_cache(maxsize=4096)
def parse_srmp_time(text: str) -> int:
    """``YYYYMMDDThhmmss`` (UTC) -> seconds since 1970.

    Raises:
        ValueError: not that form, or not a real date.
    """
    match = _TIME.match(text.strip())
    if match is None:
        raise ValueError(f"{text!r} is not a time of the form YYYYMMDDThhmmss")
    year, month, day, hour, minute, second = (int(g) for g in match.groups())
    return int(datetime(year, month, day, hour, minute, second, tzinfo=UTC).timestamp())


def format_srmp_time(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y%m%dT%H%M%S")


def parse_message_id(text: str) -> tuple[int, str]:
    """``uuid:N@GUID`` -> (N, guid lower-cased). N is the message's OBJECTID uniquifier, a
    32-bit counter Windows starts at 1: receipts and acknowledgements carry it back in an
    OBJECTID, which holds no other.

    Raises:
        ValueError: another form, or N outside 1..4294967295.
    """
    match = _MESSAGE_ID.match(text.strip())
    if match is None or not 0 < int(match.group(1)) < 1 << 32:
        raise ValueError(f"{text!r} is not a message id of the form uuid:N@GUID with N "
                         "1..4294967295")
    return int(match.group(1)), match.group(2).lower()


def format_message_id(ordinal: int, guid: str) -> str:
    return f"uuid:{ordinal}@{guid}"


def parse_stream_id(text: str) -> tuple[str, int]:
    """``uid:GUID\\N`` -> (guid lower-cased, N).

    Raises:
        ValueError: another form, or N over 64 bits.
    """
    match = _STREAM_ID.match(text.strip())
    if match is None or int(match.group(2)) >= 1 << 64:
        raise ValueError(f"{text!r} is not a stream id of the form uid:GUID\\N")
    return match.group(1).lower(), int(match.group(2))


def objectid_from_base64(text: str) -> tuple[str, int]:
    """An OBJECTID (16-byte GUID + 4-byte little-endian uniquifier) -> (guid, uniquifier).

    Raises:
        ValueError: not base64 of 20 bytes.
    """
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except ValueError:
        raise ValueError(f"{text!r} is not base64") from None
    if len(raw) != 20:
        raise ValueError(f"an OBJECTID is 20 bytes, {text!r} holds {len(raw)}")
    return str(uuid.UUID(bytes_le=raw[:16])), int.from_bytes(raw[16:], "little")


def objectid_to_base64(guid: str, uniquifier: int) -> str:
    raw = uuid.UUID(guid).bytes_le + (uniquifier & 0xFFFFFFFF).to_bytes(4, "little")
    return base64.b64encode(raw).decode("ascii")


@dataclass(slots=True)
class Path:
    """``<path>`` (WS-Routing): what the message is and where it goes."""

    action: str
    to: str
    id: str
    rev_via: str | None = None  # None: no <rev>; "": <rev><via/></rev>


@dataclass(slots=True)
class Services:
    durable: bool = False
    delivery_receipt_to: str | None = None
    commitment_receipt_to: str | None = None
    positive_only: bool = False
    negative_only: bool = False


@dataclass(slots=True)
class Stream:
    stream_id: str
    current: int
    previous: int | None = None
    send_receipts_to: str | None = None
    element: str = "stream"  # "Stream" in the spec's only example; accepted both ways


@dataclass(slots=True)
class DeliveryReceipt:
    received_at: str
    id: str


@dataclass(slots=True)
class CommitmentReceipt:
    decided_at: str
    decision: str  # positive | negative
    id: str


@dataclass(slots=True)
class StreamReceipt:
    stream_id: str
    last_ordinal: int


@dataclass(slots=True)
class MsmqHeader:
    """``<Msmq>`` (namespace ``msmq.namespace.xml``); times as the text sent."""

    message_class: int = 0
    priority: int = 3
    journal: bool = False
    dead_letter: bool = False
    correlation: str | None = None  # base64 OBJECTID
    trace: bool = False
    connector_type: str | None = None
    app: int | None = None
    body_type: int = 0
    hash_algorithm: int | None = None
    eod_first: bool = False
    eod_last: bool = False
    eod_connector: str | None = None
    eod: bool = False
    provider_type: int | None = None
    provider_name: str | None = None
    source_qm: str = NULL_GUID
    destination_mqf: str | None = None
    admin_mqf: str | None = None
    response_mqf: str | None = None
    ttrq: str | None = None


@dataclass(slots=True)
class Reference:
    uri: str
    digest_method: str
    digest_value: str


@dataclass(slots=True)
class Signature:
    """The old XML-DSig profile of [MC-MQSRM] §2.2.7 (docs/srmp.md, "Signatures");
    ``signed_info`` is the element's bytes."""

    signature_method: str
    references: tuple[Reference, ...]
    signature_value: str
    signed_info: bytes


class Kind:
    """The kinds of SRMP request (Final: mypyc compiles this module, see setup.py)."""

    USER: Final = "user"
    DELIVERY_RECEIPT: Final = "delivery-receipt"
    COMMITMENT_RECEIPT: Final = "commitment-receipt"
    STREAM_RECEIPT: Final = "stream-receipt"
    FINAL_STREAM_RECEIPT: Final = "final-stream-receipt"


@dataclass(slots=True)
class Envelope:
    path: Path
    expires_at: str
    sent_at: str | None = None
    services: Services | None = None
    stream: Stream | None = None
    delivery_receipt: DeliveryReceipt | None = None
    commitment_receipt: CommitmentReceipt | None = None
    stream_receipt: StreamReceipt | None = None
    msmq: MsmqHeader | None = None
    signature: Signature | None = None
    extra_headers: tuple[str, ...] = field(default=())  # unknown header elements, by name

    @property
    def label(self) -> str | None:
        """The text after ``MSMQ:`` in ``action``; None without that prefix (MC-MQSRM §2.2.4.1)."""
        action = self.path.action
        return action[5:] if action[:5].upper() == "MSMQ:" else None

    @property
    def kind(self) -> str:
        """User message or which receipt (docs/srmp.md, "Message types and receipts")."""
        stream, commit = self.stream_receipt is not None, self.commitment_receipt is not None
        if stream and commit:
            return Kind.FINAL_STREAM_RECEIPT
        if stream:
            return Kind.STREAM_RECEIPT
        if commit:
            return Kind.COMMITMENT_RECEIPT
        if self.delivery_receipt is not None:
            return Kind.DELIVERY_RECEIPT
        return Kind.USER

    @property
    def durable(self) -> bool:
        return self.services is not None and self.services.durable
