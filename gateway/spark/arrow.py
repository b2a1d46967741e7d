"""Range records to Arrow record batches in the source's schema (what ``read()`` yields:
Arrow batches go to the JVM without a per-row conversion).

The stored property objects of a batch are parsed together by Arrow's JSON reader (one line
each) and the columns derived column-wise, far cheaper than ``json.loads`` and a dict per
row, which would keep the source below the Parquet sink's pace. Property objects
that do not fit one table (a key with different types in different messages) take the
row-by-row path, which gives the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from gateway.msmq.classes import MessageClass
from gateway.range_wire import COLUMN_KEYS, RangeRecord, RangeSpans, columns_of

__all__ = ["SCHEMA_DDL", "ARROW_SCHEMA", "record_batch", "spans_batch"]

SCHEMA_DDL = ("queue STRING, seq BIGINT, id STRING, label STRING, priority INT, class STRING, "
              "correlation_id STRING, sent_at TIMESTAMP, arrived_at TIMESTAMP, "
              "content_type STRING, properties MAP<STRING, STRING>, body BINARY")
_TS = pa.timestamp("us", tz="UTC")
_PROPERTIES = pa.map_(pa.string(), pa.string())
ARROW_SCHEMA = pa.schema([
    ("queue", pa.string()), ("seq", pa.int64()), ("id", pa.string()), ("label", pa.string()),
    ("priority", pa.int32()), ("class", pa.string()), ("correlation_id", pa.string()),
    ("sent_at", _TS), ("arrived_at", _TS), ("content_type", pa.string()),
    ("properties", _PROPERTIES), ("body", pa.binary()),
])
_META = pa.schema([("label", pa.string()), ("priority", pa.int64()),
                   ("message_class", pa.int64()), ("correlation_id", pa.string()),
                   ("sent_at_ms", pa.int64()), ("arrived_at_ms", pa.int64()),
                   ("content_type", pa.string()), ("message_id", pa.string())])
_PARSE = pajson.ParseOptions(explicit_schema=_META, unexpected_field_behavior="infer")
_FALLBACK = (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError)


def record_batch(queue: str, records: Sequence[RangeRecord]) -> pa.RecordBatch:
    """One batch with a row per record (times in microseconds, UTC)."""
    return _batch(queue, [r.seq for r in records], [r.message_id for r in records],
                  [r.meta for r in records], pa.array([r.body for r in records], pa.binary()))


def spans_batch(queue: str, spans: RangeSpans) -> pa.RecordBatch:
    """``record_batch`` of a decoded range answer, its bodies copied out of the answer at
    once: a bytes object per body, then Arrow's copy of them all, cost twice the memory
    and most of a partition's read."""
    return _batch(queue, spans.seqs, spans.ids, spans.metas, _bodies(spans))


def _bodies(spans: RangeSpans) -> pa.Array:
    rows, data, bounds = len(spans.seqs), spans.data, spans.bounds
    if not rows or len(data) >= 1 << 31:  # beyond what a binary array's offsets reach
        return pa.array([data[bounds[2 * i]: bounds[2 * i + 1]] for i in range(rows)],
                        pa.binary())
    # The answer seen as 2 * rows - 1 values without a copy: the bodies, and between two
    # of them the next record's header, id and properties. The even values are the bodies.
    offsets = pa.py_buffer(np.array(bounds, np.int32))
    whole = pa.BinaryArray.from_buffers(pa.binary(), 2 * rows - 1,
                                        [None, offsets, pa.py_buffer(data)])
    return whole.take(pa.array(np.arange(0, 2 * rows, 2)))


def _batch(queue: str, seqs: list[int], ids: list[str], metas: list[bytes],
           bodies: pa.Array) -> pa.RecordBatch:
    try:
        middle = _columns_at_once(metas)
    except (*_FALLBACK, _Irregular):
        middle = _columns_row_by_row(metas)
    return pa.RecordBatch.from_arrays([
        pa.array([queue] * len(seqs), pa.string()),
        pa.array(seqs, pa.int64()),
        pa.array(ids, pa.string()),
        *middle,
        bodies,
    ], schema=ARROW_SCHEMA)


class _Irregular(Exception):
    """Property objects the column-wise path does not take."""


