"""The ``entrepot`` PySpark data source: queues read by sequence range, exactly once through
Spark's checkpoint (docs/spark.md).

Offsets are ``{"<queue path>": <next sequence to read>}``. Before a micro-batch runs, Spark
writes its ``[start, end)`` to the checkpoint; executors read each partition's range (the
gateway answers the same records every time, or 410 when they were trimmed: never a short
answer). Spark calls ``latestOffset(start, ...)`` only once the batch ending at ``start`` is in
its commit log, so that call moves this query's registered consumer to ``start`` — also after
the last batch of an ``availableNow`` run and after a restart on a checkpoint whose last batch
committed just before a crash. ``commit(end)`` (which Spark sends one batch late) moves it too;
both are idempotent at the gateway. The consumer is registered when a query first plans, so
retention never runs ahead of a query that has not committed yet.

Options are case-insensitive; an unknown one is refused when the source is loaded
(``OPTIONS`` lists them; docs/spark.md has the table).

pyarrow is imported by ``read()`` only: Spark unpickles this module in three short-lived
Python processes on the driver before a stream's first rows (the source's creation, the
offsets runner, the read planner), none of which builds an Arrow batch.
"""

from __future__ import annotations

import codecs
import logging
from collections.abc import Collection, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from gateway.range_wire import decode_spans
from gateway.spark.client import GatewayClient, RangeGone
from gateway.spark.offsets import (
    by_queue,
    fair_shares,
    joining,
    stamped,
    unstamped,
    wrong_incarnations,
)
from gateway.spark.options import OPTIONS, SourceOptionError, SourceOptions
from gateway.spark.split import split_ranges

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["EntrepotDataSource", "RangePartition", "SourceOptions", "SourceOptionError",
           "OPTIONS", "source_schema", "fair_shares"]

log = logging.getLogger("entrepot.spark")
_PIECE_RECORDS = 4_096  # records per range read and Arrow batch within a partition
_PIECE_BYTES = 32 << 20  # and payload bytes past the first record

def source_schema(body_format: str = "binary") -> StructType:
    """The source's columns (``body`` is a string with ``bodyFormat=string``)."""
    return StructType([
        StructField("queue", StringType()), StructField("seq", LongType()),
        StructField("id", StringType()), StructField("label", StringType()),
        StructField("priority", IntegerType()), StructField("class", StringType()),
        StructField("correlation_id", StringType()), StructField("sent_at", TimestampType()),
        StructField("arrived_at", TimestampType()), StructField("content_type", StringType()),
        StructField("properties", MapType(StringType(), StringType())),
        StructField("body", StringType() if body_format == "string" else BinaryType()),
    ])


