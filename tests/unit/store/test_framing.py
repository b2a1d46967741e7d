from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from store.framing import (
    FORMAT_VERSION,
    GRANULE,
    GROUP_MAX,
    RECORD_HEADER_SIZE,
    SEGMENT_HEADER_SIZE,
    ChainScan,
    Damage,
    RecordFlags,
    RecordHeader,
    RecordState,
    SegmentHeader,
    decode_record,
    decode_segment_header,
    encode_plain_parts,
    encode_record_parts,
    encode_segment_header,
    max_payload,
    record_size,
    scan_chain,
    scan_run,
)
from store.logcodec import Ref

NONCE = 0x1234ABCD


def encode_record(payload: bytes, **fields: object) -> bytes:
    """The record's bytes, as the writer's pwritev lays them down."""
    return b"".join(encode_record_parts(payload, **fields))  # type: ignore[arg-type]


def _record(payload: bytes, lsn: int, **kw: object) -> bytes:
    return encode_record(payload, lsn=lsn, nonce=NONCE, queue_id=kw.pop("queue_id", 3),  # type: ignore[arg-type]
                         seq=kw.pop("seq", lsn), **kw)  # type: ignore[arg-type]


@given(
    payload=st.binary(max_size=3000),
    lsn=st.integers(1, 2**64 - 1),
    queue_id=st.integers(0, 2**32 - 1),
    tx_id=st.integers(0, 2**64 - 1),
    seq=st.integers(0, 2**64 - 1),
    expires_ms=st.integers(0, 2**64 - 1),
    priority=st.integers(0, 7),
    flags=st.sampled_from(list(RecordFlags)),
    state=st.sampled_from(list(RecordState)),
    group=st.integers(0, GROUP_MAX),
)
def test_record_round_trip(payload: bytes, lsn: int, queue_id: int, tx_id: int, seq: int,
                           expires_ms: int, priority: int, flags: RecordFlags,
                           state: RecordState, group: int) -> None:
    data = encode_record(payload, lsn=lsn, nonce=NONCE, queue_id=queue_id, seq=seq, tx_id=tx_id,
                         expires_ms=expires_ms, priority=priority, flags=flags, state=state,
                         group=group)
    assert len(data) == record_size(len(payload))
    assert len(data) % GRANULE == 0
    header = decode_record(data, 0, len(data), nonce=NONCE)
    assert isinstance(header, RecordHeader)
    assert (header.lsn, header.queue_id, header.tx_id, header.seq, header.expires_ms,
            header.priority, header.flags, header.state, header.group) == (
        lsn, queue_id, tx_id, seq, expires_ms, priority, flags, state, group)
    assert data[header.payload_offset: header.payload_offset + header.payload_len] == payload


@given(
    payload=st.binary(max_size=3000),
    lsn=st.integers(1, 2**64 - 1),
    nonce=st.integers(0, 2**64 - 1),
    queue_id=st.integers(0, 2**32 - 1),
    seq=st.integers(0, 2**64 - 1),
    expires_ms=st.integers(0, 2**64 - 1),
    priority=st.integers(0, 7),
    flags=st.integers(0, 255),
)
def test_plain_encoding_is_the_general_one(payload: bytes, lsn: int, nonce: int, queue_id: int,
                                           seq: int, expires_ms: int, priority: int,
                                           flags: int) -> None:
    """The appends' fast encoder writes the very bytes of the general one (tx 0, LIVE)."""
    fast = encode_plain_parts(payload, lsn, nonce & 0xFFFFFFFF, queue_id, seq, expires_ms,
                              priority, flags)
    general = encode_record_parts(payload, lsn=lsn, nonce=nonce, queue_id=queue_id, seq=seq,
                                  expires_ms=expires_ms, priority=priority, flags=flags)
    assert fast == general


