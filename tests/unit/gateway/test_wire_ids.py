"""The per-QM counter of SRMP message ids (gateway.queues.wire_ids), on a real store: 32-bit
ordinals, never reused across restarts and crashes, and the wrap after 4294967295."""

from __future__ import annotations

import json
from pathlib import Path

from gateway.queues.wire_ids import FIRST_COUNT, ORDINAL_MAX, WireIds
from store.records import SendSpec
from tests.store.conftest import abandon_store, close_store, open_store

QUEUE = "private$/entrepot_ids$"


async def test_ids_are_32_bit_and_never_reused_after_a_restart_or_a_crash(tmp_path: Path
                                                                          ) -> None:
    store = await open_store(tmp_path)
    info = await store.create_queue(QUEUE, {})
    ids = WireIds(store, info.queue_id, block=4)
    seen = [await ids.next() for _ in range(10)]
    # Far above the small numbers an earlier version's ids ended in (see FIRST_COUNT).
    assert seen == list(range(FIRST_COUNT + 1, FIRST_COUNT + 11))
    # One reservation on disk at a time, written every ``block`` ids, not every id.
    assert store.count(info.queue_id) == 1
    await close_store(store)

    store = await open_store(tmp_path)
    again = WireIds(store, info.queue_id, block=4)
    after_restart = [await again.next() for _ in range(3)]
    assert min(after_restart) > max(seen)  # resumes above the last reserved block
    await abandon_store(store)  # a crash: nothing closed

    store = await open_store(tmp_path)
    third = WireIds(store, info.queue_id, block=4)
    after_crash = [await third.next() for _ in range(5)]
    everything = seen + after_restart + after_crash
    assert len(set(everything)) == len(everything)
    assert all(1 <= n <= ORDINAL_MAX for n in everything)
    assert store.count(info.queue_id) == 1
    await close_store(store)


async def test_after_4294967295_comes_1(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    info = await store.create_queue(QUEUE, {})
    # A queue manager that has handed out all but two of the 32-bit ordinals.
    await store.append(SendSpec(info.queue_id,
                                json.dumps({"reserved": ORDINAL_MAX - 2}).encode()))
    ids = WireIds(store, info.queue_id, block=4)
    assert [await ids.next() for _ in range(5)] == [ORDINAL_MAX - 1, ORDINAL_MAX, 1, 2, 3]
    assert ids.count == ORDINAL_MAX + 3
    await close_store(store)
    store = await open_store(tmp_path)
    again = WireIds(store, info.queue_id, block=4)
    assert await again.next() == 7  # above the block reserved before the restart, wrapped
    await close_store(store)


async def test_an_unreadable_reservation_does_not_stop_the_start(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    info = await store.create_queue(QUEUE, {})
    reserved = FIRST_COUNT + 40
    await store.append(SendSpec(info.queue_id, json.dumps({"reserved": reserved}).encode()))
    await store.append(SendSpec(info.queue_id, b"{not json"))
    ids = WireIds(store, info.queue_id, block=4)
    assert await ids.next() == reserved + 1
    await close_store(store)
