"""The range-read framing: what the gateway writes, the reader takes back whole, and anything
cut or mangled is an error, never fewer records."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.msmq.classes import MessageClass
from gateway.msmq.message import MessageProperties, encode_payload, split_payload
from gateway.range_wire import (
    END_OF_RANGE, RangeFormatError, columns_of, decode_records, encode_record)


def _answer(records: list[tuple[int, bytes, bytes, bytes]]) -> bytes:
    pieces: list[bytes | memoryview] = []
    for seq, message_id, meta, body in records:
        pieces.extend(encode_record(seq, message_id, meta, body))
    pieces.append(END_OF_RANGE)
    return b"".join(pieces)


def test_round_trip_with_stored_properties() -> None:
    props = MessageProperties(label="l", priority=6, message_class=int(MessageClass.NACK_RECEIVE_TIMEOUT),
                              correlation_id="c", sent_at_ms=5, arrived_at_ms=9,
                              content_type="text/plain", admin_queue="private$/adm",
                              extra={"source_queue": "q"})
    meta, body = split_payload(encode_payload(props, b"hello"))
    data = _answer([(3, b"{g}\\1", meta.tobytes(), body.tobytes()), (7, b"x", b"", b"")])
    first, second = decode_records(data)
    assert (first.seq, first.message_id, first.body) == (3, "{g}\\1", b"hello")
    assert columns_of(first.meta) == ("l", 6, "MQMSG_CLASS_NACK_RECEIVE_TIMEOUT", "c", 5, 9,
                                      "text/plain", {"admin_queue": "private$/adm",
                                                     "source_queue": "q"})
    assert columns_of(second.meta)[:3] == ("", 3, "MQMSG_CLASS_NORMAL")
    assert decode_records(END_OF_RANGE) == []


def test_unknown_class_numbers_stay_numbers() -> None:
    assert columns_of(json.dumps({"message_class": 77}).encode())[2] == "77"


def test_every_cut_is_detected() -> None:
    data = _answer([(1, b"a", b"{}", b"x" * 10), (2, b"b", b"{}", b"y" * 10)])
    for cut in range(len(data)):
        with pytest.raises(RangeFormatError):
            decode_records(data[:cut])
    with pytest.raises(RangeFormatError, match="after"):
        decode_records(_answer([(2, b"", b"", b""), (2, b"", b"", b"")]))
    with pytest.raises(RangeFormatError, match="end marker"):
        decode_records(data + b"\0")


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_any_bytes_decode_or_fail_cleanly(data: bytes) -> None:
    try:
        records = decode_records(data)
    except RangeFormatError:
        return
    assert all(r.seq > 0 for r in records)


def test_a_consumer_name_is_one_a_url_path_can_carry() -> None:
    from gateway.range_wire import CONSUMER_NAME

    # "." and ".." are dot segments: clients drop them from a path, so such a consumer could
    # not be deleted (and retention waits for it).
    assert [n for n in (".", "..", "...", ".a", "a..b", "x" * 64) if CONSUMER_NAME.match(n)] == [
        "...", ".a", "a..b", "x" * 64]
