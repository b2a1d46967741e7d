"""A disk at 0 bytes free, through the store's file seam: new data is refused, the store's own
bookkeeping (checkpoints, l files, stream state, the log) never meets ENOSPC."""

from __future__ import annotations

import asyncio
import errno
from dataclasses import replace
from pathlib import Path

import pytest

from store.errors import DiskFull
from store.message_store import MessageStore
from store.options import StoreOptions
from store.records import SendSpec
from tests.fault.faulty_ops import FaultyFileOps
from tests.fault.test_store_faults import made_ahead
from tests.store.conftest import close_store, open_store

OPTIONS = StoreOptions(segment_size=64 << 10, qmlog_size=1 << 20, group_commit_bytes_max=32 << 10,
                       checkpoint_interval_s=3600, cleanup_interval_s=3600)


async def checkpoints(store: MessageStore, count: int) -> None:
    """Wait for ``count`` more checkpoints by the writer (an upper bound only)."""
    start = store._engine.epoch
    for _ in range(3000):
        if store._engine.epoch >= start + count or store.failed is not None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("no checkpoint taken")


async def test_checkpoints_removals_and_stream_state_go_on_at_0_bytes_free(tmp_path: Path
                                                                          ) -> None:
    ops = FaultyFileOps()
    options = replace(OPTIONS, checkpoint_interval_s=0.05)
    store = await open_store(tmp_path, options, ops)
    kept = [await store.append(SendSpec(1, bytes([i]) * 20000)) for i in range(3)]
    await made_ahead(store)
    ops.free = 0
    # The segment made before the disk filled takes three more: its l file, never written
    # yet, and a checkpoint that grew (two segments, more numbers) must find room.
    kept += [await store.append(SendSpec(2, bytes([i]) * 20000)) for i in range(3, 6)]
    with pytest.raises(DiskFull):
        await store.append(SendSpec(1, bytes(20000)))  # needs a third segment
    with pytest.raises(DiskFull):
        await store.create_queue("private$/new", {})
    assert store.registry.find("private$/new") is None
    await store.remove(kept[:2])
    await store.save_stream_state(b"s" * 3000)
    await checkpoints(store, 3)
    assert store.failed is None, store.failed
    assert ops.full_refusals > 0, "the disk-full seam refused nothing: the test proves nothing"
    await close_store(store)  # a final checkpoint, at 0 bytes free

    store = await open_store(tmp_path, options, ops)  # a restart on the full disk
    try:
        assert store.stream_state == b"s" * 3000
        assert [store.read(r) for r in store.records(1)] == [bytes([2]) * 20000]
        assert store.count(2) == 3
        await store.remove(list(store.records(2))[:1])
        await checkpoints(store, 2)
        assert store.failed is None, store.failed
        ops.free = None  # space returns: new data is taken, no restart
        await store.append(SendSpec(1, bytes(20000)))
        await store.append(SendSpec(1, bytes(20000)))
        await store.create_queue("private$/new", {})
        assert store.count(1) == 3
    finally:
        await close_store(store)


async def test_a_checkpoint_that_outgrows_its_room_takes_the_reserve_then_refuses_sends(
        tmp_path: Path) -> None:
    ops = FaultyFileOps()
    store = await open_store(tmp_path, OPTIONS, ops)
    copy = tmp_path / "storage" / "MQTrans.lg1"
    allocated = copy.stat().st_size
    # One number per queue in every checkpoint: enough queues make it outgrow its room.
    queues = allocated // 6
    for start in range(1, queues, 500):
        await store.commit([SendSpec(q, b"x") for q in range(start, min(start + 500, queues))])
    ops.free = 0
    store._engine.checkpoint()  # the writer is idle: no batch runs meanwhile
    assert store.failed is None, store.failed
    assert copy.stat().st_size > allocated
    assert store.short_of_space is not None
    with pytest.raises(DiskFull):
        await store.append(SendSpec(1, b"refused while the reserve is given up"))
    await store.remove(list(store.records(1)))  # removals go on
    ops.free = None
    store._engine.checkpoint()  # refills the reserve
    assert store.short_of_space is None
    await store.append(SendSpec(1, b"taken again"))
    await close_store(store)
    store = await open_store(tmp_path, OPTIONS)
    assert [store.read(r) for r in store.records(1)] == [b"taken again"]
    assert store.count(queues - 1) == 1
    await close_store(store)


class _NoRoomInArchive(FaultyFileOps):
    """A full disk where the archive directory needs a new block for each entry."""

    def rename(self, source: Path, target: Path) -> None:
        if target.parent.name == "archive":
            raise OSError(errno.ENOSPC, "No space left on device (injected: directory block)")
        super().rename(source, target)


async def test_an_empty_segment_that_cannot_be_archived_is_deleted(tmp_path: Path) -> None:
    options = replace(OPTIONS, archive_segments=True)
    store = await open_store(tmp_path, options, _NoRoomInArchive())
    records = [await store.append(SendSpec(1, bytes(8000))) for _ in range(40)]
    segments = len(list((tmp_path / "storage").glob("p*.mq")))
    await store.remove(records)
    store._engine.checkpoint(cleanup=True)  # the writer is idle: no batch runs meanwhile
    assert store.failed is None, store.failed
    assert len(list((tmp_path / "storage").glob("p*.mq"))) < segments
    assert not list((tmp_path / "storage" / "archive").glob("*"))
    await store.append(SendSpec(1, b"after"))
    await close_store(store)
