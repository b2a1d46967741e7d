"""How a micro-batch's ranges become Spark partitions (gateway.spark.split): as few tasks as
the limits allow, of even sizes, every message once."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.spark.split import split_ranges


def test_a_batch_is_cut_for_the_cores_not_into_many_small_tasks() -> None:
    # 200,000 messages on 2 cores: one task each, not ten of 20,000.
    assert split_ranges([("q", 1, 200_001)], 100_000, 2) == [
        ("q", 1, 100_001), ("q", 100_001, 200_001)]
    # Above the minimum, a multiple of it: three 100,000-wide tasks would leave a core idle
    # for the third; four of 75,000 finish together.
    assert split_ranges([("q", 1, 300_001)], 100_000, 2) == [
        ("q", 1, 75_001), ("q", 75_001, 150_001), ("q", 150_001, 225_001),
        ("q", 225_001, 300_001)]
    # A small batch still reaches the minimum: 30 on 4 cores.
    assert split_ranges([("q", 1, 31)], 100_000, 4) == [
        ("q", 1, 9), ("q", 9, 17), ("q", 17, 24), ("q", 24, 31)]
    # Fewer messages than the minimum: one message a task.
    assert split_ranges([("q", 5, 7)], 100, 8) == [("q", 5, 6), ("q", 6, 7)]


def test_queues_share_the_partitions_by_their_backlog() -> None:
    assert split_ranges([("a", 1, 9001), ("b", 101, 1101), ("c", 7, 7)], 100_000, 2) == [
        ("a", 1, 4501), ("a", 4501, 9001), ("b", 101, 1101)]
    assert split_ranges([], 10, 2) == []
    assert split_ranges([("a", 3, 3)], 10, 2) == []


def test_limits_below_one_are_refused() -> None:
    with pytest.raises(ValueError):
        split_ranges([("q", 1, 10)], 0, 1)
    with pytest.raises(ValueError):
        split_ranges([("q", 1, 10)], 10, 0)


_spans = st.lists(st.tuples(st.sampled_from("abcde"), st.integers(1, 10**6),
                            st.integers(0, 300_000)), max_size=5, unique_by=lambda s: s[0])


@settings(max_examples=300, deadline=None)
@given(_spans, st.integers(1, 100_000), st.integers(1, 64))
def test_every_message_once_in_order_none_too_wide(
        spans: list[tuple[str, int, int]], per_partition: int, min_partitions: int) -> None:
    ranges = [(q, low, low + width) for q, low, width in spans]
    parts = split_ranges(ranges, per_partition, min_partitions)
    assert parts == split_ranges(ranges, per_partition, min_partitions), "a replay cuts alike"
    for queue, low, high in ranges:
        mine = [(first, end) for q, first, end in parts if q == queue]
        covered = [n for first, end in mine for n in range(first, end)] if high - low < 2000 \
            else None
        if covered is not None:
            assert covered == list(range(low, high))
        assert all(first < end for first, end in mine)
        assert all(a[1] == b[0] for a, b in zip(mine, mine[1:])), "contiguous, in order"
        if mine:
            assert mine[0][0] == low and mine[-1][1] == high
            widths = [end - first for first, end in mine]
            assert max(widths) - min(widths) <= 1, "even within a queue"
    assert all(end - first <= per_partition for _, first, end in parts)
    total = sum(high - low for _, low, high in ranges)
    assert len(parts) >= min(min_partitions, total)
    if total > min_partitions * per_partition:  # the width limit sets the count
        assert len(parts) < -(-total // per_partition) + min_partitions + len(ranges)
