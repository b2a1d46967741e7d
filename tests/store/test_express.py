"""Express messages: RAM up to a budget, r segments beyond it, gone after a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from store.errors import QueueQuotaExceeded
from store.framing import RecordFlags, record_size
from store.options import StoreOptions
from store.records import SendSpec
from tests.store.conftest import SMALL, close_store, open_store

TINY_RAM = StoreOptions(segment_size=256 << 10, qmlog_size=1 << 20, group_commit_bytes_max=64 << 10,
                        checkpoint_interval_s=3600, express_memory=3000)


async def test_express_messages_live_in_ram_and_do_not_survive_restart(tmp_path: Path) -> None:
    store = await open_store(tmp_path, SMALL)
    durable = await store.append(SendSpec(1, b"recoverable"))
    express = await store.append(SendSpec(1, b"fast", express=True))
    assert express.segment == 0 and express.flags & RecordFlags.EXPRESS
    assert express.seq == durable.seq + 1
    assert store.read(express) == b"fast"
    assert [r.seq for r in store.records(1)] == [1, 2]
    assert not list((tmp_path / "storage").glob("r*.mq")), "nothing was written to disk"
    await close_store(store)
    store = await open_store(tmp_path, SMALL)
    assert [store.read(r) for r in store.records(1)] == [b"recoverable"]
    after = await store.append(SendSpec(1, b"next"))
    assert after.seq == 3, "an express message's number is not handed out again"
    await close_store(store)


async def test_express_beyond_the_ram_budget_spills_to_r_segments(tmp_path: Path) -> None:
    store = await open_store(tmp_path, TINY_RAM)
    records = [await store.append(SendSpec(1, bytes([i]) * 1000, express=True))
               for i in range(6)]
    in_ram = [r for r in records if r.segment == 0]
    spilled = [r for r in records if r.segment != 0]
    assert len(in_ram) == 3 and len(spilled) == 3
    assert len(list((tmp_path / "storage").glob("r*.mq"))) == 1
    assert [store.read(r) for r in store.records(1)] == [bytes([i]) * 1000 for i in range(6)]
    await store.remove([in_ram[0], spilled[0]])
    assert store.count(1) == 4
    await close_store(store)
    assert not list((tmp_path / "storage").glob("r*.mq")), "r files go with the process"
    store = await open_store(tmp_path, TINY_RAM)
    assert store.count(1) == 0
    await close_store(store)


async def test_express_messages_count_towards_quotas(tmp_path: Path) -> None:
    store = await open_store(tmp_path, SMALL)
    info = await store.create_queue("q", {"quota": str(2 * record_size(100))})
    await store.append(SendSpec(info.queue_id, bytes(100), express=True))
    await store.append(SendSpec(info.queue_id, bytes(100), express=True))
    with pytest.raises(QueueQuotaExceeded):
        await store.append(SendSpec(info.queue_id, bytes(100), express=True))
    await store.remove(list(store.records(info.queue_id))[:1])
    await store.append(SendSpec(info.queue_id, bytes(100), express=True))
    await close_store(store)


async def test_transactional_messages_are_always_recoverable(tmp_path: Path) -> None:
    store = await open_store(tmp_path, SMALL)
    records = await store.commit([SendSpec(1, b"a", express=True), SendSpec(1, b"b")])
    assert all(r.segment != 0 and not r.flags & RecordFlags.EXPRESS for r in records)
    await close_store(store)
    store = await open_store(tmp_path, SMALL)
    assert store.count(1) == 2
    await close_store(store)
