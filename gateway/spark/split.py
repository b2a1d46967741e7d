"""How a micro-batch's sequence ranges become Spark's partitions (its tasks).

Every task pays a fixed cost (its Arrow stream, its part-file, its start in the JVM), so a
batch is cut into as few partitions as the limits allow: ``minPartitions`` (the cores that
should share a batch: ``spark-ingest`` gives Spark's default parallelism) or, when a task
would then span more than ``maxMessagesPerPartition``, the smallest multiple of it that does
not, so that the cores finish together. A task reads one queue: the count is shared between
the queues by their part of the batch, rounded up (every queue in the batch gets one), and
each queue's range is cut into pieces that differ by one message at most; there is no empty
task. The cut depends only on the ranges and the two options, so a batch Spark replays from
its log is cut as it was the first time.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["split_ranges"]


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def split_ranges(spans: Sequence[tuple[str, int, int]], per_partition: int,
                 min_partitions: int = 1) -> list[tuple[str, int, int]]:
    """``(queue, first, end)`` partitions covering each ``(queue, low, high)`` span once, in
    order; none wider than ``per_partition``. Empty spans give none."""
    if per_partition < 1 or min_partitions < 1:
        raise ValueError("per_partition and min_partitions must be at least 1")
    wanted = [(queue, low, high) for queue, low, high in spans if high > low]
    total = sum(high - low for _, low, high in wanted)
    if not total:
        return []
    count = _ceil_div(total, per_partition)
    count = (min_partitions if count <= min_partitions
             else _ceil_div(count, min_partitions) * min_partitions)
    parts: list[tuple[str, int, int]] = []
    for queue, low, high in wanted:
        # Its share of the count, rounded up: no piece wider than total / count, which
        # is at most per_partition; never more pieces than messages.
        width = high - low
        pieces = min(width, _ceil_div(count * width, total))
        small, larger = divmod(width, pieces)  # the first `larger` pieces take one more
        first = low
        for index in range(pieces):
            end = first + small + (index < larger)
            parts.append((queue, first, end))
            first = end
    return parts
