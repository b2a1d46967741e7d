"""SeqOrder against a plain sorted set: the lowest numbers and ordered walks of a queue."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from store.seqorder import SeqOrder

# (operation, number): add a number, extend by a run, remove a live one, or ask for the
# first few above a number.
operations = st.lists(st.tuples(st.sampled_from(["add", "extend", "remove", "first"]),
                                st.integers(1, 400)), max_size=300)


@given(operations)
@settings(max_examples=300, deadline=None)
def test_it_agrees_with_a_sorted_set(ops: list[tuple[str, int]]) -> None:
    order, live = SeqOrder(), set[int]()
    for op, number in ops:
        if op == "add":
            order.add(number)
            live.add(number)
        elif op == "extend":
            run = [n for n in range(number, number + 7) if n not in live]
            if run:
                order.extend(run)
                live.update(run)
        elif op == "remove" and live:
            gone = min(live, key=lambda n: (n - number) % 401)  # often the lowest
            live.discard(gone)
            order.removed(gone, live, len(live))
        elif op == "first":
            assert order.first(live, number, 5) == sorted(n for n in live if n > number)[:5]
        assert list(order.live(live)) == sorted(live)


def test_a_drained_queue_keeps_its_list_short() -> None:
    order, live = SeqOrder(), set(range(1, 100_001))
    order.extend(list(range(1, 100_001)))
    for number in range(1, 100_001):
        live.discard(number)
        order.removed(number, live, len(live))
        if number == 50_000:
            assert order.first(live, 0, 2) == [50_001, 50_002]
    assert len(order) <= 1024, "the dead front is cut off as the queue drains"


def test_removals_in_the_middle_are_compacted_away() -> None:
    order, live = SeqOrder(), set(range(1, 10_001))
    order.extend(list(range(1, 10_001)))
    for number in range(2, 10_001, 2):
        live.discard(number)
        order.removed(number, live, len(live))
    for number in range(3, 10_001, 4):
        live.discard(number)
        order.removed(number, live, len(live))
    assert len(order) <= 2 * len(live) + 1024
    assert list(order.live(live)) == sorted(live)


def test_a_large_unordered_extend_is_sorted_once_and_a_late_number_inserted() -> None:
    numbers = list(range(1, 20_001))
    random.Random(7).shuffle(numbers)
    order = SeqOrder()
    order.extend(numbers[:10])
    order.extend(numbers[10:])  # recovery: a queue's records in the order segments hold them
    live = set(numbers)
    assert order.first(live, 0, 3) == [1, 2, 3] and order.first(live, 19_998, 5) == [19_999,
                                                                                    20_000]
    live.discard(5)
    order.removed(5, live, len(live))
    order.add(5)  # a number becoming visible again (listed while dead: not twice)
    live.add(5)
    assert order.first(live, 3, 3) == [4, 5, 6]
    assert len(order) == 20_000
