"""Backup and restore: offline, online under load, and the refusals."""

from __future__ import annotations

import asyncio
import errno
import json
from pathlib import Path
from typing import Any

import pytest

from store.backup import BackupError, backup_offline
from store.errors import StoreLocked
from store.records import SendSpec
from store.restore import restore
from tests.store.conftest import SMALL, close_store, open_store


async def _filled(root: Path, count: int = 40) -> list[bytes]:
    store = await open_store(root)
    await store.create_queue("orders", {"transactional": "1"})
    records = [await store.append(SendSpec(1, bytes([i]) * 700)) for i in range(count)]
    await store.remove(records[:5])
    await store.commit([SendSpec(2, b"t1"), SendSpec(2, b"t2")])
    await close_store(store)
    return [bytes([i]) * 700 for i in range(5, count)]


def _bodies(root: Path) -> dict[int, list[bytes]]:
    from store.message_store import MessageStore

    store = MessageStore.open(root, SMALL)
    try:
        return {q: [store.read(r) for r in store.records(q)] for q in store.queue_ids()}
    finally:
        store.close()


async def test_offline_backup_and_restore_round_trip(tmp_path: Path) -> None:
    expected = await _filled(tmp_path / "data")
    report = backup_offline(tmp_path / "data", tmp_path / "backup")
    assert report.files >= 5
    manifest = json.loads((tmp_path / "backup" / "MANIFEST.json").read_text())
    assert all(len(meta["sha256"]) == 64 for meta in manifest["files"].values())
    assert any(name.startswith("storage/lqs/") for name in manifest["files"])
    restored = restore(tmp_path / "backup", tmp_path / "restored", SMALL)
    assert restored.live_records == len(expected) + 2
    assert restored.damaged == 0
    bodies = _bodies(tmp_path / "restored")
    assert bodies[1] == expected
    assert bodies[2] == [b"t1", b"t2"]


async def test_restore_refuses_a_damaged_backup_and_a_non_empty_target(tmp_path: Path) -> None:
    await _filled(tmp_path / "data")
    backup_offline(tmp_path / "data", tmp_path / "backup")
    with pytest.raises(BackupError, match="not empty"):
        restore(tmp_path / "backup", tmp_path / "data", SMALL)
    with pytest.raises(BackupError, match="not empty"):
        backup_offline(tmp_path / "data", tmp_path / "backup")
    segment = next((tmp_path / "backup" / "storage").glob("p*.mq"))
    data = bytearray(segment.read_bytes())
    data[5000] ^= 0x01
    segment.write_bytes(bytes(data))
    with pytest.raises(BackupError, match="fails its checksum"):
        restore(tmp_path / "backup", tmp_path / "restored", SMALL)
    assert not (tmp_path / "restored").exists() or not any((tmp_path / "restored").iterdir())


async def test_restore_refuses_a_manifest_pointing_outside_storage(tmp_path: Path) -> None:
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "MANIFEST.json").write_text(json.dumps(
        {"format": 1, "files": {"storage/../../etc/passwd": {"size": 1, "sha256": "x"}}}))
    with pytest.raises(BackupError, match="outside storage"):
        restore(tmp_path / "evil", tmp_path / "restored", SMALL)


async def test_offline_backup_of_an_open_store_is_refused(tmp_path: Path) -> None:
    store = await open_store(tmp_path / "data")
    with pytest.raises(StoreLocked):
        backup_offline(tmp_path / "data", tmp_path / "backup")
    await close_store(store)


async def test_online_backup_under_load_keeps_everything_acknowledged_before(
        tmp_path: Path) -> None:
    store = await open_store(tmp_path / "data")
    before = [await store.append(SendSpec(1, b"before-%d" % i)) for i in range(300)]
    await store.remove(before[:50])
    stop = asyncio.Event()

    async def load() -> int:
        sent = 0
        while not stop.is_set():
            records = await asyncio.gather(*(store.append(SendSpec(1, b"during")) for _ in
                                             range(20)))
            await store.remove(records[:10])
            await store.commit([SendSpec(3, b"a"), SendSpec(3, b"b")])
            sent += 1
        return sent

    loader = asyncio.create_task(load())
    await asyncio.sleep(0.05)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, store.backup, tmp_path / "backup")
    stop.set()
    assert await loader > 0
    await close_store(store)
    report = restore(tmp_path / "backup", tmp_path / "restored", SMALL)
    assert report.damaged == 0
    bodies = _bodies(tmp_path / "restored")
    kept = [b for b in bodies[1] if b.startswith(b"before-")]
    assert kept == [b"before-%d" % i for i in range(50, 300)]
    pairs = bodies.get(3, [])
    assert len(pairs) % 2 == 0, "transactions are whole in the backup"