def _columns_at_once(metas: Sequence[bytes]) -> list[pa.Array]:
    if not metas:
        raise _Irregular
    lines = b"\n".join(meta if meta.strip() else b"{}" for meta in metas)
    table = pajson.read_json(pa.BufferReader(lines), parse_options=_PARSE,
                             read_options=pajson.ReadOptions(block_size=len(lines) + 1))
    if table.num_rows != len(metas):
        raise _Irregular
    column = {name: table.column(name).combine_chunks() for name in table.column_names}
    return [column["label"].fill_null(""),
            column["priority"].fill_null(3).cast(pa.int32()),
            _class_names(column["message_class"].fill_null(0)),
            column["correlation_id"].fill_null(""),
            _micros(column["sent_at_ms"]), _micros(column["arrived_at_ms"]),
            column["content_type"].fill_null("application/octet-stream"),
            _properties(column, len(metas))]


def _class_names(numbers: pa.Array) -> pa.Array:
    uniques = pc.unique(numbers)
    names = []
    for number in uniques.to_pylist():
        try:
            names.append(MessageClass(number).msmq_name)
        except ValueError:
            names.append(str(number))
    return pc.take(pa.array(names, pa.string()), pc.index_in(numbers, uniques))


def _micros(millis: pa.Array) -> pa.Array:
    """Milliseconds (0 or absent: no time) to microsecond timestamps."""
    micros = pc.if_else(pc.greater(millis, 0), pc.multiply(millis, 1000),
                        pa.scalar(None, pa.int64()))
    return micros.cast(_TS)


def _as_text(values: pa.Array) -> pa.Array:
    if pa.types.is_string(values.type):
        return values
    if pa.types.is_null(values.type):
        return pa.nulls(len(values), pa.string())
    if (pa.types.is_boolean(values.type) or pa.types.is_integer(values.type)
            or pa.types.is_floating(values.type)):
        return values.cast(pa.string())  # what json.dumps writes for these
    raise _Irregular


def _properties(column: dict[str, pa.Array], rows: int) -> pa.Array:
    """The other stored properties and the extras as one map per row, in column order."""
    names: list[str] = []
    texts: list[pa.Array] = []
    for name, values in column.items():
        if name in COLUMN_KEYS:
            continue
        if name == "extra" and pa.types.is_struct(values.type):
            present = values.is_valid()
            for index in range(values.type.num_fields):
                child = values.field(index)
                names.append(values.type.field(index).name)
                texts.append(pc.if_else(present, _as_text(child), pa.scalar(None, pa.string())))
        elif name == "extra" and not pa.types.is_null(values.type):
            raise _Irregular
        elif name != "extra":
            names.append(name)
            texts.append(_as_text(values))
    if not texts:
        return pa.MapArray.from_arrays(pa.array(np.zeros(rows + 1, np.int32)),
                                       pa.array([], pa.string()), pa.array([], pa.string()))
    valid = np.stack([t.is_valid().to_numpy(zero_copy_only=False) for t in texts], axis=1)
    row_of, key_of = np.nonzero(valid)  # row by row, keys in column order within a row
    values = pa.concat_arrays(texts).take(pa.array(key_of * rows + row_of))
    keys = pa.array(np.array(names, dtype=object)[key_of], pa.string())
    offsets = np.zeros(rows + 1, np.int32)
    np.cumsum(valid.sum(axis=1), out=offsets[1:])
    return pa.MapArray.from_arrays(pa.array(offsets), keys, values)


def _columns_row_by_row(metas: Sequence[bytes]) -> list[pa.Array]:
    labels, priorities, classes, correlations = [], [], [], []
    sent, arrived, types, props = [], [], [], []
    for meta in metas:
        label, priority, cls, correlation, sent_ms, arrived_ms, ctype, others = columns_of(
            meta)
        labels.append(label)
        priorities.append(priority)
        classes.append(cls)
        correlations.append(correlation)
        sent.append(sent_ms * 1000 if sent_ms else None)
        arrived.append(arrived_ms * 1000 if arrived_ms else None)
        types.append(ctype)
        props.append(list(others.items()))
    return [pa.array(labels, pa.string()), pa.array(priorities, pa.int32()),
            pa.array(classes, pa.string()), pa.array(correlations, pa.string()),
            pa.array(sent, _TS), pa.array(arrived, _TS), pa.array(types, pa.string()),
            pa.array(props, _PROPERTIES)]
