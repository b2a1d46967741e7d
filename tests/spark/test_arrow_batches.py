"""Range records to Arrow: the column-wise path (Arrow's JSON reader over the stored property
objects) gives exactly the rows of the row-by-row path, for any stored properties; objects
it cannot take in one table fall back to the row-by-row path. A range answer decoded without
copying its bodies (what the Spark source reads) gives the same rows as its records."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.msmq.message import MessageProperties, encode_payload, split_payload
from gateway.range_wire import END_OF_RANGE, RangeRecord, decode_spans, encode_record
from gateway.spark import arrow


def _rows(batch: pa.RecordBatch) -> list[dict[str, Any]]:
    rows = batch.to_pylist()
    for row in rows:
        row["properties"] = sorted(row["properties"])
    return rows


def _record(seq: int, props: MessageProperties, body: bytes) -> RangeRecord:
    meta, stored = split_payload(encode_payload(props, body))
    return RangeRecord(seq, f"{{g}}\\{seq}", meta.tobytes(), stored.tobytes())


_text = st.text(max_size=12)
_props = st.builds(
    MessageProperties, label=_text, priority=st.integers(0, 7),
    message_class=st.sampled_from([0, 1, 0x8000, 0x8001, 0xC000, 0x4000, 12345]),
    correlation_id=_text, sent_at_ms=st.integers(0, 2**41), arrived_at_ms=st.integers(0, 2**41),
    content_type=st.sampled_from(["application/octet-stream", "text/plain", "x/y; a=b"]),
    transactional=st.booleans(), journal=st.sampled_from(["none", "journal", "deadletter"]),
    ack=st.integers(0, 15), response_queue=_text, source_qm=_text,
    extra=st.dictionaries(st.sampled_from(["source_queue", "reason", "stream_id", "x"]), _text,
                          max_size=3))


@settings(max_examples=60, deadline=None)
@given(st.lists(_props, min_size=1, max_size=30))
def test_column_wise_equals_row_by_row(many: list[MessageProperties]) -> None:
    records = [_record(n + 1, p, b"b%d" % n) for n, p in enumerate(many)]
    fast = arrow.record_batch("q", records)
    assert fast.schema == arrow.ARROW_SCHEMA
    column_wise = pa.RecordBatch.from_arrays([  # regular objects: no fallback
        fast.column(0), fast.column(1), fast.column(2), *arrow._columns_at_once([r.meta for r in records]),
        fast.column(11)], schema=arrow.ARROW_SCHEMA)
    slow = pa.RecordBatch.from_arrays([
        fast.column(0), fast.column(1), fast.column(2), *arrow._columns_row_by_row([r.meta for r in records]),
        fast.column(11)], schema=arrow.ARROW_SCHEMA)
    assert _rows(column_wise) == _rows(fast)
    assert _rows(fast) == _rows(slow)


def test_irregular_property_objects_take_the_row_by_row_path() -> None:
    metas = [b'{"label":"x","ack":1}', b'{"label":"y","ack":"one"}', b"", b'{"extra":[1]}',
             b'{"app_specific":{"nested":1}}']
    records = [RangeRecord(n + 1, str(n), meta, b"") for n, meta in enumerate(metas)]
    batch = arrow.record_batch("q", records)
    rows = _rows(batch)
    assert [r["label"] for r in rows] == ["x", "y", "", "", ""]
    assert rows[0]["properties"] == [("ack", "1")] and rows[1]["properties"] == [("ack", "one")]
    assert rows[2]["class"] == "MQMSG_CLASS_NORMAL" and rows[2]["priority"] == 3
    assert arrow.record_batch("q", []).num_rows == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_props, st.binary(max_size=300)), max_size=30),
       st.integers(1, 2**40))
def test_an_answers_bodies_are_taken_out_whole_and_in_order(
        messages: list[tuple[MessageProperties, bytes]], first: int) -> None:
    """Bodies of any length (empty ones too, and after ids and properties of any length)
    come out of the answer as the records have them."""
    records = [_record(first + n, p, body) for n, (p, body) in enumerate(messages)]
    answer = b"".join(b"".join(bytes(piece) for piece in encode_record(
        r.seq, r.message_id.encode(), r.meta, r.body)) for r in records) + END_OF_RANGE
    spans = decode_spans(answer)
    assert spans.records() == records
    assert _rows(arrow.spans_batch("q", spans)) == _rows(arrow.record_batch("q", records))
