"""Grouped commits on a real store: a transaction that only sends is durable without a QMLog
entry, settled by the next checkpoint, whole or absent after a crash (store.grouped)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from store import placing as placing_module
from store.errors import StoreFailed
from store.framing import RecordState
from store.message_store import MessageStore
from store.records import SendSpec, StoredRecord
from tests.fault.faulty_ops import FaultyFileOps
from tests.store.conftest import SMALL, abandon_store, close_store, open_store


def _state_on_disk(root: Path, record: StoredRecord) -> int:
    data = (root / "storage" / f"p{record.segment:07d}.mq").read_bytes()
    return data[record.offset + 3]


def _log_pos(store: MessageStore) -> int:
    return store._engine.qmlog.write_pos


async def _checkpoint(store: MessageStore) -> None:
    await asyncio.get_running_loop().run_in_executor(None, store._engine.checkpoint)


async def test_a_send_only_transaction_writes_no_log_entry(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    before = _log_pos(store)
    records = await store.commit([SendSpec(1, b"a"), SendSpec(2, b"b"), SendSpec(1, b"c")])
    assert _log_pos(store) == before
    assert {r.tx_id for r in records} == {records[0].tx_id} and records[0].tx_id > 0
    assert [_state_on_disk(tmp_path, r) for r in records] == [RecordState.GROUPED] * 3
    received = await store.commit([SendSpec(2, b"d")], removes=records[:1])
    assert _log_pos(store) > before, "a transaction that receives still goes through the log"
    await _checkpoint(store)
    assert [_state_on_disk(tmp_path, r) for r in records] == [
        RecordState.DEAD, RecordState.LIVE, RecordState.LIVE]
    assert _state_on_disk(tmp_path, received[0]) == RecordState.LIVE
    await close_store(store)


async def test_a_crash_before_the_checkpoint_keeps_whole_groups(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    first = await store.commit([SendSpec(1, b"a"), SendSpec(1, b"b")])
    await store.remove(first[:1])
    second = await store.commit([SendSpec(1, b"c"), SendSpec(2, b"d")])
    await abandon_store(store)
    store = await open_store(tmp_path)
    assert [store.read(r) for r in store.records(1)] == [b"b", b"c"]
    assert [store.read(r) for r in store.records(2)] == [b"d"]
    assert [_state_on_disk(tmp_path, r) for r in second] == [RecordState.LIVE] * 2
    await close_store(store)


async def test_a_group_cut_by_a_crash_is_gone_whole(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    store = await open_store(tmp_path, SMALL, ops)
    await store.append(SendSpec(1, b"before"))
    ops.torn_write_bytes = 2500  # two of three records, and part of the third
    with pytest.raises(StoreFailed):
        await store.commit([SendSpec(2, b"\x07" * 1000) for _ in range(3)])
    await abandon_store(store)
    store = await open_store(tmp_path)
    assert store.count(2) == 0
    assert store.recovery.dead_records == 2
    assert [store.read(r) for r in store.records(1)] == [b"before"]
    await close_store(store)


async def test_groups_fall_back_to_the_log_when_too_many_wait_for_a_checkpoint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Checkpoints held (a backup) must not let the list of records to settle grow without
    bound: past the limit a send-only transaction goes through the QMLog."""
    monkeypatch.setattr(placing_module, "GROUPED_PENDING_MAX", 4)
    store = await open_store(tmp_path)
    before = _log_pos(store)
    grouped = await store.commit([SendSpec(1, b"%d" % i) for i in range(4)])
    assert _log_pos(store) == before
    logged = await store.commit([SendSpec(1, b"x"), SendSpec(1, b"y")])
    assert _log_pos(store) > before
    assert [_state_on_disk(tmp_path, r) for r in logged] == [RecordState.LIVE] * 2
    await _checkpoint(store)
    assert [_state_on_disk(tmp_path, r) for r in grouped] == [RecordState.LIVE] * 4
    settled = _log_pos(store)
    await store.commit([SendSpec(1, b"z"), SendSpec(1, b"w")])
    assert _log_pos(store) == settled, "settled by the checkpoint: grouped again"
    await close_store(store)


async def test_transaction_ids_are_never_shared(tmp_path: Path) -> None:
    """Ids reserved for explicit transactions and those of commits that bring none come from
    one counter (recovery tells grouped commits apart by id)."""
    store = await open_store(tmp_path)
    reserved = store.reserve_tx_id()
    plain = await store.commit([SendSpec(1, b"a"), SendSpec(1, b"b")])
    prepared = await store.prepare([SendSpec(1, b"c")])
    explicit = await store.commit([SendSpec(1, b"d"), SendSpec(1, b"e")], tx_id=reserved)
    ids = [plain[0].tx_id, prepared.tx_id, explicit[0].tx_id]
    assert len(set(ids)) == 3 and reserved in ids
    await store.abort_prepared(prepared.tx_id)
    await close_store(store)
