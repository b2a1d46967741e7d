"""Range records to Arrow record batches in the source's schema (what ``read()`` yields:
Arrow batches go to the JVM without a per-row conversion)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from gateway.range_wire import RangeRecord, columns_of

__all__ = ["SCHEMA_DDL", "ARROW_SCHEMA", "record_batch"]

SCHEMA_DDL = ("queue STRING, seq BIGINT, id STRING, label STRING, priority INT, class STRING, "
              "correlation_id STRING, sent_at TIMESTAMP, arrived_at TIMESTAMP, "
              "content_type STRING, properties MAP<STRING, STRING>, body BINARY")
_TS = pa.timestamp("us", tz="UTC")
ARROW_SCHEMA = pa.schema([
    ("queue", pa.string()), ("seq", pa.int64()), ("id", pa.string()), ("label", pa.string()),
    ("priority", pa.int32()), ("class", pa.string()), ("correlation_id", pa.string()),
    ("sent_at", _TS), ("arrived_at", _TS), ("content_type", pa.string()),
    ("properties", pa.map_(pa.string(), pa.string())), ("body", pa.binary()),
])


def record_batch(queue: str, records: Sequence[RangeRecord]) -> pa.RecordBatch:
    """One batch with a row per record (times in microseconds, UTC)."""
    labels, priorities, classes, correlations = [], [], [], []
    sent, arrived, types, props = [], [], [], []
    for record in records:
        label, priority, cls, correlation, sent_ms, arrived_ms, ctype, others = columns_of(
            record.meta)
        labels.append(label)
        priorities.append(priority)
        classes.append(cls)
        correlations.append(correlation)
        sent.append(sent_ms * 1000 if sent_ms else None)
        arrived.append(arrived_ms * 1000 if arrived_ms else None)
        types.append(ctype)
        props.append(list(others.items()))
    return pa.RecordBatch.from_arrays([
        pa.array([queue] * len(records), pa.string()),
        pa.array([r.seq for r in records], pa.int64()),
        pa.array([r.message_id for r in records], pa.string()),
        pa.array(labels, pa.string()), pa.array(priorities, pa.int32()),
        pa.array(classes, pa.string()), pa.array(correlations, pa.string()),
        pa.array(sent, _TS), pa.array(arrived, _TS), pa.array(types, pa.string()),
        pa.array(props, pa.map_(pa.string(), pa.string())),
        pa.array([r.body for r in records], pa.binary()),
    ], schema=ARROW_SCHEMA)
