"""The duplicate window's limits, on a real store."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from gateway.dedup import DedupWindow
from store.records import SendSpec
from tests.store.conftest import close_store, open_store


async def test_window_forgets_beyond_its_count_and_age(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    info = await store.create_queue("private$/entrepot_dedup$", {})
    window = DedupWindow(store, info.queue_id, entries_max=3, window_s=3600)
    for index in range(5):
        key = f"k{index}"
        window.begin(key)
        [record] = await store.commit([window.spec(key, "d", {"n": index})])
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
