"""The ``entrepot`` PySpark data source: queues read by sequence range, exactly once through
Spark's checkpoint (docs/spark.md).

Offsets are ``{"<queue path>": <next sequence to read>}``. Before a micro-batch runs, Spark
writes its ``[start, end)`` to the checkpoint; executors read each partition's range (the
gateway answers the same records every time, or 410 when they were trimmed: never a short
answer); ``commit(end)`` (one batch late) moves this query's registered consumer, which is
what lets the gateway drop what every consumer has passed. The consumer is registered when a
query first plans, so retention never runs ahead of a query that has not committed yet.

Options (strings, case-insensitive): ``url`` (required), ``queues`` (comma-separated; or
``queue``), ``consumer`` (default ``spark``), ``token`` (API key, sent as Bearer), ``cafile``,
``startingOffsets`` (``earliest`` | ``latest``), ``maxMessagesPerBatch``, ``maxBytesPerBatch``
(estimated from the queue's average message size), ``maxMessagesPerPartition`` (default
20000), ``timeoutSeconds`` (30), ``attempts`` (5).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource, DataSourceReader, DataSourceStreamReader, InputPartition)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable, ReadLimit, ReadMaxBytes, ReadMaxRows, SupportsTriggerAvailableNow)

from gateway.range_wire import decode_records
from gateway.spark.arrow import SCHEMA_DDL, record_batch
from gateway.spark.client import ClientOptions, GatewayClient, RangeGone

__all__ = ["EntrepotDataSource", "RangePartition", "SourceOptions", "SourceOptionError"]

log = logging.getLogger("entrepot.spark")
_RANGE_WIDTH_MAX = 100_000  # what one range read may span (gateway.web.rest_range)


class SourceOptionError(ValueError):
    """A bad option of the ``entrepot`` source; the message names it and its value."""


@dataclass(frozen=True, slots=True)
class SourceOptions:
    client: ClientOptions
    queues: tuple[str, ...]
    consumer: str
    starting: str
    max_rows: int
    max_bytes: int
    per_partition: int

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        opts = {k.lower(): v for k, v in options.items()}
        url = opts.get("url", "")
        if not url.startswith(("http://", "https://")):
            raise SourceOptionError(f"option url={url!r}: expected the gateway's http(s) URL")
        queues = tuple(q.strip() for q in opts.get("queues", opts.get("queue", "")).split(",")
                       if q.strip())
        if not queues:
            raise SourceOptionError("option queues: name at least one queue")
        starting = opts.get("startingoffsets", "earliest").lower()
        if starting not in ("earliest", "latest"):
            raise SourceOptionError(f"option startingOffsets={starting!r}: expected earliest "
                                    "or latest")
        per_partition = _int(opts, "maxmessagesperpartition", 20_000, 1)
        if per_partition > _RANGE_WIDTH_MAX:
            raise SourceOptionError(f"option maxMessagesPerPartition={per_partition}: at "
                                    f"most {_RANGE_WIDTH_MAX}")
        client = ClientOptions(url=url, token=opts.get("token", ""),
                               timeout_s=float(_int(opts, "timeoutseconds", 30, 1)),
                               attempts=_int(opts, "attempts", 5, 1),
                               cafile=opts.get("cafile", ""))
        return cls(client, queues, opts.get("consumer", "spark"), starting,
                   _int(opts, "maxmessagesperbatch", 0, 0), _int(opts, "maxbytesperbatch", 0, 0),
                   per_partition)


def _int(opts: Mapping[str, str], key: str, default: int, low: int) -> int:
    raw = opts.get(key)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SourceOptionError(f"option {key}={raw!r}: expected an integer") from None
    if value < low:
        raise SourceOptionError(f"option {key}={value}: expected at least {low}")
    return value


@dataclass
class RangePartition(InputPartition):
    queue: str
    start: int  # inclusive
    end: int  # exclusive


class EntrepotDataSource(DataSource):
    """``spark.readStream.format("entrepot")`` (and ``spark.read`` for a one-off batch)."""

    @classmethod
    def name(cls) -> str:
        return "entrepot"

    def schema(self) -> str:
        return SCHEMA_DDL

    def streamReader(self, schema: Any) -> EntrepotStreamReader:
        return EntrepotStreamReader(SourceOptions.parse(self.options))

    def reader(self, schema: Any) -> EntrepotBatchReader:
        return EntrepotBatchReader(SourceOptions.parse(self.options))


def _partitions(options: SourceOptions, start: Mapping[str, int], end: Mapping[str, int]
                ) -> list[RangePartition]:
    parts = []
    for queue in options.queues:
        low, high = int(start.get(queue, 1)), int(end.get(queue, 1))
        for first in range(low, high, options.per_partition):
            parts.append(RangePartition(queue, first, min(first + options.per_partition, high)))
    return parts


def _read(options: SourceOptions, partition: RangePartition) -> Iterator[Any]:
    """The partition's records as Arrow batches; anything short of the whole range raises."""
    client = GatewayClient(options.client)
    data, covered = client.range(partition.queue, partition.start, partition.end)
    if covered != partition.end:
        raise RuntimeError(f"{partition.queue}: asked [{partition.start}, {partition.end}) "
                           f"but the gateway covers only up to {covered}")
    records = decode_records(data)
    if records and not partition.start <= records[0].seq <= records[-1].seq < partition.end:
        raise RuntimeError(f"{partition.queue}: records outside [{partition.start}, "
                           f"{partition.end})")
    yield record_batch(partition.queue, records)


class EntrepotStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    # Instances live in the driver's long-lived source runner (offsets, commit) and in
    # every executor task (read): __init__ stays cheap and does no I/O.
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._client = GatewayClient(options.client)
        self._target: dict[str, int] | None = None
        self._registered = False

    def _heads(self) -> dict[str, dict[str, Any]]:
        return {q: self._client.head(q) for q in self.options.queues}

    def _register(self, start: Mapping[str, int]) -> None:
        """Make sure this query's consumer holds retention from ``start`` on (idempotent:
        a known consumer keeps its position). A start below the floor fails loudly."""
        if self._registered:
            return
        for queue in self.options.queues:
            try:
                self._client.register(queue, self.options.consumer, int(start[queue]))
            except RangeGone as exc:
                raise RuntimeError(f"{queue}: the checkpoint's offset {start[queue]} was "
                                   f"trimmed at the gateway ({exc})") from exc
        self._registered = True

    def initialOffset(self) -> dict[str, int]:
        offsets = {}
        for queue, head in self._heads().items():
            position = self._client.register(queue, self.options.consumer,
                                             self.options.starting)
            offsets[queue] = position if self.options.starting == "earliest" else head["next"]
        self._registered = True
        return offsets

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

    def latestOffset(self, start: Mapping[str, int], limit: ReadLimit) -> dict[str, int]:
        start = {q: int(start.get(q, 1)) for q in self.options.queues}
        self._register(start)
        heads = self._heads()
        budget = self._budget(limit, heads)
        end = {}
        for queue in self.options.queues:
            low = start[queue]
            head = int(heads[queue]["next"])
            if head < low:  # a reset or restored gateway: fail, never wait silently
                raise RuntimeError(f"{queue}: the gateway's head {head} is behind the "
                                   f"checkpoint's offset {low}")
            high = min(head, self._target[queue]) if self._target else head
            high = max(high, low)
            if budget is not None:
                high = min(high, low + budget)
                budget -= high - low
            end[queue] = high
        return end

    def _budget(self, limit: ReadLimit, heads: Mapping[str, Mapping[str, Any]]) -> int | None:
        if isinstance(limit, ReadMaxRows):
            return int(limit.max_rows)
        if isinstance(limit, ReadMaxBytes):
            sizes = [h.get("average_bytes", 0) for h in heads.values()]
            average = max(1, int(max(sizes, default=1)))
            return max(1, int(limit.max_bytes) // average)
        return None

    def partitions(self, start: Mapping[str, int], end: Mapping[str, int]
                   ) -> list[RangePartition]:
        return _partitions(self.options, start, end)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RangePartition)
        return _read(self.options, partition)

    def commit(self, end: Mapping[str, int]) -> None:
        # A retention hint (the checkpoint is the truth): a failure is logged, and the next
        # commit covers it.
        for queue, position in end.items():
            try:
                self._client.commit(queue, self.options.consumer, int(position))
            except Exception as exc:  # noqa: BLE001 - must not fail the query
                log.warning("commit of %s at %s failed: %s", queue, position, exc)

    def stop(self) -> None:
        return None


class EntrepotBatchReader(DataSourceReader):
    """Everything readable now, ``[first, next)`` of each queue; registers no consumer."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[RangePartition]:
        client = GatewayClient(self.options.client)
        heads = {q: client.head(q) for q in self.options.queues}
        return _partitions(self.options, {q: int(h["first"]) for q, h in heads.items()},
                           {q: int(h["next"]) for q, h in heads.items()})

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RangePartition)
        return _read(self.options, partition)
