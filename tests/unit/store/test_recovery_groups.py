"""Recovery's rule for grouped commits (store.recovery): whole groups live, cut ones gone."""

from __future__ import annotations

from store.framing import RecordHeader, RecordState
from store.logcodec import EntryKind, LogEntry
from store.recovery import resolve

GROUPED, LIVE, DEAD = RecordState.GROUPED, RecordState.LIVE, RecordState.DEAD


def _member(lsn: int, tx_id: int, group: int, state: RecordState = GROUPED) -> RecordHeader:
    return RecordHeader(offset=lsn * 128, size=128, kind=1, state=state, payload_len=10,
                        lsn=lsn, queue_id=1, tx_id=tx_id, seq=lsn, expires_ms=0, priority=0,
                        flags=1, group=group, segment=1)


def _live_lsns(found: list[RecordHeader], entries: list[LogEntry] | None = None) -> list[int]:
    return sorted(item.lsn for item in resolve(iter(found), entries or [], {}).live)


def test_a_whole_group_is_live_and_its_state_bytes_are_fixed() -> None:
    found = [_member(5, 9, 3), _member(6, 9, 3), _member(7, 9, 3)]
    result = resolve(iter(found), [], {})
    assert sorted(item.lsn for item in result.live) == [5, 6, 7]
    assert sorted(ref.lsn for ref, state in result.state_fixes if state == LIVE) == [5, 6, 7]


def test_a_group_cut_by_a_crash_leaves_no_trace() -> None:
    found = [_member(5, 9, 3), _member(6, 9, 3)]  # the third record never reached the disk
    result = resolve(iter(found), [], {})
    assert result.live == [] and result.dead == 2
    assert sorted(ref.lsn for ref, state in result.state_fixes if state == DEAD) == [5, 6]


def test_members_removed_or_settled_before_the_crash_still_count() -> None:
    """A removed member is DEAD on disk, a settled one LIVE (a checkpoint that did not finish):
    the group is whole and only the removed member is gone."""
    found = [_member(5, 9, 3, DEAD), _member(6, 9, 3, LIVE), _member(7, 9, 3)]
    assert _live_lsns(found) == [6, 7]


def test_a_removal_logged_after_the_commit_applies() -> None:
    found = [_member(5, 9, 2), _member(6, 9, 2)]
    removal = LogEntry(EntryKind.REMOVE, 8, 0, (found[0].ref,), offset=0, size=0)
    assert _live_lsns(found, [removal]) == [6]


def test_groups_are_told_apart_by_their_transaction() -> None:
    whole = [_member(5, 9, 2), _member(6, 9, 2)]
    cut = [_member(7, 10, 3), _member(8, 10, 3)]
    plain = [_member(4, 0, 0, LIVE)]
    assert _live_lsns(plain + whole + cut) == [4, 5, 6]


def test_members_must_span_exactly_their_count_of_lsns() -> None:
    """Two records of the transaction but not of one commit (far apart) are no whole group."""
    assert _live_lsns([_member(5, 9, 2), _member(40, 9, 2)]) == []
    assert _live_lsns([_member(5, 9, 2), _member(6, 9, 3)]) == []


def test_a_settled_group_missing_members_is_an_ordinary_set_of_records() -> None:
    """Settled by a checkpoint, then a member removed and its space reused: the others are
    ordinary live records, never judged as a group again."""
    assert _live_lsns([_member(5, 9, 3, LIVE), _member(7, 9, 3, LIVE)]) == [5, 7]
