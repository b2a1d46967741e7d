"""Segment and record framing: bytes in, values out (pure: no I/O).

Format version 2 — set in stone once data exists; a change bumps ``FORMAT_VERSION``. Version 1
segments (no ``GROUPED`` state, ``group`` always 0) are read as they are.

Segment file (``pNNNNNNN.mq``, ``jNNNNNNN.mq``, ``rNNNNNNN.mq``)::

    [0, 64)        segment header: magic "ENTRSEG1", version, kind, number, generation,
                   store nonce, segment size, created (ms), CRC-32 of the header
    [64, size)     records, each starting on a 64-byte granule

Record (``RECORD_HEADER`` then payload, padded to the next granule)::

    u16 magic 0xEA7E   u8 kind   u8 state   u32 payload_len   u64 lsn
    u32 nonce          u32 queue_id          u64 tx_id         u64 seq
    u64 expires_ms     u8 priority  u8 flags  u16 group        u32 crc

``crc`` is CRC-32 over the header with the ``state`` byte zeroed, then the payload; the padding
must be zero bytes, so every bit of a record is checked. ``state`` is
the one mutable byte (LIVE, DEAD, PENDING, GROUPED), rewritten in place when a message is
removed or its transaction resolved; its values are far apart so a flipped bit is seen, not
believed. ``group`` is 0, or for the records of a grouped commit (a transaction that only sends:
committed without a QMLog entry) how many records the commit wrote; recovery takes such a
commit only when all of them are found (see ``store.recovery``).
``nonce`` is the low 32 bits of the store's random nonce: bytes that merely look like a record
(an old segment's leftovers, or a message body crafted to look like one) are not taken for one.

Theory of operation for scans — every function here returns values, never raises on bad bytes:
- ``decode_record`` checks one position: magic, nonce, kind, bounds, CRC.
- ``scan_chain`` follows records laid end to end from an area's start and accepts those newer
  than a checkpoint; it stops at the first record that is old, torn or not there. When a bad
  record's length still points at a valid newer record, the bad one is corruption (reported and
  skipped), not the end of the chain.
- ``scan_run`` parses a run the checkpoint says is occupied; after a damaged record it looks for
  the next valid record at later granules, so one bad record never hides the rest.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass
from typing import Literal, NamedTuple

from store.crc import crc32
from store.logcodec import Ref

__all__ = [
    "FORMAT_VERSION",
    "GROUP_MAX",
    "GRANULE",
    "SEGMENT_HEADER_SIZE",
    "RECORD_HEADER_SIZE",
    "RecordKind",
    "RecordState",
    "RecordFlags",
    "record_flags",
    "SegmentHeader",
    "RecordHeader",
    "Damage",
    "ChainScan",
    "RunScan",
    "record_size",
    "max_payload",
    "encode_segment_header",
    "decode_segment_header",
    "encode_record_parts",
    "encode_plain_parts",
    "decode_record",
    "scan_chain",
    "scan_run",
    "peek_record",
]

FORMAT_VERSION = 2
_VERSIONS_READ = frozenset((1, 2))
GROUP_MAX = 0xFFFF
GRANULE = 64
_PADS = tuple(bytes(n) for n in range(GRANULE))  # a record's padding is shorter than a granule
SEGMENT_MAGIC = b"ENTRSEG1"
RECORD_MAGIC = 0xEA7E

_SEGMENT = struct.Struct("<8sHBBIIQIQ20xI")
_RECORD = struct.Struct("<HBBIQIIQQQBBHI")
_CRC = struct.Struct("<I")
SEGMENT_HEADER_SIZE = _SEGMENT.size
RECORD_HEADER_SIZE = _RECORD.size
_STATE_OFFSET = 3
_CRC_OFFSET = RECORD_HEADER_SIZE - 4
_HEAD_CRC = crc32(struct.pack("<HBB", RECORD_MAGIC, 1, 0))  # kind MESSAGE, state zeroed
_MESSAGE = 1  # RecordKind.MESSAGE
_TAIL = struct.Struct("<IQIIQQQBBH")  # the header from payload_len to the CRC
assert _TAIL.size == _CRC_OFFSET - 4
_SIZE_ROUND = RECORD_HEADER_SIZE + GRANULE - 1
_SIZE_MASK = ~(GRANULE - 1)
assert SEGMENT_HEADER_SIZE == 64
assert RECORD_HEADER_SIZE == 56
assert RECORD_HEADER_SIZE <= GRANULE
assert SEGMENT_HEADER_SIZE % GRANULE == 0


class RecordKind(enum.IntEnum):
    MESSAGE = 1


class RecordState(enum.IntEnum):
    """The mutable byte. Values differ in at least four bits from each other."""

    LIVE = 0x00
    PENDING = 0x5A
    DEAD = 0xDD
    GROUPED = 0xA5  # written by a grouped commit; LIVE from the next checkpoint on


class RecordFlags(enum.IntFlag):
    NONE = 0
    TRANSACTIONAL = 1
    JOURNAL = 2
    EXPRESS = 4
    # The payload carries the sender's own message id, which a caller's duplicate window keys
    # on: the caller finds such records again after a crash (``MessageStore.keyed_records``)
    # and is told before one is removed (``MessageStore.removal_hooks``).
    KEYED = 8
    # The payload carries the position of an ordered stream the caller tracks (a stream
    # message holds its stream's new position until it is written elsewhere): found again
    # after a crash (``MessageStore.flagged_since``), announced before removal like KEYED.
    STREAM = 16


_KINDS = frozenset(member.value for member in RecordKind)
_STATES = frozenset(member.value for member in RecordState)
_FLAGS: dict[int, RecordFlags] = {}
assert _MESSAGE == RecordKind.MESSAGE
# magic, kind MESSAGE and each state: the header's first four bytes.
_PREFIXES = {state: struct.pack("<HBB", RECORD_MAGIC, _MESSAGE, state) for state in RecordState}
_LIVE_PREFIX = _PREFIXES[RecordState.LIVE]


def record_flags(value: int) -> RecordFlags:
    """The ``RecordFlags`` of a flags byte (cached: building an enum value is slow)."""
    flags = _FLAGS.get(value)
    if flags is None:
        flags = _FLAGS.setdefault(value, RecordFlags(value))
    return flags


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    kind: str
    number: int
    generation: int
    nonce: int
    size: int
    created_ms: int


class RecordHeader(NamedTuple):
    """A record that passed every check; ``offset`` is where it starts in its segment (whose
    number the scan was given). A tuple of plain ints: recovery makes one per record (a
    frozen dataclass is slower to build), and the garbage collector stops tracking a tuple
    that holds only ints, where enum members would keep a million of them in every full
    pass of a large recovery. ``kind``, ``state`` and ``flags`` compare equal to the
    ``RecordKind``, ``RecordState`` and ``RecordFlags`` members they hold the values of."""

    offset: int
    size: int
    kind: int
    state: int
    payload_len: int
    lsn: int
    queue_id: int
    tx_id: int
    seq: int
    expires_ms: int
    priority: int
    flags: int
    group: int = 0
    segment: int = 0

    @property
    def payload_offset(self) -> int:
        return self.offset + RECORD_HEADER_SIZE

    @property
    def ref(self) -> Ref:
        return Ref(self.segment, self.offset, self.lsn)


_new_tuple = tuple.__new__


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes that should hold a record and do not: where, how many, and why."""

    offset: int
    length: int
    reason: str


