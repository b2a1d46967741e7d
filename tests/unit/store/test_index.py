from __future__ import annotations

import gc
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from store.framing import RecordFlags, record_size
from store.index import QueueIndex, pack, packed_flags, packed_size, unpack
from store.records import StoredRecord
from store.startup import collector_paused

records = st.builds(
    lambda queue_id, seq, segment, offset, payload_len, lsn, priority, expires_ms, flags, tx_id:
    StoredRecord(queue_id, seq, segment, offset, record_size(payload_len), payload_len, lsn,
                 priority, expires_ms, flags, tx_id),
    queue_id=st.integers(1, 2**32 - 1), seq=st.integers(1, 2**64 - 1),
    segment=st.integers(0, 2**32 - 1), offset=st.integers(0, 2**48 - 1),
    payload_len=st.integers(0, 2**30), lsn=st.integers(0, 2**64 - 1),
    priority=st.integers(0, 7), expires_ms=st.integers(0, 2**64 - 1),
    flags=st.sampled_from(list(RecordFlags)), tx_id=st.integers(0, 2**64 - 1))


@given(records)
def test_pack_round_trip(record: StoredRecord) -> None:
    packed = pack(record)
    assert unpack(record.queue_id, record.seq, packed) == record
    assert packed_size(packed) == record.size
    assert packed_flags(packed) == record.flags
    assert isinstance(unpack(record.queue_id, record.seq, packed).flags, RecordFlags)


def test_a_typical_entry_is_a_small_untracked_int() -> None:
    """Why the index packs: what a queued message costs (see bench memory)."""
    record = StoredRecord(3, 1_000_000, 250, 4_000_000, 1088, 1024, 2**30, 0, 0,
                          RecordFlags.NONE, 0)
    packed = pack(record)
    assert type(packed) is int and not gc.is_tracked(packed)
    assert sys.getsizeof(packed) <= 48


def _rec(queue_id: int, seq: int) -> StoredRecord:
    return StoredRecord(queue_id, seq, 1, 64 * seq, 128, 10, seq, 0, 0, RecordFlags.NONE, 0)


def test_index_orders_counts_and_pops() -> None:
    index = QueueIndex()
    index.add_many([_rec(1, s) for s in (5, 2, 9, 7)] + [_rec(2, 1)])
    assert [r.seq for r in index.ordered(1)] == [2, 5, 7, 9]
    assert sorted(r.seq for r in index.unordered(1)) == [2, 5, 7, 9]
    assert [r.seq for r in index.first(1, after_seq=2, limit=2)] == [5, 7]
    assert index.get(1, 7) == _rec(1, 7)
    assert index.get(1, 8) is None and index.get(3, 1) is None
    assert index.count(1) == 4 and index.queue_ids() == [1, 2]
    popped = index.pop_packed(2, 1)
    assert popped is not None and packed_size(popped) == 128
    assert index.pop_packed(2, 1) is None
    assert index.queue_ids() == [1]


@pytest.mark.parametrize("enabled", [True, False])
def test_recovery_pauses_the_collector_and_restores_it(enabled: bool) -> None:
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        with pytest.raises(RuntimeError):
            with collector_paused():
                assert not gc.isenabled()
                raise RuntimeError("recovery failed")
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


@given(st.lists(records, max_size=40, unique_by=lambda r: r.seq))
def test_timings_read_from_the_packed_entries_match_the_records(found: list[StoredRecord]
                                                                 ) -> None:
    index = QueueIndex()
    index.add_many([r._replace(queue_id=1) for r in found])
    if found:
        index.pop_packed(1, found[0].seq)
    assert list(index.timings(1)) == [(r.seq, r.priority, r.expires_ms)
                                      for r in index.ordered(1)]
    assert list(index.timings(2)) == []
