"""Message classes, acknowledgement levels, journal levels (pure). docs/srmp.md, "Message
classes, acknowledgement and journal levels"; [MS-MQMQ] §2.2.18.1.6."""

from __future__ import annotations

import enum
import re

__all__ = ["MessageClass", "AckLevel", "JournalLevel", "parse_ack_level", "parse_journal_level"]


class MessageClass(enum.IntEnum):
    NORMAL = 0x0000
    REPORT = 0x0001
    ACK_REACH_QUEUE = 0x0002
    ORDER_ACK = 0x00FF
    ACK_RECEIVE = 0x4000
    NACK_BAD_DST_Q = 0x8000
    NACK_PURGED = 0x8001
    NACK_REACH_QUEUE_TIMEOUT = 0x8002
    NACK_Q_EXCEED_QUOTA = 0x8003
    NACK_ACCESS_DENIED = 0x8004
    NACK_HOP_COUNT_EXCEEDED = 0x8005
    NACK_BAD_SIGNATURE = 0x8006
    NACK_BAD_ENCRYPTION = 0x8007
    NACK_COULD_NOT_ENCRYPT = 0x8008
    NACK_NOT_TRANSACTIONAL_Q = 0x8009
    NACK_NOT_TRANSACTIONAL_MSG = 0x800A
    NACK_UNSUPPORTED_CRYPTO_PROVIDER = 0x800B
    NACK_SOURCE_COMPUTER_GUID_CHANGED = 0x800C
    NACK_Q_DELETED = 0xC000
    NACK_Q_PURGED = 0xC001
    NACK_RECEIVE_TIMEOUT = 0xC002
    NACK_RECEIVE_TIMEOUT_AT_SENDER = 0xC003
    NACK_RECEIVE_REJECTED = 0xC004

    @property
    def msmq_name(self) -> str:
        return f"MQMSG_CLASS_{self.name}"


class AckLevel(enum.IntFlag):
    NONE = 0
    POS_ARRIVAL = 0x01
    POS_RECEIVE = 0x02
    NEG_ARRIVAL = 0x04
    NEG_RECEIVE = 0x08
    FULL_REACH_QUEUE = 0x05
    NACK_RECEIVE = 0x0C
    FULL_RECEIVE = 0x0E


class JournalLevel(enum.Enum):
    NONE = "none"
    JOURNAL = "journal"
    DEADLETTER = "deadletter"


# A level as a number: decimal or 0x hexadecimal, ASCII digits only.
_LEVEL_NUMBER = re.compile(r"0[xX][0-9A-Fa-f]+|[0-9]+", re.ASCII)


def parse_ack_level(text: str) -> AckLevel:
    """``MQMSG_ACKNOWLEDGMENT_FULL_RECEIVE``, ``FULL_RECEIVE``, ``14`` or ``0x0E``.

    Raises:
        ValueError: not a known level.
    """
    cleaned = text.strip().upper().removeprefix("MQMSG_ACKNOWLEDGMENT_")
    if cleaned in AckLevel.__members__:
        return AckLevel[cleaned]
    try:
        if not _LEVEL_NUMBER.fullmatch(cleaned):  # int() would take '1_0', '５', '0b1'
            raise ValueError
        value = int(cleaned, 0)
    except ValueError:
        raise ValueError(f"unknown acknowledgement level {text!r}") from None
    if value & ~0x0F or value < 0:
        raise ValueError(f"acknowledgement level {text!r} has unknown bits")
    return AckLevel(value)


def parse_journal_level(text: str) -> JournalLevel:
    level = _JOURNAL_LEVELS.get(text.strip().lower())  # cheaper than JournalLevel(...)
    if level is None:
        raise ValueError(f"journal level must be none, journal or deadletter, not {text!r}")
    return level


_JOURNAL_LEVELS = {level.value: level for level in JournalLevel}