@dataclass(frozen=True, slots=True)
class ChainScan:
    records: list[RecordHeader]
    damaged: list[Damage]
    end: int
    stop: Literal["end", "old", "torn"]


@dataclass(frozen=True, slots=True)
class RunScan:
    records: list[RecordHeader]
    damaged: list[Damage]


def record_size(payload_len: int) -> int:
    """Bytes a record occupies in a segment, granule-aligned."""
    raw = RECORD_HEADER_SIZE + payload_len
    return (raw + GRANULE - 1) // GRANULE * GRANULE


def max_payload(segment_size: int) -> int:
    """The largest payload one segment can hold (a message never spans segments)."""
    return segment_size - SEGMENT_HEADER_SIZE - RECORD_HEADER_SIZE


def encode_segment_header(header: SegmentHeader) -> bytes:
    assert header.kind in ("p", "j", "r")
    assert header.size % GRANULE == 0
    body = _SEGMENT.pack(SEGMENT_MAGIC, FORMAT_VERSION, ord(header.kind), 0, header.number,
                         header.generation, header.nonce, header.size, header.created_ms, 0)
    crc = crc32(body[:-4])
    return body[:-4] + struct.pack("<I", crc)


def decode_segment_header(data: bytes | memoryview) -> SegmentHeader | Damage:
    if len(data) < SEGMENT_HEADER_SIZE:
        return Damage(0, len(data), "segment shorter than its header")
    (magic, version, kind, _, number, generation, nonce, size, created_ms,
     crc) = _SEGMENT.unpack_from(data, 0)
    if magic != SEGMENT_MAGIC:
        return Damage(0, SEGMENT_HEADER_SIZE, "bad segment magic")
    if crc32(bytes(data[: SEGMENT_HEADER_SIZE - 4])) != crc:
        return Damage(0, SEGMENT_HEADER_SIZE, "segment header checksum mismatch")
    if version not in _VERSIONS_READ:
        return Damage(0, SEGMENT_HEADER_SIZE, f"unsupported format version {version}")
    return SegmentHeader(chr(kind), number, generation, nonce, size, created_ms)


