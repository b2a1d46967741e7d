"""QMLog entries: the small records of transactional processing (pure: no I/O).

The QMLog is cyclic. Each entry::

    u16 magic 0xC0DE  u8 kind  u8 reserved  u32 payload_len  u64 lsn  u32 crc   payload  pad→8

Kinds and payloads (``Ref`` = u32 segment number, u32 offset, u64 record lsn):

=============  ==========================================  ===================================
kind           payload                                     meaning at replay
=============  ==========================================  ===================================
REMOVE         Ref*                                        these records are gone
TX_PREPARE     u64 tx_id, Ref*                             tx is prepared (two-phase); the
                                                           Refs are messages it receives
TX_COMMIT      u64 tx_id, Ref*                             tx's PENDING records become live;
                                                           the Refs (its receives) are gone
TX_ABORT       u64 tx_id                                   tx's PENDING records are gone
WRAP           (none)                                      continue at the start of the log
=============  ==========================================  ===================================

Replay starts at the checkpoint's position and accepts entries whose LSN is above the
checkpoint's and above the previous entry's; anything else (old entries from the last lap, a
torn write) ends the log.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from store.crc import crc32

__all__ = [
    "EntryKind",
    "Ref",
    "LogEntry",
    "ENTRY_HEADER_SIZE",
    "LOG_HEADER_SIZE",
    "encode_entry",
    "decode_entry",
    "encode_refs",
    "decode_refs",
    "replay",
    "scan_all",
    "entry_size",
]

_ENTRY = struct.Struct("<HBBIQI")
_REF = struct.Struct("<IIQ")
_ENTRY_MAGIC = 0xC0DE
ENTRY_HEADER_SIZE = _ENTRY.size
LOG_HEADER_SIZE = 64
assert ENTRY_HEADER_SIZE == 20


class EntryKind(enum.IntEnum):
    REMOVE = 1
    TX_PREPARE = 2
    TX_COMMIT = 3
    TX_ABORT = 4
    WRAP = 9


@dataclass(frozen=True, slots=True)
class Ref:
    """Where a record lives, and its LSN so a reused place is never mistaken for it."""

    segment: int
    offset: int
    lsn: int


@dataclass(frozen=True, slots=True)
class LogEntry:
    kind: EntryKind
    lsn: int
    tx_id: int
    refs: tuple[Ref, ...]
    offset: int
    size: int


def entry_size(payload_len: int) -> int:
    return (ENTRY_HEADER_SIZE + payload_len + 7) // 8 * 8


def encode_refs(refs: tuple[Ref, ...] | list[Ref]) -> bytes:
    return b"".join(_REF.pack(r.segment, r.offset, r.lsn) for r in refs)


def decode_refs(data: bytes | memoryview) -> tuple[Ref, ...]:
    assert len(data) % _REF.size == 0
    return tuple(Ref(*fields) for fields in _REF.iter_unpack(data))


def encode_entry(kind: EntryKind, lsn: int, *, tx_id: int = 0, refs: tuple[Ref, ...] = ()) -> bytes:
    if kind in (EntryKind.TX_PREPARE, EntryKind.TX_COMMIT, EntryKind.TX_ABORT):
        assert tx_id > 0
        payload = struct.pack("<Q", tx_id) + (encode_refs(refs) if kind != EntryKind.TX_ABORT
                                              else b"")
    else:
        assert tx_id == 0
        payload = encode_refs(refs)
    head = _ENTRY.pack(_ENTRY_MAGIC, kind, 0, len(payload), lsn, 0)[:-4]
    crc = crc32(payload, crc32(head))
    raw = head + struct.pack("<I", crc) + payload
    return raw + bytes(entry_size(len(payload)) - len(raw))


def decode_entry(buf: bytes | memoryview, offset: int, end: int) -> LogEntry | None:
    """The entry at ``offset``, or None when nothing whole and valid is there."""
    if end - offset < ENTRY_HEADER_SIZE:
        return None
    magic, kind, _, payload_len, lsn, crc = _ENTRY.unpack_from(buf, offset)
    if magic != _ENTRY_MAGIC or offset + entry_size(payload_len) > end:
        return None
    view = memoryview(buf)
    payload = view[offset + ENTRY_HEADER_SIZE: offset + ENTRY_HEADER_SIZE + payload_len]
    if crc32(payload, crc32(view[offset: offset + ENTRY_HEADER_SIZE - 4])) != crc:
        return None
    try:
        entry_kind = EntryKind(kind)
    except ValueError:
        return None
    tx_id = 0
    body = payload
    if entry_kind in (EntryKind.TX_PREPARE, EntryKind.TX_COMMIT, EntryKind.TX_ABORT):
        if payload_len < 8:
            return None
        tx_id = struct.unpack_from("<Q", payload, 0)[0]
        body = payload[8:]
    if len(body) % _REF.size:
        return None
    return LogEntry(entry_kind, lsn, tx_id, decode_refs(body), offset,
                    entry_size(payload_len))


def replay(buf: bytes | memoryview, start: int, *, after_lsn: int) -> tuple[list[LogEntry], int]:
    """Entries from ``start`` on (following WRAPs) newer than ``after_lsn``; and where the log
    continues (the position of the next write)."""
    end = len(buf)
    entries: list[LogEntry] = []
    offset = start
    last_lsn = after_lsn
    wrapped = False
    while True:
        entry = decode_entry(buf, offset, end)
        if entry is None or entry.lsn <= last_lsn:
            return entries, offset
        last_lsn = entry.lsn
        if entry.kind == EntryKind.WRAP:
            if wrapped:  # a second lap in one replay cannot happen in a valid log
                return entries, offset
            wrapped = True
            offset = LOG_HEADER_SIZE
            continue
        entries.append(entry)
        offset += entry.size


def scan_all(buf: bytes | memoryview) -> list[LogEntry]:
    """Every valid entry anywhere in the log, for a rebuild without a checkpoint.

    Replaying old entries again is harmless: a removal names an exact place and LSN, and
    transaction ids are never reused.
    """
    entries: list[LogEntry] = []
    offset = LOG_HEADER_SIZE
    end = len(buf)
    while offset + ENTRY_HEADER_SIZE <= end:
        entry = decode_entry(buf, offset, end)
        if entry is None:
            offset += 8
            continue
        if entry.kind != EntryKind.WRAP:
            entries.append(entry)
        offset += entry.size
    return sorted(entries, key=lambda e: e.lsn)
