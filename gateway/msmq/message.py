"""Messages as the queue manager keeps them: properties + body in one store payload (pure).

Payload layout (version 1)::

    b"EM" u8 version  u32 header_len  header (JSON, UTF-8)  body

Message ids are MSMQ OBJECTIDs, ``{QM GUID}\\counter``. A message created here has no id in
its header: its counter is ``(queue number << 40) | queue sequence``, unique for ever (the
store never reuses either), so an id leads straight to its record. A message that came with
an id (SRMP) or is a copy (journal, dead letter) carries its id in the header.
"""

from __future__ import annotations

import operator
import re
import struct
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from gateway import jsonio

__all__ = [
    "MessageProperties",
    "DecodedMessage",
    "MessageFormatError",
    "encode_payload",
    "decode_payload",
    "split_payload",
    "compose_id",
    "parse_id",
    "LABEL_CHARS_MAX",
    "property_values",
    "properties_of",
]

LABEL_CHARS_MAX = 249
_MAGIC = b"EM"
_VERSION = 1
_HEAD = struct.Struct("<2sBI")
_SEQ_BITS = 40
_ID = re.compile(r"^\{([0-9a-fA-F-]{36})\}\\(\d+)\Z")


class MessageFormatError(ValueError):
    """A stored payload that is not a message of this format."""


@dataclass(slots=True, kw_only=True)
class MessageProperties:
    """Every property a message keeps (REST headers and SRMP envelope elements map here).

    Treated as a value (changed copies come from ``dataclasses.replace``) but not declared
    frozen: a frozen class's constructor sets each of the 19 fields through
    ``object.__setattr__``, several times slower, and it runs several times per message.
    """

    label: str = ""
    priority: int = 3
    recoverable: bool = True
    message_class: int = 0
    reach_queue_by_ms: int = 0  # absolute deadline (ms since the epoch), 0 = none
    receive_by_ms: int = 0
    correlation_id: str = ""
    response_queue: str = ""
    admin_queue: str = ""
    ack: int = 0
    journal: str = "none"
    app_specific: int = 0
    content_type: str = "application/octet-stream"
    transactional: bool = False
    sent_at_ms: int = 0
    arrived_at_ms: int = 0
    source_qm: str = ""
    message_id: str = ""  # set only when the message brought its own id (or is a copy)
    extra: dict[str, str] = field(default_factory=dict)  # dead-letter reason, source queue, ...

    def arrive(self, now_ms: int) -> None:
        """Stamped in place as the message enters a queue (for properties made for this one
        message: a copy costs every send); a transactional message has priority 0 and is
        recoverable (MSMQ)."""
        self.arrived_at_ms = now_ms
        if self.transactional:
            self.priority, self.recoverable = 0, True


# Properties as the tuple of their values, and back: what crosses between processes (a
# parse worker's pickle, a front's marshal frame) at half the cost of a generic encoding.
_PROPERTY_NAMES = tuple(f.name for f in fields(MessageProperties))
property_values: Callable[[MessageProperties], tuple[Any, ...]] = operator.attrgetter(
    *_PROPERTY_NAMES)


def properties_of(values: tuple[Any, ...]) -> MessageProperties:
    """The properties ``property_values`` gave these values of: the slots set straight from
    the tuple (in field order), a seventh of the cost of ``__init__``'s 19 keywords, paid
    for every send a front hands the store owner."""
    p = _new_object(MessageProperties)
    (p.label, p.priority, p.recoverable, p.message_class, p.reach_queue_by_ms, p.receive_by_ms,
     p.correlation_id, p.response_queue, p.admin_queue, p.ack, p.journal, p.app_specific,
     p.content_type, p.transactional, p.sent_at_ms, p.arrived_at_ms, p.source_qm,
     p.message_id, p.extra) = values
    return p


_new_object = object.__new__


@dataclass(frozen=True, slots=True)
class DecodedMessage:
    properties: MessageProperties
    body: bytes


def encode_payload(properties: MessageProperties, body: bytes) -> bytes:
    # Not dataclasses.asdict: it deep-copies every value, on every send. The values in one
    # call (``property_values``), not a getattr each.
    header = {name: value for name, value, default
              in zip(_PROPERTY_NAMES, property_values(properties), _DEFAULT_VALUES)
              if value != default}
    raw = jsonio.dumps(header)
    return _HEAD.pack(_MAGIC, _VERSION, len(raw)) + raw + body


def decode_payload(payload: bytes) -> DecodedMessage:
    """Raises: MessageFormatError for anything that is not a version-1 message payload."""
    if len(payload) < _HEAD.size:
        raise MessageFormatError("payload shorter than its header")
    magic, version, length = _HEAD.unpack_from(payload, 0)
    if magic != _MAGIC or version != _VERSION or _HEAD.size + length > len(payload):
        raise MessageFormatError("not a message payload of format version 1")
    try:
        header: dict[str, Any] = jsonio.loads(payload[_HEAD.size: _HEAD.size + length])
        properties = MessageProperties(**header)
    except (ValueError, TypeError) as exc:
        raise MessageFormatError(f"message header unreadable: {exc}") from exc
    return DecodedMessage(properties, payload[_HEAD.size + length:])


def split_payload(payload: bytes) -> tuple[memoryview, memoryview]:
    """(header JSON, body) of a payload without parsing the header: range reads pass the
    header through as it is.

    Raises: MessageFormatError as ``decode_payload``.
    """
    if len(payload) < _HEAD.size:
        raise MessageFormatError("payload shorter than its header")
    magic, version, length = _HEAD.unpack_from(payload, 0)
    if magic != _MAGIC or version != _VERSION or _HEAD.size + length > len(payload):
        raise MessageFormatError("not a message payload of format version 1")
    view = memoryview(payload)
    return view[_HEAD.size: _HEAD.size + length], view[_HEAD.size + length:]


_DEFAULTS = asdict(MessageProperties())
_DEFAULT_VALUES = tuple(_DEFAULTS[name] for name in _PROPERTY_NAMES)


def compose_id(qm_guid: str, queue_id: int, seq: int) -> str:
    assert 0 < seq < 1 << _SEQ_BITS
    return f"{{{qm_guid}}}\\{(queue_id << _SEQ_BITS) | seq}"


def parse_id(message_id: str, qm_guid: str) -> tuple[int, int] | None:
    """``(queue number, sequence)`` for an id this queue manager composed, else None."""
    match = _ID.match(message_id)
    if match is None or match.group(1).lower() != qm_guid.lower():
        return None
    counter = int(match.group(2))
    return counter >> _SEQ_BITS, counter & ((1 << _SEQ_BITS) - 1)
