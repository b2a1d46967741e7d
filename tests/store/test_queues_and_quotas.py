"""Queue registration files and quota enforcement on a real store."""

from __future__ import annotations

import zlib
from pathlib import Path

import pytest

from store.errors import (
    MachineQuotaExceeded,
    QueueJournalQuotaExceeded,
    QueueQuotaExceeded,
    StoreError,
)
from store.framing import record_size
from store.options import StoreOptions
from store.records import SendSpec
from tests.store.conftest import SMALL, close_store, open_store


async def test_lqs_file_name_and_content(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    info = await store.create_queue("private$/Orders", {"transactional": "1", "label": "o"})
    name = f"{info.queue_id:08x}.{zlib.crc32(b'private$/orders'):08x}"
    path = tmp_path / "storage" / "lqs" / name
    text = path.read_text()
    assert "[Properties]" in text
    assert "path = private$/Orders" in text
    assert "transactional = 1" in text
    assert store.registry.find("PRIVATE$/orders") == info
    with pytest.raises(StoreError, match="already exists"):
        await store.create_queue("private$/ORDERS", {})
    await close_store(store)
    store = await open_store(tmp_path)
    assert store.registry.find("private$/orders") == info
    await close_store(store)


async def test_update_and_delete_queue(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    info = await store.create_queue("q", {"label": "a"})
    updated = await store.update_queue(info.queue_id, {"label": "b"})
    assert updated.properties["label"] == "b"
    record = await store.append(SendSpec(info.queue_id, b"x"))
    with pytest.raises(StoreError, match="still holds 1 messages"):
        await store.delete_queue(info.queue_id)
    await store.remove([record])
    await store.delete_queue(info.queue_id)
    assert store.registry.find("q") is None
    assert list((tmp_path / "storage" / "lqs").iterdir()) == []
    again = await store.create_queue("q", {})
    assert again.queue_id > info.queue_id, "queue numbers are not reused"
    await close_store(store)


async def test_queue_quota_refuses_before_writing_and_frees_on_receive(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    size = record_size(1000)
    info = await store.create_queue("small", {"quota": str(3 * size)})
    records = [await store.append(SendSpec(info.queue_id, bytes(1000))) for _ in range(3)]
    with pytest.raises(QueueQuotaExceeded):
        await store.append(SendSpec(info.queue_id, bytes(1000)))
    assert store.count(info.queue_id) == 3
    assert store.queue_bytes(info.queue_id) == 3 * size
    await store.remove(records[:1])
    await store.append(SendSpec(info.queue_id, bytes(1000)))
    await close_store(store)
    store = await open_store(tmp_path)
    assert store.queue_bytes(info.queue_id) == 3 * size, "usage is rebuilt at start"
    with pytest.raises(QueueQuotaExceeded):
        await store.append(SendSpec(info.queue_id, bytes(1000)))
    await close_store(store)


async def test_a_refused_append_charges_nothing_and_frees_its_reserved_number(
        tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    info = await store.create_queue("tiny", {"quota": str(record_size(10))})
    seq = store.reserve_seq(info.queue_id)
    assert store.readable_end(info.queue_id) == seq, "a reserved number holds the head back"
    with pytest.raises(QueueQuotaExceeded):
        await store.append(SendSpec(info.queue_id, bytes(100), seq=seq))
    assert store.readable_end(info.queue_id) == seq + 1, "released, and never used"
    assert store.quotas.machine_used == 0
    record = await store.append(SendSpec(info.queue_id, bytes(10)))
    assert record.seq == seq + 1
    assert store.quotas.queue_used[info.queue_id] == record_size(10)
    await close_store(store)


async def test_machine_quota_comes_first_and_counts_everything(tmp_path: Path) -> None:
    options = StoreOptions(segment_size=256 << 10, machine_quota=256 << 10,
                           machine_journal_quota=256 << 10, qmlog_size=1 << 20,
                           group_commit_bytes_max=64 << 10,
                           checkpoint_interval_s=3600)
    store = await open_store(tmp_path, options)
    info = await store.create_queue("q", {"quota": str(10 << 20)})
    while True:
        try:
            await store.append(SendSpec(info.queue_id, bytes(20000)))
        except MachineQuotaExceeded:
            break
    assert store.quotas.machine_used <= options.machine_quota
    await close_store(store)


async def test_journal_class_queue_uses_j_segments_and_journal_quota(tmp_path: Path) -> None:
    store = await open_store(tmp_path, SMALL)
    journal = await store.create_queue("q;journal", {"journal_class": "1",
                                                     "quota": str(record_size(100))})
    record = await store.append(SendSpec(journal.queue_id, bytes(100)))
    assert record.segment in {int(p.name[1:8], 16)
                              for p in (tmp_path / "storage").glob("j*.mq")}
    with pytest.raises(QueueJournalQuotaExceeded):
        await store.append(SendSpec(journal.queue_id, bytes(100)))
    assert store.quotas.machine_journal_used == record_size(100)
    await close_store(store)


async def test_a_damaged_lqs_file_is_reported_not_fatal(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    await store.create_queue("good", {})
    await close_store(store)
    (tmp_path / "storage" / "lqs" / "00000099.deadbeef").write_text("not ini at all [")
    store = await open_store(tmp_path)
    assert store.registry.find("good") is not None
    assert any("unreadable" in p for p in store.registry.problems)
    await close_store(store)