class _Shape:
    """The rows as the query wants them: the columns of its schema (a user schema may be
    any projection of the source's columns, in any order) and the body as bytes or text."""

    def __init__(self, options: SourceOptions, schema: Any) -> None:
        source = source_schema(options.body_format)
        self.body_format = options.body_format
        if isinstance(schema, str) or schema is None:
            schema = source
        if not isinstance(schema, StructType):
            raise SourceOptionError(f"schema {schema!r}: expected a StructType")
        by_name = {f.name.lower(): f for f in source.fields}
        self.columns: list[int] = []
        names = [f.name for f in source.fields]
        for wanted in schema.fields:
            have = by_name.get(wanted.name.lower())
            if have is None:
                raise SourceOptionError(
                    f"schema: column {wanted.name!r} is not a column of the entrepot source; "
                    f"a schema given with .schema() must pick from {source.simpleString()}")
            if not _same_type(wanted.dataType, have.dataType):
                hint = ""
                if have.name == "body":
                    hint = (" (set option bodyFormat=string for a text body)"
                            if isinstance(wanted.dataType, StringType)
                            else " (bodyFormat=string makes it a string)")
                raise SourceOptionError(
                    f"schema: column {wanted.name!r} is {wanted.dataType.simpleString()} but "
                    f"the source gives {have.dataType.simpleString()}{hint}")
            self.columns.append(names.index(have.name))
        self.schema = schema
        self.arrow: pa.Schema | None = None  # made where rows are read (imports pyarrow)

    def __call__(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        if self.arrow is None:
            self.arrow = to_arrow_schema(self.schema, timezone="UTC")
        arrays = list(batch.columns)
        if self.body_format == "string":
            arrays[11] = _text_bodies(arrays[11], arrays[9])
        return pa.RecordBatch.from_arrays([arrays[i] for i in self.columns],
                                          schema=self.arrow)


def _same_type(a: DataType, b: DataType) -> bool:
    if isinstance(a, MapType) and isinstance(b, MapType):
        return _same_type(a.keyType, b.keyType) and _same_type(a.valueType, b.valueType)
    return type(a) is type(b)


def _text_bodies(bodies: pa.Array, content_types: pa.Array) -> pa.Array:
    """Bodies as text: UTF-8 unless the message's content type names another charset;
    bytes that do not decode become U+FFFD."""
    import pyarrow as pa
    import pyarrow.compute as pc

    plain = pc.match_substring(content_types, "charset=", ignore_case=True)
    if not pc.any(plain).as_py():
        try:
            return bodies.cast(pa.string())  # valid UTF-8 throughout: no copy per row
        except pa.ArrowInvalid:  # not UTF-8 throughout: each row is decoded below
            pass
    texts = []
    for body, ctype in zip(bodies.to_pylist(), content_types.to_pylist()):
        texts.append(body.decode(_charset(ctype or ""), "replace"))
    return pa.array(texts, pa.string())


def _charset(content_type: str) -> str:
    for param in content_type.split(";")[1:]:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            name = value.strip().strip('"')
            try:
                return codecs.lookup(name).name
            except LookupError:
                return "utf-8"
    return "utf-8"


@dataclass
class RangePartition(InputPartition):
    queue: str
    start: int  # inclusive
    end: int  # exclusive


class EntrepotDataSource(DataSource):
    """``spark.readStream.format("entrepot")`` (and ``spark.read`` for a one-off batch).

    The options are checked here, when ``load()`` creates the source. A schema given with
    ``.schema()`` reaches the source only when a reader is made (Spark does not pass it at
    load): it must be a projection of the source's columns, checked then."""

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        self.parsed = SourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return "entrepot"

    def schema(self) -> StructType:
        return source_schema(self.parsed.body_format)

    def streamReader(self, schema: StructType) -> EntrepotStreamReader:
        # endingOffsets and a schema that is not a projection are refused by the reader's
        # first call, not here: PySpark's stream runner would mask an error raised here.
        return EntrepotStreamReader(self.parsed, schema)

    def reader(self, schema: StructType) -> EntrepotBatchReader:
        latest = [q for q, where in self.parsed.starting.items() if where == "latest"]
        if latest:
            raise SourceOptionError(
                f"option startingOffsets: {', '.join(latest)} would start at latest (-1 in a "
                "JSON map), which a batch read refuses: it reads what is there; use "
                "earliest (-2) or a sequence")
        return EntrepotBatchReader(self.parsed, schema)


def _partitions(options: SourceOptions, start: Mapping[str, int], end: Mapping[str, int]
                ) -> list[RangePartition]:
    spans = [(q, int(start.get(q, 1)), int(end.get(q, 1))) for q in options.queues]
    return [RangePartition(*part) for part in split_ranges(
        spans, options.per_partition, options.min_partitions)]


def _read(options: SourceOptions, shape: _Shape, partition: RangePartition) -> Iterator[Any]:
    """The partition's records as Arrow batches, a range read each of at most
    ``_PIECE_RECORDS`` records and, past its first record, ``_PIECE_BYTES`` of payload
    (``max_bytes``: the gateway says where it stopped): Spark writes a batch while the next
    one is read and built, and a worker holds one bounded piece however large the messages.
    Anything short of the whole range raises."""
    from gateway.spark.arrow import spans_batch

    client = GatewayClient(options.client)
    queue = partition.queue
    for first in range(partition.start, partition.end, _PIECE_RECORDS):
        end = min(first + _PIECE_RECORDS, partition.end)
        while first < end:
            data, covered = client.range(queue, first, end, max_bytes=_PIECE_BYTES)
            if not first < covered <= end:
                raise RuntimeError(f"{queue}: asked [{first}, {end}) but the gateway covers "
                                   f"only up to {covered}")
            spans = decode_spans(data)
            seqs = spans.seqs
            if seqs and not first <= seqs[0] <= seqs[-1] < covered:
                raise RuntimeError(f"{queue}: records outside [{first}, {covered})")
            yield shape(spans_batch(queue, spans))
            first = covered


# A new checkpoint's batches are numbered from 0 again: a file sink skips those its output
# has already (gateway.spark.ingest.refuse_foreign_output).
_NEW_OUTPUT = "and a new output (a file sink skips batch numbers its output holds)"


class EntrepotStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    # Instances live in the driver's long-lived source runner (offsets, commit) and in
    # every executor task (read): __init__ stays cheap and does no I/O.
    def __init__(self, options: SourceOptions, schema: Any = None) -> None:
        self.options = options
        # A schema that is not a projection is refused by the first call, not here: PySpark's
        # stream runner would mask an error raised here with one of its own.
        self._refusal: SourceOptionError | None = None
        try:
            self.shape = _Shape(options, schema)
        except SourceOptionError as exc:
            self.shape, self._refusal = _Shape(options, None), exc
        self._client = GatewayClient(options.client)
        self._target: dict[str, int] | None = None
        self._registered = False
        self._committed: dict[str, int] = {}  # what this runner last committed, per queue

    def _heads(self) -> dict[str, dict[str, Any]]:
        return {q: self._client.head(q) for q in self.options.queues}

    def _register(self, start: Mapping[str, int], resumed: Collection[str]) -> None:
        """Make sure this query's consumer holds retention from ``start`` on (idempotent:
        a known consumer keeps its position). A start below the floor fails loudly, and so
        does a queue of ``resumed`` (read by the checkpoint) without the consumer, which was
        registered before the first offsets: the queue was deleted and created again (its
        sequences start over) or the consumer unregistered."""
        if self._registered:
            return
        consumer = self.options.consumer
        for queue in self.options.queues:
            if queue in resumed and self._client.consumer(queue, consumer) is None:
                raise RuntimeError(
                    f"{queue}: consumer {consumer!r} is not registered at the gateway, though "
                    f"this query's checkpoint has read the queue up to {start[queue]}. If it "
                    "was unregistered, register it again where the query goes on (PUT "
                    f"/v1/queues/{queue}/consumers/{consumer} "
                    f'{{"start": {start[queue]}}}); if the queue was deleted and created '
                    f"again, run the query with a new checkpoint {_NEW_OUTPUT} (registering "
                    "at the checkpoint's offset would skip the new queue's first messages)")
            try:
                self._client.register(queue, self.options.consumer, int(start[queue]))
            except RangeGone as exc:
                raise RuntimeError(f"{queue}: the checkpoint's offset {start[queue]} was "
                                   f"trimmed at the gateway ({exc})") from exc
        self._registered = True

    def _refuse(self) -> None:
        """What the source's creation could not refuse itself (see ``__init__``)."""
        if self._refusal is not None:
            raise self._refusal
        if self.options.ending is not None:
            raise SourceOptionError("option endingOffsets is for batch reads (spark.read); a "
                                    "stream runs on")

    def initialOffset(self) -> dict[str, list[int]]:
        self._refuse()
        offsets = {}
        heads = self._heads()
        for queue, head in heads.items():
            spec = self.options.starting[queue]
            if isinstance(spec, int):
                first, end = int(head["first"]), int(head["next"])
                if not first <= spec <= end:
                    raise SourceOptionError(
                        f"option startingOffsets: {queue}={spec} is outside what the gateway "
                        f"can read, [{first}, {end}]")
                self._client.register(queue, self.options.consumer, spec)
                offsets[queue] = spec
                continue
            position = self._client.register(queue, self.options.consumer, spec)
            # A new checkpoint reads from the first readable message even when the consumer
            # is registered further on (by hand, or for a queue created again): starting at
            # its position would leave what lies below to retention, unread.
            offsets[queue] = (min(position, int(head["first"])) if spec == "earliest"
                              else int(head["next"]))
        self._registered = True
        return stamped(offsets, heads)

    def getDefaultReadLimit(self) -> Any:
        if self.options.max_rows:
            return ReadMaxRows(self.options.max_rows)
        if self.options.max_bytes:
            return ReadMaxBytes(self.options.max_bytes)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = {q: int(h["next"]) for q, h in self._heads().items()}

    def reportLatestOffset(self) -> dict[str, int]:
        return {q: int(h["next"]) for q, h in self._heads().items()}

    def latestOffset(self, start: Mapping[str, Any], limit: ReadLimit) -> dict[str, list[int]]:
        self._refuse()
        heads = self._heads()
        wrong = wrong_incarnations(start, heads)
        if wrong:  # before anything moves: a commit there would free what was never read
            raise RuntimeError(f"{', '.join(wrong)}: deleted and created again at the gateway "
                               "since this query's checkpoint read it (its sequences started "
                               f"over): run the query with a new checkpoint {_NEW_OUTPUT}")
        self._check_unstamped(start, heads)
        given = by_queue(start)
        positions = {q: given[q] if q in given else joining(heads[q], self.options.consumer)
                     for q in self.options.queues}
        self._register(positions, given.keys())
        # Spark asks for the next batch only once the batch ending at ``start`` is in its
        # commit log: the consumer may move there (the last batch of a run included).
        self._commit(positions)
        lows, highs = [], []
        for queue in self.options.queues:
            low = positions[queue]
            head = int(heads[queue]["next"])
            if head < low:  # a reset or restored gateway: fail, never wait silently
                raise RuntimeError(f"{queue}: the gateway's head {head} is behind the "
                                   f"checkpoint's offset {low}")
            high = min(head, self._target[queue]) if self._target else head
            lows.append(low)
            highs.append(max(high, low))
        budget = self._budget(limit, heads)
        if budget is None:
            return stamped(dict(zip(self.options.queues, highs)), heads)
        shares = fair_shares(budget, [h - lo for lo, h in zip(lows, highs)])
        return stamped({q: lo + n for q, lo, n in zip(self.options.queues, lows, shares)},
                       heads)

    def _check_unstamped(self, start: Mapping[str, Any],
                         heads: Mapping[str, Mapping[str, Any]]) -> None:
        """An offset written without its queue's creation is taken only where the consumer
        agrees with it: otherwise the queue may be another, created again since."""
        consumer = self.options.consumer
        for queue, offset in unstamped(start).items():
            position = heads.get(queue, {}).get("consumers", {}).get(consumer)
            if position is not None and position != offset:
                raise RuntimeError(
                    f"{queue}: this query's checkpoint, written before offsets named the "
                    f"queue's creation, is at {offset} and consumer {consumer!r} at "
                    f"{position}: if the queue was not created again since, register the "
                    f"consumer at {offset} (PUT /v1/queues/{queue}/consumers/{consumer} "
                    f'{{"start": {offset}}} after DELETE); else run the query with a new '
                    f"checkpoint {_NEW_OUTPUT}")

    def _budget(self, limit: ReadLimit, heads: Mapping[str, Mapping[str, Any]]) -> int | None:
        if isinstance(limit, ReadMaxRows):
            return int(limit.max_rows)
        if isinstance(limit, ReadMaxBytes):
            sizes = [h.get("average_bytes", 0) for h in heads.values()]
            average = max(1, int(max(sizes, default=1)))
            return max(1, int(limit.max_bytes) // average)
        return None

    def partitions(self, start: Mapping[str, Any], end: Mapping[str, Any]
                   ) -> list[RangePartition]:
        begin, until = by_queue(start), by_queue(end)
        for queue in until.keys() - begin.keys():  # joined the query: where latestOffset began
            begin[queue] = joining(self._client.head(queue), self.options.consumer)
        return _partitions(self.options, begin, until)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, RangePartition):
            return iter(())  # no ranges (empty queues): Spark reads one default partition
        return _read(self.options, self.shape, partition)

    def commit(self, end: Mapping[str, Any]) -> None:
        # Only the queues this run reads: a batch planned before a queue left the query's
        # list ends past what of it was written, and its messages would go unread.
        self._commit({q: p for q, p in by_queue(end).items() if q in self.options.queues})

    def _commit(self, positions: Mapping[str, int]) -> None:
        """Move the consumer (a retention hint: the checkpoint is the truth). A failure is
        logged and retried by the next call; the gateway ignores a position it has passed."""
        for queue, position in positions.items():
            if self._committed.get(queue, 0) >= position:
                continue
            try:
                self._client.commit(queue, self.options.consumer, position)
            except Exception as exc:  # noqa: BLE001 - must not fail the query
                log.warning("commit of %s at %s failed: %s", queue, position, exc)
                continue
            self._committed[queue] = position

    def stop(self) -> None:
        return None


class EntrepotBatchReader(DataSourceReader):
    """``[startingOffsets, endingOffsets)`` of each queue (``[first, next)`` by default) read
    once; registers no consumer."""

    def __init__(self, options: SourceOptions, schema: Any = None) -> None:
        self.options = options
        self.shape = _Shape(options, schema)

    def partitions(self) -> list[RangePartition]:
        client = GatewayClient(self.options.client)
        start, end = {}, {}
        for queue in self.options.queues:
            head = client.head(queue)
            first, head_next = int(head["first"]), int(head["next"])
            low = self.options.starting[queue]
            high = (self.options.ending or {}).get(queue, "latest")
            start[queue] = first if low == "earliest" else int(low)
            end[queue] = head_next if high == "latest" else int(high)
            if start[queue] < first:
                raise RangeGone(f"option startingOffsets: {queue}={start[queue]} is gone; "
                                f"the oldest readable is {first}", 410)
            if start[queue] > head_next:
                raise SourceOptionError(
                    f"option startingOffsets: {queue}={start[queue]} is outside what the "
                    f"gateway can read, [{first}, {head_next}]")
            if end[queue] > head_next:
                raise SourceOptionError(f"option endingOffsets: {queue}={end[queue]} is "
                                        f"beyond the queue's head {head_next}")
            if end[queue] < start[queue]:
                raise SourceOptionError(f"{queue}: endingOffsets {end[queue]} is below "
                                        f"startingOffsets {start[queue]}")
        return _partitions(self.options, start, end)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, RangePartition):
            return iter(())  # no ranges (empty queues): Spark reads one default partition
        return _read(self.options, self.shape, partition)
