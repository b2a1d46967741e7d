"""HeldPositions: which stream positions are on disk only in their messages."""

from __future__ import annotations

from gateway.inbound.held import HeldPositions
from store.records import StoredRecord

A = ("uid:a\\1", "private$/orders")
B = ("uid:b\\1", "private$/orders")


def _record(seq: int, queue_id: int = 5) -> StoredRecord:
    return StoredRecord(queue_id, seq, 1, 64 * seq, 64, 8, 100 + seq, 0, 0, 16, 0)  # type: ignore[arg-type]


def test_the_mark_is_the_lowest_floor_of_commits_on_their_way() -> None:
    held = HeldPositions()
    assert held.mark(50) == 50, "nothing on its way: the store's floor now"
    first = held.begin(40)
    second = held.begin(45)
    assert held.mark(60) == 40
    held.end(first)
    assert held.mark(60) == 45
    held.end(second)
    held.end(second)  # harmless twice (a failed commit ends in a finally)
    assert held.mark(60) == 60


def test_a_removal_writes_only_positions_not_yet_on_disk() -> None:
    held = HeldPositions()
    for seq in (1, 2, 3):
        held.hold(_record(seq), A, seq)
    held.hold(_record(4), B, 1)
    assert len(held) == 4
    assert held.to_write([_record(1)]) == {A}
    assert held.to_write([_record(9)]) == set(), "not a held message"
    held.written(A, 3)  # the position record of A (at 3) is on disk
    held.released([_record(1)])
    assert held.to_write([_record(2), _record(3)]) == set()
    assert held.to_write([_record(2), _record(4)]) == {B}
    assert len(held) == 1
    held.written(A, 2)  # an older write never lowers what is on disk
    held.hold(_record(5), A, 3)
    assert held.to_write([_record(5)]) == set()


def test_a_checkpoint_covers_what_it_lists_and_forgets_the_rest() -> None:
    held = HeldPositions()
    for seq in (1, 2, 3):
        held.hold(_record(seq), A, seq)
    held.hold(_record(4), B, 1)
    held.written(B, 1)
    held.checkpointed({A: 2})  # taken before message 3 was in the table; B was pruned
    assert held.to_write([_record(1), _record(2)]) == set()
    assert held.to_write([_record(3)]) == {A}
    held.hold(_record(6), B, 2)
    assert held.to_write([_record(6)]) == {B}, "B forgotten: nothing is on disk for it"
    assert len(held) == 3, "3 of A, and 4 and 6 of B"
    assert held.entries == 5
    assert sum(1 for _ in held.forget_covered(2)) == 3, "five entries, two a step"
    assert held.entries == 3 and len(held) == 3, "1 and 2 of A dropped"
    assert held.to_write([_record(3), _record(4)]) == {A, B}


def test_a_position_written_while_a_checkpoint_is_saved_still_counts() -> None:
    held = HeldPositions()
    held.hold(_record(5), A, 5)
    held.hold(_record(6), B, 2)
    held.written(A, 5)  # after the checkpoint read A at 3, before it was on disk
    held.written(B, 1)
    held.checkpointed({A: 3, B: 2})
    assert held.to_write([_record(5), _record(6)]) == set()
    held.hold(_record(7), B, 3)
    assert held.to_write([_record(7)]) == {B}
    held.checkpointed({A: 4})  # A's record at 5 is newer than this checkpoint too
    assert held.to_write([_record(5)]) == set()
    assert held.to_write([_record(7)]) == {B}, "B forgotten by the checkpoint"
