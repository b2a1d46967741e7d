"""Audit of the storage folder: outside changes are logged, the store's own are not."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from store.audit import _Ours
from store.lqs import lqs_name
from store.options import StoreOptions
from store.records import SendSpec
from tests.store.conftest import close_store, open_store

FAST_AUDIT = StoreOptions(segment_size=256 << 10, qmlog_size=1 << 20,
                          group_commit_bytes_max=64 << 10, checkpoint_interval_s=0.1,
                          cleanup_interval_s=0.1, audit_interval_s=0.2)


def _events(root: Path) -> list[dict[str, str]]:
    path = root / "audit.log"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_own_writes_are_not_reported(tmp_path: Path) -> None:
    store = await open_store(tmp_path, FAST_AUDIT)
    for round_ in range(5):
        records = [await store.append(SendSpec(1, bytes(5000))) for _ in range(30)]
        await store.create_queue(f"q{round_}", {})
        await store.remove(records)
        await asyncio.sleep(0.25)
    await close_store(store)
    store = await open_store(tmp_path, FAST_AUDIT)
    await close_store(store)
    assert _events(tmp_path) == []


async def test_outside_changes_while_running_are_reported(tmp_path: Path) -> None:
    store = await open_store(tmp_path, FAST_AUDIT)
    await store.append(SendSpec(1, b"x"))
    await asyncio.sleep(0.3)
    (tmp_path / "storage" / "intruder.txt").write_text("hello")
    segment = next((tmp_path / "storage").glob("p*.mq"))
    with open(segment, "r+b") as handle:
        handle.seek(0, 2)
        handle.write(b"appended by someone")
    await asyncio.sleep(0.6)
    await close_store(store)
    changes = {(e["file"], e["change"]) for e in _events(tmp_path)}
    assert ("intruder.txt", "added") in changes
    assert (segment.name, "modified") in changes


async def test_changes_while_stopped_are_reported_at_start(tmp_path: Path) -> None:
    store = await open_store(tmp_path, FAST_AUDIT)
    await store.create_queue("q", {})
    await close_store(store)
    lqs_file = next((tmp_path / "storage" / "lqs").iterdir())
    lqs_file.unlink()
    store = await open_store(tmp_path, FAST_AUDIT)
    await close_store(store)
    assert (f"lqs/{lqs_file.name}", "removed") in {(e["file"], e["change"])
                                                   for e in _events(tmp_path)}


def _kill(store: Any) -> None:
    """The store's process killed: nothing more is written (no last pass, no clean state)."""
    assert store.auditor is not None
    store.auditor.save_state = lambda **_: None
    store.auditor.run_pass = lambda: []


async def test_after_a_crash_the_stores_own_replacements_are_not_reported(
        tmp_path: Path) -> None:
    """A queue's registration is replaced (a new file renamed over it) after the last audit
    pass, then the process dies: the next start reports nothing, yet still reports a file
    replaced by someone else in the same conditions."""
    slow = replace(FAST_AUDIT, audit_interval_s=3600.0)  # no pass after the change
    store = await open_store(tmp_path, slow)
    ours = await store.create_queue("ours", {})
    theirs_id = (await store.create_queue("theirs", {})).queue_id
    await close_store(store)
    store = await open_store(tmp_path, slow)
    await store.update_queue(ours.queue_id, {"label": "changed by the gateway"})
    _kill(store)
    await close_store(store)
    lqs = tmp_path / "storage" / "lqs"
    theirs = lqs / lqs_name(theirs_id, "theirs")
    copy = theirs.with_suffix(".copy")
    copy.write_bytes(theirs.read_bytes())
    os.replace(copy, theirs)  # the same bytes under a new inode, by someone else
    store = await open_store(tmp_path, slow)
    await close_store(store)
    assert {(e["file"], e["change"]) for e in _events(tmp_path)} == {
        (f"lqs/{theirs.name}", "replaced")}


async def test_a_copied_data_directory_is_compared_by_size_and_time(tmp_path: Path) -> None:
    """``cp -a`` of a stopped data directory gives every file a new inode: not reported as
    replaced files. A change made to the copy is still reported."""
    original = tmp_path / "original"
    store = await open_store(original, FAST_AUDIT)
    await store.append(SendSpec(1, bytes(3000)))
    await store.create_queue("q", {})
    await close_store(store)
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(original), str(copy)], check=True)
    (copy / "audit.log").unlink(missing_ok=True)
    store = await open_store(copy, FAST_AUDIT)
    await close_store(store)
    assert _events(copy) == []
    (copy / "storage" / "intruder.txt").write_text("hello")
    subprocess.run(["cp", "-a", str(copy), str(tmp_path / "copy2")], check=True)
    (tmp_path / "copy2" / "audit.log").unlink(missing_ok=True)
    store = await open_store(tmp_path / "copy2", FAST_AUDIT)
    await close_store(store)
    assert [(e["file"], e["change"]) for e in _events(tmp_path / "copy2")] == [
        ("intruder.txt", "added")]


def test_a_failed_note_is_logged_once_a_minute(tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    """Out of descriptors, every segment the store tries to make fails to note itself here
    first: the warning comes once, not once a try."""
    storage = tmp_path / "storage"
    storage.mkdir()
    ours = _Ours(tmp_path / "no such directory" / "audit.ours", storage)
    for number in range(5):
        ours.note(storage / f"p{number:07d}.mq", number)
    assert caplog.text.count("audit.ours not written") == 1