async def test_a_prepare_during_an_online_backup_is_whole_or_absent_in_it(
        tmp_path: Path) -> None:
    """A transaction prepared while the segments are being copied: the copy holds it
    prepared with its records, or not at all, never prepared without them (a coordinator's
    commit on the restored copy would then store nothing and succeed)."""
    from store.message_store import MessageStore
    from store.segment import parse_segment_name

    store = await open_store(tmp_path / "data")
    await store.create_queue("orders", {"transactional": "1"})
    await store.append(SendSpec(1, b"before"))
    loop = asyncio.get_running_loop()
    prepared: list[int] = []

    def progress(done: int, total: int, name: str) -> None:
        parsed = parse_segment_name(name)
        if prepared or parsed is None or parsed[0] != "p":
            return
        # The first segment is being copied: a transaction prepares (records, then its
        # outcome in the QMLog) before the copy goes on.
        tx_id = store.reserve_tx_id()
        asyncio.run_coroutine_threadsafe(
            store.prepare([SendSpec(1, b"held-1"), SendSpec(1, b"held-2")], tx_id=tx_id),
            loop).result(timeout=60)
        prepared.append(tx_id)

    await loop.run_in_executor(None, store.backup, tmp_path / "backup", progress)
    assert prepared, "a prepare ran during the copy"
    await close_store(store)
    restore(tmp_path / "backup", tmp_path / "restored", SMALL)
    copy = MessageStore.open(tmp_path / "restored", SMALL)
    try:
        held = {tx: sorted(copy.read(r) for r in p.records) for tx, p in copy.prepared.items()}
    finally:
        copy.close()
    assert held in ({}, {prepared[0]: [b"held-1", b"held-2"]})


@pytest.mark.parametrize("change, refusal", [
    (lambda files: files.clear(), "no store"),
    (lambda files: files.update({"storage/./QMLog": files["storage/QMLog"]}), "twice"),
    (lambda files: files["storage/QMLog"].update(size="big"), "no size and sha256"),
    (lambda files: files["storage/QMLog"].update(size=True), "no size and sha256"),
    (lambda files: files["storage/QMLog"].update(sha256=None), "no size and sha256"),
    (lambda files: files.update({"lock": files["storage/QMLog"]}), "outside storage"),
], ids=["empty", "twice", "size-text", "size-bool", "no-sha", "lock"])
async def test_restore_refuses_a_manifest_that_is_not_a_backups(
        tmp_path: Path, change: Any, refusal: str) -> None:
    """A manifest the backup did not write is refused whole, before anything is copied:
    not restored as an empty store, nor counted twice, nor a traceback."""
    await _filled(tmp_path / "data")
    backup_offline(tmp_path / "data", tmp_path / "backup")
    manifest = tmp_path / "backup" / "MANIFEST.json"
    doc = json.loads(manifest.read_text())
    change(doc["files"])
    manifest.write_text(json.dumps(doc))
    with pytest.raises(BackupError, match=refusal):
        restore(tmp_path / "backup", tmp_path / "restored", SMALL)
    assert not (tmp_path / "restored").exists()


async def test_restore_refuses_a_target_inside_the_backup_or_a_data_directory(
        tmp_path: Path) -> None:
    await _filled(tmp_path / "data")
    backup_offline(tmp_path / "data", tmp_path / "backup")
    for inside in (tmp_path / "backup" / "inner", tmp_path / "data" / "nested",
                   tmp_path / "data" / "storage" / "nested"):
        with pytest.raises(BackupError, match="is inside the"):
            restore(tmp_path / "backup", inside, SMALL)
        assert not inside.exists()
    restore(tmp_path / "backup", tmp_path / "elsewhere", SMALL)


@pytest.mark.parametrize(("instead", "said"), [
    ("nothing", "is missing$"),
    ("dangling", r"is missing \(a symlink to nothing\)"),
    ("device", "is a device, socket or pipe, not a file"),
    ("directory", "is a directory, not a file")])
async def test_restore_says_what_stands_where_a_backup_file_should_be(
        tmp_path: Path, instead: str, said: str) -> None:
    await _filled(tmp_path / "data")
    backup_offline(tmp_path / "data", tmp_path / "backup")
    segment = next((tmp_path / "backup" / "storage").glob("p*.mq"))
    segment.unlink()
    if instead == "dangling":
        segment.symlink_to(tmp_path / "nowhere")
    elif instead == "device":
        segment.symlink_to("/dev/null")
    elif instead == "directory":
        segment.mkdir()
    with pytest.raises(BackupError, match=f"backup file storage/{segment.name} {said}"):
        restore(tmp_path / "backup", tmp_path / "restored", SMALL)
    assert not (tmp_path / "restored").exists() or not any((tmp_path / "restored").iterdir())


async def test_a_restore_onto_a_disk_without_room_for_the_reserve_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    await _filled(tmp_path / "data")
    backup_offline(tmp_path / "data", tmp_path / "backup")
    assert restore(tmp_path / "backup", tmp_path / "roomy", SMALL).reserve_whole

    def full(*_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("store.space.reserve_file", full)
    report = restore(tmp_path / "backup", tmp_path / "tight", SMALL)
    assert not report.reserve_whole
    assert report.live_records == 37 and report.damaged == 0, "restored whole all the same"