def encode_record_parts(
    payload: bytes | memoryview,
    *,
    lsn: int,
    nonce: int,
    queue_id: int,
    seq: int,
    tx_id: int = 0,
    expires_ms: int = 0,
    priority: int = 0,
    flags: RecordFlags | int = RecordFlags.NONE,
    state: RecordState = RecordState.LIVE,
    group: int = 0,
) -> tuple[bytes, bytes | memoryview, bytes]:
    """The record as (header, payload, padding), padded to a whole number of granules, for
    ``pwritev``: the payload is never copied (the writer thread encodes every message, on
    the commit path). ``b"".join`` of the parts is the record's bytes."""
    assert lsn > 0
    assert 0 <= priority <= 7 and 0 <= group <= GROUP_MAX
    payload_len = len(payload)
    tail = _TAIL.pack(payload_len, lsn, nonce & 0xFFFFFFFF, queue_id, tx_id, seq, expires_ms,
                      priority, int(flags), group)
    crc = crc32(payload, crc32(tail, _HEAD_CRC))
    header = _PREFIXES[state] + tail + _CRC.pack(crc)
    return header, payload, _PADS[-(RECORD_HEADER_SIZE + payload_len) % GRANULE]


def encode_plain_parts(payload: bytes | memoryview, lsn: int, nonce32: int, queue_id: int,
                       seq: int, expires_ms: int, priority: int,
                       flags: int) -> tuple[bytes, bytes | memoryview, bytes]:
    """``encode_record_parts`` of a LIVE record outside any transaction, arguments by
    position: the writer runs it once per appended message, and keyword passing and the
    general checks would be a large share of it. ``nonce32`` is the nonce's low 32 bits."""
    payload_len = len(payload)
    tail = _TAIL.pack(payload_len, lsn, nonce32, queue_id, 0, seq, expires_ms, priority, flags,
                      0)
    crc = crc32(payload, crc32(tail, _HEAD_CRC))
    return (_LIVE_PREFIX + tail + _CRC.pack(crc), payload,
            _PADS[-(RECORD_HEADER_SIZE + payload_len) % GRANULE])


def decode_record(
    buf: bytes | memoryview | bytearray, offset: int, end: int, *, nonce: int, segment: int = 0
) -> RecordHeader | Damage:
    """Check the record at ``offset`` (which must lie before ``end``) of segment ``segment``.
    Recovery calls this once per record: it is kept lean (one unpack, two CRC calls)."""
    if end - offset < RECORD_HEADER_SIZE:
        return Damage(offset, end - offset, "truncated record header")
    (magic, kind, state, payload_len, lsn, rec_nonce, queue_id, tx_id, seq, expires_ms,
     priority, flags, group, crc) = _RECORD.unpack_from(buf, offset)
    if magic != RECORD_MAGIC:
        return Damage(offset, GRANULE, "no record magic")
    if rec_nonce != nonce & 0xFFFFFFFF:
        return Damage(offset, GRANULE, "record of another store or segment generation")
    size = (payload_len + _SIZE_ROUND) & _SIZE_MASK  # record_size, inlined
    if offset + size > end:
        return Damage(offset, end - offset, "record runs past the end of its area")
    view = buf if type(buf) is memoryview else memoryview(buf)
    payload_start = offset + RECORD_HEADER_SIZE
    payload_end = payload_start + payload_len
    if kind == _MESSAGE:  # a plain int: cheaper than comparing with the enum member
        # The first four header bytes are known (magic, kind, state zeroed): their CRC is too.
        head_crc = crc32(view[offset + 4: offset + _CRC_OFFSET], _HEAD_CRC)
    else:
        header = bytearray(view[offset: offset + _CRC_OFFSET])
        header[_STATE_OFFSET] = 0
        head_crc = crc32(header)
    # One CRC over payload and padding: the CRC of the payload followed by zero padding is
    # the stored CRC carried on over zeros. A flipped padding bit is caught as surely as a
    # flipped payload bit (CRC-32 detects every burst up to 32 bits), without a compare.
    if crc32(view[payload_start: offset + size], head_crc) != crc32(
            _PADS[offset + size - payload_end], crc):
        if crc32(view[payload_start: payload_end], head_crc) == crc:
            return Damage(offset, size, "record padding is not zero")
        return Damage(offset, size, "record checksum mismatch")
    if kind not in _KINDS or state not in _STATES:
        return Damage(offset, size, f"unknown record kind {kind} or state {state:#x}")
    if lsn == 0 or priority > 7:
        return Damage(offset, size, "record fields out of range")
    # tuple.__new__ directly: the generated __new__ is a Python function, slow per record.
    return _new_tuple(RecordHeader, (offset, size, kind, state, payload_len, lsn, queue_id,
                                     tx_id, seq, expires_ms, priority, flags, group,
                                     segment))


