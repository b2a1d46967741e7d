"""Duplicate detection of SRMP ids is per destination queue, as in MSMQ, and a window written
before that (keys of the id alone) is still in force after an upgrade."""

from __future__ import annotations

import json
import time
from pathlib import Path

from gateway.queues.dedup import DedupWindow
from store.records import SendSpec
from tests.store.conftest import close_store, open_store

ID = "{caf195ea-615c-4264-ae08-11a4e60194c0}\\20503"


async def test_one_id_for_two_queues_is_two_messages(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    info = await store.create_queue("private$/entrepot_dedup$", {})
    window = DedupWindow(store, info.queue_id, window_s=3600)
    key_a, digest_a, answer_a = window.srmp_entry(ID, "private$/a")
    window.begin(key_a)
    window.remember(key_a, digest_a, answer_a)
    assert await window.seen(key_a, digest_a) == answer_a  # a resend to a: a duplicate
    key_b, digest_b, _ = window.srmp_entry(ID, "private$/b")
    assert await window.seen(key_b, digest_b) is None  # the copy for b is new, not refused
    await close_store(store)


async def test_entries_of_the_earlier_key_format_stay_in_force(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    info = await store.create_queue("private$/entrepot_dedup$", {})
    now_ms = int(time.time() * 1000)
    _, digest_a, _ = DedupWindow.srmp_entry(ID, "private$/a")
    _, digest_f, _ = DedupWindow.srmp_entry(ID, "http://far/msmq/private$/q")
    # As the earlier version flushed them: the key is the id alone, the digest names the
    # destination. A client's Idempotency-Key entry shares the record and must keep its key.
    old = {"entries": [
        {"key": f"srmp:{ID}", "digest": digest_a, "answer": {"id": ID}, "at_ms": now_ms},
        {"key": f"forward:{ID}", "digest": digest_f, "answer": {"id": ID}, "at_ms": now_ms},
        {"key": "srmp:client-key", "digest": "d", "answer": {"id": "x", "seq": 1},
         "at_ms": now_ms}]}
    await store.append(SendSpec(info.queue_id, json.dumps(old).encode()))
    window = DedupWindow(store, info.queue_id, window_s=3600)
    key_a, digest, answer = window.srmp_entry(ID, "private$/a")
    assert await window.seen(key_a, digest) == answer  # still a duplicate after the upgrade
    key_b, digest_b, _ = window.srmp_entry(ID, "private$/b")
    assert await window.seen(key_b, digest_b) is None
    forward_key = f"forward:{ID}|{digest_f}"
    assert await window.seen(forward_key, digest_f) == {"id": ID}
    assert await window.seen("srmp:client-key", "d") == {"id": "x", "seq": 1}
    await close_store(store)
