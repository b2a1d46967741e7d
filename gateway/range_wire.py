"""The framing of a range read (``GET /v1/queues/{q}/range``), pure: both ends use it.

Content type ``application/x-entrepot-records``: records back to back, each::

    u64 seq  u32 id_len  u32 meta_len  u32 body_len  id (UTF-8)  meta (JSON)  body

big-endian, then an end marker (a header of zeros), so a reader tells a whole answer from a
cut one. ``meta`` is the message's stored property object (the fields of
``MessageProperties`` that differ from their defaults) passed through unchanged, so the gateway
parses no JSON on this path; the reader turns it into columns. Records come in sequence order;
a sequence without a record in the range (an aborted transaction, a send that failed) is simply
absent, and the response's ``Entrepot-Next`` header says where the covered range ends.
"""

from __future__ import annotations

import json
import re
import struct
from typing import Any, NamedTuple

from gateway.msmq.classes import MessageClass

__all__ = ["CONSUMER_NAME", "CONSUMER_NAME_RULE", "CONTENT_TYPE", "END_OF_RANGE", "RangeRecord",
           "RangeFormatError", "RangeSpans", "encode_record", "decode_records", "decode_spans",
           "columns_of", "COLUMN_KEYS"]

CONTENT_TYPE = "application/x-entrepot-records"
# A range consumer's name, as the gateway takes it and as a reader (Spark, a landing) checks
# it before it asks.
# Not "." or "..": a URL path cannot carry them (clients drop them as dot segments), so
# such a consumer could not be deleted, and it holds retention back.
CONSUMER_NAME = re.compile(r"^(?!\.\.?\Z)[A-Za-z0-9._-]{1,64}\Z")
CONSUMER_NAME_RULE = "use 1-64 letters, digits, '.', '_' or '-', not '.' or '..' alone"
_HEAD = ">QIII"
_HEAD_STRUCT = struct.Struct(_HEAD)
_HEAD_SIZE = _HEAD_STRUCT.size
END_OF_RANGE = bytes(_HEAD_SIZE)

# Stored property names that become their own columns; every other one goes to ``properties``.
COLUMN_KEYS = frozenset({"label", "priority", "message_class", "correlation_id", "sent_at_ms",
                         "arrived_at_ms", "content_type", "message_id"})


class RangeFormatError(ValueError):
    """Bytes that are not a well-formed range response."""


class RangeRecord(NamedTuple):  # a tuple: cheaper to build per record than a dataclass
    seq: int
    message_id: str
    meta: bytes
    body: bytes


def encode_record(seq: int, message_id: bytes, meta: bytes | memoryview,
                  body: bytes | memoryview) -> list[bytes | memoryview]:
    """The pieces of one framed record (written as they are: no copy of the body)."""
    return [struct.pack(_HEAD, seq, len(message_id), len(meta), len(body)), message_id, meta,
            body]


class RangeSpans(NamedTuple):
    """A whole range answer decoded without copying its bodies: record ``i`` is
    ``seqs[i]``, ``ids[i]``, ``metas[i]`` and the body ``data[bounds[2i]:bounds[2i + 1]]``
    (a reader that makes columns takes the bodies out of ``data`` in one go)."""

    data: bytes
    seqs: list[int]
    ids: list[str]
    metas: list[bytes]
    bounds: list[int]

    def records(self) -> list[RangeRecord]:
        data, bounds = self.data, self.bounds
        return [RangeRecord(seq, message_id, meta, data[bounds[2 * i]: bounds[2 * i + 1]])
                for i, (seq, message_id, meta) in enumerate(zip(self.seqs, self.ids,
                                                                 self.metas))]


def decode_spans(data: bytes) -> RangeSpans:
    """Every record of a whole response body, in order.

    Raises:
        RangeFormatError: a truncated record, a missing end marker, bytes after it, or
            sequences that do not increase.
    """
    seqs: list[int] = []
    ids: list[str] = []
    metas: list[bytes] = []
    bounds: list[int] = []
    unpack = _HEAD_STRUCT.unpack_from
    offset, last = 0, 0
    while True:
        if offset + _HEAD_SIZE > len(data):
            raise RangeFormatError(f"answer cut at byte {len(data)}: no end marker after "
                                   f"record {last}")
        seq, id_len, meta_len, body_len = unpack(data, offset)
        offset += _HEAD_SIZE
        if seq == 0:
            if id_len or meta_len or body_len or offset != len(data):
                raise RangeFormatError(f"malformed end marker at byte {offset - _HEAD_SIZE}")
            return RangeSpans(data, seqs, ids, metas, bounds)
        end = offset + id_len + meta_len + body_len
        if end > len(data):
            raise RangeFormatError(f"record {seq} truncated at byte {len(data)} (needs {end})")
        if seq <= last:
            raise RangeFormatError(f"record {seq} after {last}: sequences must increase")
        meta_at = offset + id_len
        body_at = meta_at + meta_len
        seqs.append(seq)
        ids.append(data[offset: meta_at].decode("utf-8", "replace"))
        metas.append(data[meta_at: body_at])
        bounds += (body_at, end)
        offset, last = end, seq


def decode_records(data: bytes) -> list[RangeRecord]:
    """Every record of a whole response body, in order (each body its own copy).

    Raises:
        RangeFormatError: as ``decode_spans``.
    """
    return decode_spans(data).records()


def columns_of(meta: bytes) -> tuple[str, int, str, str, int, int, str, dict[str, str]]:
    """(label, priority, class, correlation id, sent at ms, arrived at ms, content type,
    other properties as text) from a record's stored property object."""
    props: dict[str, Any] = json.loads(meta) if meta else {}
    number = int(props.get("message_class", 0))
    try:
        class_name = MessageClass(number).msmq_name
    except ValueError:
        class_name = str(number)
    others = {k: v if isinstance(v, str) else json.dumps(v) for k, v in props.items()
              if k not in COLUMN_KEYS and k != "extra"}
    extra = props.get("extra")
    if isinstance(extra, dict):
        others.update((str(k), str(v)) for k, v in extra.items())
    return (str(props.get("label", "")), int(props.get("priority", 3)),
            class_name, str(props.get("correlation_id", "")),
            int(props.get("sent_at_ms", 0)), int(props.get("arrived_at_ms", 0)),
            str(props.get("content_type", "application/octet-stream")), others)
