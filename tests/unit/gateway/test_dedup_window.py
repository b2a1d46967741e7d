"""The duplicate window's limits, on a real store."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from gateway.queues import sending
from gateway.queues.dedup import DedupWindow, KeyedEntry
from store.errors import QueueQuotaExceeded
from store.framing import RecordFlags
from store.message_store import MessageStore
from store.records import SendSpec, StoredRecord
from tests.store.conftest import abandon_store, close_store, open_store


async def test_window_forgets_beyond_its_count_and_age(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    info = await store.create_queue("private$/entrepot_dedup$", {})
    window = DedupWindow(store, info.queue_id, entries_max=3, window_s=3600)
    for index in range(5):
        key = f"k{index}"
        window.begin(key)
        [record] = await sending.commit(store, [window.spec(key, "d", {"n": index})],
                                        atomic=True)
        window.done(key, "d", {"n": index}, record)
    assert await window.seen("k4", "d") == {"n": 4}
    assert await window.trim() == 2
    assert await window.seen("k0", "d") is None
    assert store.count(info.queue_id) == 3
    window.window_s = 0.0
    await asyncio.sleep(0.01)  # entries must be older than the (now) horizon, not equal to it
    assert await window.trim() == 3
    assert store.count(info.queue_id) == 0
    await close_store(store)


async def test_memory_only_keys_and_shared_records_of_older_versions(tmp_path: Path
                                                                     ) -> None:
    store = await open_store(tmp_path)
    info = await store.create_queue("private$/entrepot_dedup$", {})
    # An older version wrote several entries in one record: still read, removed with the last.
    shared = {"entries": [{"key": f"a{i}", "digest": "d", "answer": {"n": i},
                           "at_ms": int(time.time() * 1000)} for i in range(3)]}
    await store.append(SendSpec(info.queue_id, json.dumps(shared).encode()))
    window = DedupWindow(store, info.queue_id, entries_max=10, window_s=3600)
    assert await window.seen("a2", "d") == {"n": 2}
    window.remember("x", "d", {"n": 9})  # express: memory only, known at once
    assert await window.seen("x", "d") == {"n": 9}
    assert store.count(info.queue_id) == 1
    window.entries_max = 2
    assert await window.trim() == 2  # a0, a1 gone; the record is shared with a2: kept
    assert store.count(info.queue_id) == 1
    window.entries_max = 1
    assert await window.trim() == 1  # a2 goes, and with it the record
    assert store.count(info.queue_id) == 0
    again = DedupWindow(store, info.queue_id, entries_max=10, window_s=3600)
    assert await again.seen("x", "d") is None, "a memory-only key does not survive a reopen"
    await close_store(store)


def _keyed_entry(store: MessageStore) -> KeyedEntry:
    """Messages of these tests are their own key (the queue manager decodes properties)."""
    def entry(record: StoredRecord) -> tuple[str, str, dict[str, object], int] | None:
        key = store.read(record).decode()
        return key, "d", {"id": key}, int(time.time() * 1000)
    return entry


async def _held(store: MessageStore, window: DedupWindow, queue_id: int, key: str
                ) -> StoredRecord:
    window.begin(key)
    record = await store.append(SendSpec(queue_id, key.encode(), flags=RecordFlags.KEYED))
    window.held(key, "d", {"id": key}, (record.queue_id, record.seq))
    return record


async def _reopened(tmp_path: Path, dedup_id: int) -> tuple[MessageStore, DedupWindow]:
    store = await open_store(tmp_path)
    window = DedupWindow(store, dedup_id, window_s=3600, keyed_entry=_keyed_entry(store))
    store.removal_hooks.append(window.before_removal)
    return store, window


async def test_a_held_key_is_known_at_once_and_found_in_its_message_after_a_crash(
        tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    dedup = await store.create_queue("private$/entrepot_dedup$", {})
    queue = await store.create_queue("q", {})
    window = DedupWindow(store, dedup.queue_id, window_s=3600, keyed_entry=_keyed_entry(store))
    await _held(store, window, queue.queue_id, "srmp:a")
    assert await window.seen("srmp:a", "d") == {"id": "srmp:a"}
    assert store.count(dedup.queue_id) == 0, "held by the message alone until a flush"
    await abandon_store(store)  # a crash before any flush
    store, window = await _reopened(tmp_path, dedup.queue_id)
    assert await window.seen("srmp:a", "d") == {"id": "srmp:a"}
    assert await window.flush() == 1
    [record] = store.records(dedup.queue_id)
    assert json.loads(store.read(record))["entries"][0]["msg"] == [queue.queue_id, 1]
    await close_store(store)
    store, window = await _reopened(tmp_path, dedup.queue_id)
    assert await window.flush() == 0, "a flushed entry is not taken from its message again"
    await close_store(store)


async def test_removing_a_message_flushes_the_key_it_holds_first(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    dedup = await store.create_queue("private$/entrepot_dedup$", {})
    queue = await store.create_queue("q", {})
    window = DedupWindow(store, dedup.queue_id, window_s=3600, keyed_entry=_keyed_entry(store))
    store.removal_hooks.append(window.before_removal)
    taken = await _held(store, window, queue.queue_id, "srmp:b")
    kept = await _held(store, window, queue.queue_id, "srmp:c")
    await store.remove([taken])  # a receive: the window's entries go to disk before it
    assert store.count(dedup.queue_id) == 1 and store.count(queue.queue_id) == 1
    await abandon_store(store)
    store, window = await _reopened(tmp_path, dedup.queue_id)
    for key in ("srmp:b", "srmp:c"):
        assert await window.seen(key, "d") == {"id": key}, key
    # The same through a transaction that receives the other message.
    [message] = store.records(queue.queue_id)
    assert message.seq == kept.seq
    await _held(store, window, queue.queue_id, "srmp:d")
    await store.commit([], removes=[message])
    await abandon_store(store)
    store, window = await _reopened(tmp_path, dedup.queue_id)
    assert store.count(queue.queue_id) == 1
    for key in ("srmp:b", "srmp:c", "srmp:d"):
        assert await window.seen(key, "d") == {"id": key}, key
    await close_store(store)


async def test_a_removal_whose_key_cannot_be_written_is_refused(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    dedup = await store.create_queue("private$/entrepot_dedup$", {"quota": "1"})
    queue = await store.create_queue("q", {})
    window = DedupWindow(store, dedup.queue_id, window_s=3600, keyed_entry=_keyed_entry(store))
    store.removal_hooks.append(window.before_removal)
    message = await _held(store, window, queue.queue_id, "srmp:e")
    with pytest.raises(QueueQuotaExceeded):
        await store.remove([message])
    assert store.count(queue.queue_id) == 1, "the message stays: its key is not on disk"
    await store.update_queue(dedup.queue_id, {"quota": "0"})
    await store.remove([message])  # the key still held is written now
    assert store.count(queue.queue_id) == 0 and store.count(dedup.queue_id) == 1
    await close_store(store)


async def test_the_flusher_writes_held_keys_in_one_record_and_trim_forgets_them(
        tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    dedup = await store.create_queue("private$/entrepot_dedup$", {})
    queue = await store.create_queue("q", {})
    window = DedupWindow(store, dedup.queue_id, window_s=3600, flush_interval_s=0.01,
                         keyed_entry=_keyed_entry(store))
    for index in range(5):  # all held before the flusher runs: one record holds them
        await _held(store, window, queue.queue_id, f"srmp:{index}")
    flusher = asyncio.create_task(window.run_flusher())
    try:
        for _ in range(3000):  # an upper bound only
            if store.count(dedup.queue_id):
                break
            await asyncio.sleep(0.01)
        [record] = store.records(dedup.queue_id)
        assert len(json.loads(store.read(record))["entries"]) == 5
        window.entries_max = 2
        assert await window.trim() == 3
        assert store.count(dedup.queue_id) == 1, "shared by the two keys left"
        window.entries_max = 0
        assert await window.trim() == 2
        assert store.count(dedup.queue_id) == 0
    finally:
        flusher.cancel()
    await close_store(store)


async def test_flushes_are_cut_into_records_a_segment_holds(tmp_path: Path) -> None:
    store = await open_store(tmp_path)  # 256 KiB segments
    dedup = await store.create_queue("private$/entrepot_dedup$", {})
    queue = await store.create_queue("q", {})
    window = DedupWindow(store, dedup.queue_id, window_s=3600, keyed_entry=_keyed_entry(store))
    store.removal_hooks.append(window.before_removal)
    for index in range(400):
        await _held(store, window, queue.queue_id, f"srmp:{index:04d}" + "x" * 200)
    assert await window.flush() == 400
    sizes = [len(json.loads(store.read(r))["entries"]) for r in store.records(dedup.queue_id)]
    assert sum(sizes) == 400 and len(sizes) > 1
    assert all(len(store.read(r)) <= 32 * 1024 for r in store.records(dedup.queue_id))
    # One absurd id cannot be written; it is known in memory and blocks no removal.
    absurd = await store.append(SendSpec(queue.queue_id, b"absurd", flags=RecordFlags.KEYED))
    window.held("srmp:" + "y" * (300 << 10), "d", {}, (absurd.queue_id, absurd.seq))
    message = await _held(store, window, queue.queue_id, "srmp:after")
    await store.remove([message])
    assert await window.seen("srmp:after", "d") == {"id": "srmp:after"}
    assert store.count(dedup.queue_id) == len(sizes) + 1
    await close_store(store)