def scan_chain(
    buf: bytes | memoryview | bytearray, start: int, end: int, *, nonce: int, after_lsn: int,
    segment: int = 0,
) -> ChainScan:
    """Follow records laid end to end in ``[start, end)`` that are newer than ``after_lsn``.

    Decision table (at each position):

    ================================  =================================================
    what is there                     what the scan does
    ================================  =================================================
    valid record, lsn > after_lsn     take it; continue after it
    valid record, lsn <= after_lsn    stop "old" (free space that was never reused)
    bad record whose length points    report it as damage (corruption, not a torn
    at a valid newer record           tail); continue at that record
    anything else                     stop "torn" (the write that was cut by a crash,
                                      or space never written)
    reached ``end``                   stop "end"
    ================================  =================================================
    """
    records: list[RecordHeader] = []
    damaged: list[Damage] = []
    offset = start
    last_lsn = after_lsn
    buf = memoryview(buf)
    while offset < end:
        found = decode_record(buf, offset, end, nonce=nonce, segment=segment)
        if isinstance(found, RecordHeader):
            if found.lsn <= after_lsn:
                return ChainScan(records, damaged, offset, "old")
            records.append(found)
            last_lsn = max(last_lsn, found.lsn)
            offset += found.size
            continue
        skip = _claimed_size(buf, offset, end)
        if skip:
            following = decode_record(buf, offset + skip, end, nonce=nonce)
            if isinstance(following, RecordHeader) and following.lsn > last_lsn:
                damaged.append(Damage(offset, skip, found.reason))
                offset += skip
                continue
        return ChainScan(records, damaged, offset, "torn")
    return ChainScan(records, damaged, end, "end")


def scan_run(buf: bytes | memoryview | bytearray, start: int, end: int, *, nonce: int,
             segment: int = 0) -> RunScan:
    """Parse ``[start, end)``, which the checkpoint says holds live records end to end.

    A damaged record is reported; the scan goes on at its claimed end when a valid record is
    there, else at the next granule where a valid record starts.
    """
    records: list[RecordHeader] = []
    damaged: list[Damage] = []
    offset = start
    buf = memoryview(buf)
    append = records.append
    while offset < end:
        found = decode_record(buf, offset, end, nonce=nonce, segment=segment)
        if isinstance(found, RecordHeader):
            append(found)
            offset += found.size
            continue
        resume = _resume_after_damage(buf, offset, end, nonce=nonce)
        damaged.append(Damage(offset, resume - offset, found.reason))
        offset = resume
    return RunScan(records, damaged)


def _claimed_size(buf: bytes | memoryview | bytearray, offset: int, end: int) -> int:
    """The size a damaged header claims, when it is plausible; else 0."""
    if end - offset < RECORD_HEADER_SIZE:
        return 0
    magic, _, _, payload_len = struct.unpack_from("<HBBI", buf, offset)
    if magic != RECORD_MAGIC:
        return 0
    size = record_size(payload_len)
    return size if offset + size < end else 0


def _resume_after_damage(
    buf: bytes | memoryview | bytearray, offset: int, end: int, *, nonce: int
) -> int:
    claimed = _claimed_size(buf, offset, end)
    if claimed and isinstance(decode_record(buf, offset + claimed, end, nonce=nonce),
                              RecordHeader):
        return offset + claimed
    probe = offset + GRANULE
    while probe < end:
        if isinstance(decode_record(buf, probe, end, nonce=nonce), RecordHeader):
            return probe
        probe += GRANULE
    return end


def peek_record(buf: bytes | memoryview | bytearray, offset: int) -> tuple[int, int] | None:
    """``(lsn, size)`` of the record the store itself placed at ``offset`` (no CRC check: for
    bookkeeping on records already verified), or None when no record header is there."""
    if len(buf) - offset < RECORD_HEADER_SIZE:
        return None
    magic, _, _, payload_len, lsn = struct.unpack_from("<HBBIQ", buf, offset)
    if magic != RECORD_MAGIC:
        return None
    return lsn, record_size(payload_len)