@settings(max_examples=300)
@given(payload=st.binary(max_size=200), data=st.data())
def test_every_single_bit_flip_is_detected(payload: bytes, data: st.DataObject) -> None:
    for state in RecordState:
        record = bytearray(_record(payload, 7, state=state))
        bit = data.draw(st.integers(0, len(record) * 8 - 1))
        record[bit // 8] ^= 1 << (bit % 8)
        assert isinstance(decode_record(record, 0, len(record), nonce=NONCE), Damage)


def test_all_bit_flips_of_one_small_record_are_detected() -> None:
    """Exhaustive over every bit of a 64-byte record (header + payload + padding)."""
    original = _record(b"abc", 9)
    for bit in range(len(original) * 8):
        record = bytearray(original)
        record[bit // 8] ^= 1 << (bit % 8)
        assert isinstance(decode_record(record, 0, len(record), nonce=NONCE), Damage), bit


def test_state_byte_can_change_without_breaking_the_checksum() -> None:
    record = bytearray(_record(b"abc", 9))
    record[3] = RecordState.DEAD
    header = decode_record(record, 0, len(record), nonce=NONCE)
    assert isinstance(header, RecordHeader)
    assert header.state == RecordState.DEAD


def test_other_nonce_is_not_a_record() -> None:
    record = _record(b"abc", 9)
    assert isinstance(decode_record(record, 0, len(record), nonce=NONCE + 1), Damage)


def test_segment_header_round_trip_and_damage() -> None:
    header = SegmentHeader("p", 12, 3, NONCE, 4 << 20, 1_700_000_000_000)
    data = encode_segment_header(header)
    assert len(data) == SEGMENT_HEADER_SIZE
    assert decode_segment_header(data) == header
    for bit in range(len(data) * 8):
        damaged = bytearray(data)
        damaged[bit // 8] ^= 1 << (bit % 8)
        assert isinstance(decode_segment_header(damaged), Damage)


def test_segments_of_format_version_1_are_still_read() -> None:
    """Version 2 added grouped commits (a state value and the ``group`` field, 0 before):
    stores written by version 1 open as they are; an unknown version is damage."""
    header = SegmentHeader("p", 12, 3, NONCE, 4 << 20, 1_700_000_000_000)
    data = bytearray(encode_segment_header(header))
    assert data[8] == FORMAT_VERSION == 2
    for version, readable in ((1, True), (2, True), (3, False)):
        data[8] = version
        data[60:64] = struct.pack("<I", zlib.crc32(bytes(data[:60])))
        assert (decode_segment_header(data) == header) is readable


def test_group_field_is_checked_like_every_other_bit() -> None:
    record = bytearray(_record(b"abc", 9, state=RecordState.GROUPED, group=3))
    header = decode_record(record, 0, len(record), nonce=NONCE)
    assert isinstance(header, RecordHeader) and header.group == 3
    record[50] ^= 1  # the group field's low byte
    assert isinstance(decode_record(record, 0, len(record), nonce=NONCE), Damage)


def test_max_payload_fills_one_segment() -> None:
    size = 64 << 10
    assert SEGMENT_HEADER_SIZE + record_size(max_payload(size)) <= size
    assert SEGMENT_HEADER_SIZE + record_size(max_payload(size) + GRANULE) > size


def _area(*records: bytes, size: int = 4096, fill: bytes = b"\0") -> bytearray:
    buf = bytearray(fill * size)
    offset = 0
    for record in records:
        buf[offset: offset + len(record)] = record
        offset += len(record)
    return buf


def test_chain_takes_newer_records_and_stops_at_an_old_one() -> None:
    buf = _area(_record(b"a", 11), _record(b"b" * 100, 12), _record(b"c", 5))
    scan = scan_chain(buf, 0, len(buf), nonce=NONCE, after_lsn=10)
    assert [r.lsn for r in scan.records] == [11, 12]
    assert scan.stop == "old"
    assert scan.damaged == []


def test_chain_stops_torn_at_a_cut_write() -> None:
    third = _record(b"x" * 300, 13)
    buf = _area(_record(b"a", 11), _record(b"b", 12))
    buf[128: 128 + 100] = third[:100]  # the crash cut the third record
    scan = scan_chain(buf, 0, len(buf), nonce=NONCE, after_lsn=10)
    assert [r.lsn for r in scan.records] == [11, 12]
    assert scan.stop == "torn"
    assert scan.end == 128


def test_chain_reports_corruption_and_keeps_what_follows() -> None:
    buf = _area(_record(b"a", 11), _record(b"b" * 70, 12), _record(b"c", 13))
    buf[64 + RECORD_HEADER_SIZE + 5] ^= 0x01  # a bit flip inside the second record's payload
    scan = scan_chain(buf, 0, len(buf), nonce=NONCE, after_lsn=10)
    assert [r.lsn for r in scan.records] == [11, 13]
    assert len(scan.damaged) == 1
    assert scan.damaged[0].offset == 64
    assert scan.damaged[0].reason == "record checksum mismatch"


def test_chain_over_zeros_finds_nothing() -> None:
    scan = scan_chain(bytes(4096), 0, 4096, nonce=NONCE, after_lsn=0)
    assert scan == ChainScan([], [], 0, "torn")


@given(st.lists(st.binary(max_size=300), min_size=1, max_size=8), st.data())
def test_chain_truncated_anywhere_keeps_exactly_the_whole_records(
    payloads: list[bytes], data: st.DataObject
) -> None:
    records = [_record(p, i + 1) for i, p in enumerate(payloads)]
    whole = b"".join(records)
    cut = data.draw(st.integers(0, len(whole)))
    buf = bytearray(whole[:cut]) + bytearray(len(whole) - cut + GRANULE)
    scan = scan_chain(buf, 0, len(buf), nonce=NONCE, after_lsn=0)
    # A record survives when every byte cut off was a zero (the space reads back as zeros):
    # its padding, and also trailing zero bytes of its payload (found by Hypothesis: b"\0").
    expected, total = 0, 0
    for record in records:
        if any(record[max(0, cut - total):]):
            break
        expected += 1
        total += len(record)
    assert len(scan.records) == expected
    assert scan.damaged == []


def test_run_scan_resumes_after_damage() -> None:
    records = [_record(bytes([i]) * (i * 40), i + 1) for i in range(6)]
    buf = bytearray(b"".join(records))
    second = len(records[0])
    buf[second: second + 8] = b"\xff" * 8  # the second record's header is wrecked
    scan = scan_run(buf, 0, len(buf), nonce=NONCE)
    assert [r.lsn for r in scan.records] == [1, 3, 4, 5, 6]
    assert len(scan.damaged) == 1
    assert scan.damaged[0].offset == second
    assert scan.damaged[0].length == len(records[1])


@pytest.mark.parametrize("cut", [0, 10, RECORD_HEADER_SIZE, RECORD_HEADER_SIZE + 3])
def test_decode_near_the_end_is_damage_not_an_exception(cut: int) -> None:
    record = _record(b"hello world", 4)
    assert isinstance(decode_record(record[:cut], 0, cut, nonce=NONCE), Damage)


@given(st.binary(max_size=512), st.integers(0, 600))
def test_any_bytes_decode_to_a_value(data: bytes, offset: int) -> None:
    end = len(data)
    if offset < end:
        assert isinstance(decode_record(data, offset, end, nonce=NONCE), (Damage, RecordHeader))
    assert isinstance(scan_chain(data, 0, end, nonce=NONCE, after_lsn=0), ChainScan)
    scan_run(data, 0, end, nonce=NONCE)


def test_damage_in_the_padding_is_named() -> None:
    record = bytearray(_record(b"abc", 9))
    record[-1] = 0x80
    found = decode_record(record, 0, len(record), nonce=NONCE)
    assert isinstance(found, Damage) and found.reason == "record padding is not zero"
    record[RECORD_HEADER_SIZE] ^= 1
    found = decode_record(record, 0, len(record), nonce=NONCE)
    assert isinstance(found, Damage) and found.reason == "record checksum mismatch"


def test_headers_hold_plain_ints_and_their_segment() -> None:
    """Plain ints compare equal to the enum members; the scan names the segment."""
    record = _record(b"abc", 9, flags=RecordFlags.JOURNAL)
    header = decode_record(record, 0, len(record), nonce=NONCE, segment=12)
    assert isinstance(header, RecordHeader)
    assert header.flags == RecordFlags.JOURNAL and header.state == RecordState.LIVE
    assert header.segment == 12 and header.ref == Ref(12, 0, 9)
    run = scan_run(record, 0, len(record), nonce=NONCE, segment=12)
    assert run.records == [header]
