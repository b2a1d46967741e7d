"""The duplicate window's limits, on a real store."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.dedup import DedupWindow
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


async def test_lazily_remembered_keys_share_records_and_survive_a_reopen(tmp_path: Path
                                                                         ) -> None:
    store = await open_store(tmp_path)
    info = await store.create_queue("private$/entrepot_dedup$", {})
    window = DedupWindow(store, info.queue_id, entries_max=4, window_s=3600)
    for index in range(3):
        window.remember(f"a{index}", "d", {"n": index})
    assert await window.seen("a1", "d") == {"n": 1}  # known at once, before any flush
    await window.flush()
    for index in range(3):
        window.remember(f"b{index}", "d", {"n": index})
    await window.flush()
    assert store.count(info.queue_id) == 2  # one record per flush
    assert await window.trim() == 2  # a0, a1 gone; their record is shared with a2: kept
    assert store.count(info.queue_id) == 2
    again = DedupWindow(store, info.queue_id, entries_max=4, window_s=3600)
    assert await again.seen("a2", "d") == {"n": 2} and await again.seen("b0", "d") == {"n": 0}
    assert await window.trim() == 0
    window.entries_max = 3
    assert await window.trim() == 1  # a2 goes, and with it the first record
    assert store.count(info.queue_id) == 1
    await close_store(store)
