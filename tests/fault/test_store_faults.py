"""Faults injected through the store's file seam (no global patching of ``os``)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from store.errors import DiskFull, StoreBusy, StoreFailed
from store.message_store import MessageStore
from store.options import StoreOptions
from store.records import SendSpec
from tests.fault.faulty_ops import FaultyFileOps
from tests.store.conftest import abandon_store, close_store, open_store

OPTIONS = StoreOptions(segment_size=64 << 10, qmlog_size=1 << 20, group_commit_bytes_max=32 << 10,
                       checkpoint_interval_s=3600, cleanup_interval_s=3600)


def _bodies(store: MessageStore, queue_id: int) -> list[bytes]:
    return [store.read(r) for r in store.records(queue_id)]


async def made_ahead(store: MessageStore, kind: str = "p") -> int:
    """Wait until the segment preparer has the next segment of ``kind`` ready; its number."""
    preparer = store._engine.preparer
    assert preparer is not None
    for _ in range(3000):  # an upper bound only
        with preparer._lock:
            ready = preparer._ready.get(kind)
        if ready is not None:
            return ready[0].number
        await asyncio.sleep(0.01)
    raise AssertionError("no segment made ahead")


async def until_failed(store: MessageStore) -> str:
    """Wait until the store fail-stops (an error on another thread); the reason."""
    for _ in range(3000):  # an upper bound only
        if store.failed is not None:
            return store.failed
        await asyncio.sleep(0.01)
    raise AssertionError("the store did not stop")


async def test_enospc_refuses_new_writes_but_reads_and_removals_go_on(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    store = await open_store(tmp_path, OPTIONS, ops)
    kept = [await store.append(SendSpec(1, bytes([i]) * 20000)) for i in range(3)]
    await made_ahead(store)
    ops.enospc_on_allocate = True
    # The segment made before the disk filled takes three more; none can be made after it.
    kept += [await store.append(SendSpec(1, bytes([i]) * 20000)) for i in range(3, 6)]
    used, end = store.quotas.machine_used, store.readable_end(1)
    with pytest.raises(DiskFull):
        await store.append(SendSpec(1, bytes(20000)))  # needs a third segment
    assert store.failed is None, "a full disk is not a fail-stop"
    assert store.quotas.machine_used == used, "the refused message's charge is given back"
    assert store.readable_end(1) == end + 1, "its number is no longer in flight (nor used)"
    assert _bodies(store, 1) == [bytes([i]) * 20000 for i in range(6)]
    await store.remove(kept[:1])
    assert store.count(1) == 5
    ops.enospc_on_allocate = False  # space freed: service resumes by itself
    await store.append(SendSpec(1, b"after"))
    await close_store(store)
    store = await open_store(tmp_path, OPTIONS)
    assert _bodies(store, 1)[-1] == b"after"
    assert store.count(1) == 6
    await close_store(store)


async def test_enospc_inside_a_transaction_leaves_no_trace(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    store = await open_store(tmp_path, OPTIONS, ops)
    await store.append(SendSpec(1, bytes(30000)))
    await made_ahead(store)
    ops.enospc_on_allocate = True
    with pytest.raises(DiskFull):  # part goes to the segment made ahead, the rest finds none
        await store.commit([SendSpec(2, bytes(20000)) for _ in range(6)])
    assert store.count(2) == 0
    ops.enospc_on_allocate = False
    await close_store(store)
    store = await open_store(tmp_path, OPTIONS)
    assert store.count(2) == 0
    assert store.count(1) == 1
    await close_store(store)


async def test_a_checkpoint_out_of_file_descriptors_is_put_off_and_nothing_is_lost(
        tmp_path: Path) -> None:
    """EMFILE is the process's state, not the disk's: the checkpoint changes nothing and is
    tried again, the store keeps taking writes, and what it took is there after a restart."""
    ops = FaultyFileOps()
    store = await open_store(tmp_path, OPTIONS, ops)
    await store.append(SendSpec(1, b"before"))
    ops.emfile_opening = "MQTrans"
    with pytest.raises(StoreBusy):
        await asyncio.to_thread(store._engine.checkpoint)
    assert store.failed is None
    await store.append(SendSpec(1, b"meanwhile"))
    ops.emfile_opening = None
    await asyncio.to_thread(store._engine.checkpoint)  # the next one is taken
    await store.append(SendSpec(1, b"after"))
    ops.emfile_opening = "MQTrans"  # the final checkpoint too: the next start reads the log
    await close_store(store)
    store = await open_store(tmp_path, OPTIONS)
    assert _bodies(store, 1) == [b"before", b"meanwhile", b"after"]
    await close_store(store)


async def test_a_segment_out_of_file_descriptors_refuses_the_write_and_the_store_goes_on(
        tmp_path: Path) -> None:
    """EMFILE when a segment must be made, ahead or for a write that needs it: the segment
    maker does not stop the store, the write is refused (StoreBusy, 503 at the API) with
    nothing changed, and writes go on once descriptors are back."""
    ops = FaultyFileOps()
    store = await open_store(tmp_path, OPTIONS, ops)
    kept = [await store.append(SendSpec(1, bytes([i]) * 20000)) for i in range(3)]
    await made_ahead(store)
    ops.emfile_opening = "p0"  # data segments (p0000001.mq, ...) and their .tmp
    # The segment made ahead takes three more; the next one ahead cannot be made.
    kept += [await store.append(SendSpec(1, bytes([i]) * 20000)) for i in range(3, 6)]
    used, end = store.quotas.machine_used, store.readable_end(1)
    with pytest.raises(StoreBusy):
        await store.append(SendSpec(1, bytes(20000)))
    assert store.failed is None
    assert (store.quotas.machine_used, store.readable_end(1)) == (used, end + 1)
    ops.emfile_opening = None
    await store.append(SendSpec(1, b"after"))
    await close_store(store)
    store = await open_store(tmp_path, OPTIONS)
    assert _bodies(store, 1) == [bytes([i]) * 20000 for i in range(6)] + [b"after"]
    await close_store(store)


async def test_the_stream_state_out_of_file_descriptors_is_put_off(tmp_path: Path) -> None:
    """The incoming streams' state is saved again later (StoreBusy); the saved state stays
    the previous one, and the store goes on."""
    ops = FaultyFileOps()
    store = await open_store(tmp_path, OPTIONS, ops)
    await store.save_stream_state(b"first")
    ops.emfile_opening = "MQInSeqs"
    with pytest.raises(StoreBusy):
        await store.save_stream_state(b"second")
    assert store.failed is None and store.stream_state == b"first"
    ops.emfile_opening = None
    await store.save_stream_state(b"third")
    await close_store(store)
    store = await open_store(tmp_path, OPTIONS)
    assert store.stream_state == b"third"
    await close_store(store)


async def test_a_write_that_needs_a_checkpoint_is_refused_while_no_descriptor_is_left(
        tmp_path: Path) -> None:
    """A full QMLog needs a checkpoint before the next logged write: with no descriptor for
    it, that write is refused (StoreBusy, 503 at the API) and nothing else changes."""
    ops = FaultyFileOps()
    options = replace(OPTIONS, qmlog_size=64 << 10)
    store = await open_store(tmp_path, options, ops)
    await store.append(SendSpec(1, b"kept"))
    ops.emfile_opening = "MQTrans"
    refused = None
    for _ in range(20_000):  # a removal is logged: the 64 KiB log fills within a few thousand
        record = await store.append(SendSpec(1, b"taken"))
        try:
            await store.remove([record])
        except StoreBusy:
            refused = record
            break
    assert refused is not None and store.failed is None
    ops.emfile_opening = None
    await store.remove([refused])  # the checkpoint is taken now, and the write with it
    await close_store(store)
    store = await open_store(tmp_path, options)
    assert _bodies(store, 1) == [b"kept"]
    await close_store(store)


async def test_eio_on_sync_fail_stops_and_is_never_retried(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    store = await open_store(tmp_path, OPTIONS, ops)
    await store.append(SendSpec(1, b"durable"))
    await made_ahead(store)  # no sync of the preparer's after this point
    ops.eio_on_fdatasync = True
    with pytest.raises(StoreFailed):
        await store.append(SendSpec(1, b"lost"))
    assert store.failed is not None and "I/O error" in store.failed
    syncs = ops.syncs
    ops.eio_on_fdatasync = False  # even if the disk recovers, the store stays stopped
    with pytest.raises(StoreFailed):
        await store.append(SendSpec(1, b"refused"))
    assert ops.syncs == syncs, "a failed fsync is never retried"
    await abandon_store(store)
    store = await open_store(tmp_path, OPTIONS)
    assert _bodies(store, 1)[0] == b"durable"
    assert b"refused" not in _bodies(store, 1)
    await close_store(store)


async def test_torn_write_is_cut_and_everything_acknowledged_recovers(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    store = await open_store(tmp_path, OPTIONS, ops)
    for i in range(5):
        await store.append(SendSpec(1, bytes([i]) * 700))
    ops.torn_write_bytes = 300
    with pytest.raises(StoreFailed):
        await store.append(SendSpec(1, b"t" * 700))
    await abandon_store(store)
    store = await open_store(tmp_path, OPTIONS)
    assert _bodies(store, 1) == [bytes([i]) * 700 for i in range(5)]
    assert store.recovery.damaged == [], "a torn tail is not corruption"
    await store.append(SendSpec(1, b"next"))
    assert _bodies(store, 1)[-1] == b"next"
    await close_store(store)


async def test_torn_transaction_is_all_or_nothing(tmp_path: Path) -> None:
    ops = FaultyFileOps()
    store = await open_store(tmp_path, OPTIONS, ops)
    await store.append(SendSpec(1, b"before"))
    ops.torn_write_bytes = 2000  # the first two of three records reach the file
    with pytest.raises(StoreFailed):  # (not zero bytes: the cut-off tail would be zeros too)
        await store.commit([SendSpec(2, b"\x07" * 900), SendSpec(2, b"\x07" * 900),
                            SendSpec(2, b"\x07" * 900)])
    await abandon_store(store)
    store = await open_store(tmp_path, OPTIONS)
    assert store.count(2) == 0
    assert _bodies(store, 1) == [b"before"]
    await close_store(store)


async def test_damaged_bitmap_file_falls_back_to_a_full_scan(tmp_path: Path) -> None:
    store = await open_store(tmp_path, OPTIONS)
    records = [await store.append(SendSpec(1, bytes([i]) * 500)) for i in range(20)]
    await store.remove(records[::2])
    await close_store(store)
    lfile = tmp_path / "storage" / "l0000001.mq"
    data = bytearray(lfile.read_bytes())
    for index in range(0, len(data), 97):
        data[index] ^= 0xFF
    lfile.write_bytes(bytes(data))
    store = await open_store(tmp_path, OPTIONS)
    assert store.recovery.full_scans == 1
    assert _bodies(store, 1) == [bytes([i]) * 500 for i in range(1, 20, 2)]
    await close_store(store)


async def test_both_checkpoint_copies_damaged_means_full_rebuild(tmp_path: Path) -> None:
    store = await open_store(tmp_path, OPTIONS)
    records = [await store.append(SendSpec(1, bytes([i]) * 100)) for i in range(10)]
    await store.remove(records[:4])
    await close_store(store)
    for copy in (tmp_path / "storage").glob("MQTrans.lg*"):
        data = bytearray(copy.read_bytes())
        data[20] ^= 0x01
        copy.write_bytes(bytes(data))
    store = await open_store(tmp_path, OPTIONS)
    assert store.recovery.checkpoint_epoch is None
    assert _bodies(store, 1) == [bytes([i]) * 100 for i in range(4, 10)]
    await close_store(store)


@pytest.mark.parametrize("ahead", [False, True], ids=["by-the-writer", "made-ahead"])
async def test_crash_while_creating_a_segment_leaves_nothing_behind(tmp_path: Path,
                                                                     ahead: bool) -> None:
    ops = FaultyFileOps()
    store = await open_store(tmp_path, replace(OPTIONS, segments_ahead=ahead), ops)
    await store.append(SendSpec(1, bytes(40000)))
    if ahead:  # segment 2 is made ahead; taking it asks for segment 3, whose header "dies"
        assert await made_ahead(store) == 2
        ops.torn_write_bytes = 0
        ops.torn_on_pwrite = True
        await store.append(SendSpec(1, bytes(40000)))
        assert "making segment 3" in await until_failed(store)
        with pytest.raises(StoreFailed):
            await store.append(SendSpec(1, b"refused"))
    else:
        ops.torn_write_bytes = 0  # the header write of the next segment "dies"
        ops.torn_on_pwrite = True
        with pytest.raises(StoreFailed):
            await store.append(SendSpec(1, bytes(40000)))  # needs a second segment
    await abandon_store(store)
    made = 3 if ahead else 2
    assert not (tmp_path / "storage" / f"p000000{made}.mq").exists(), \
        "only whole segments get a name"
    # What a kill -9 at that moment leaves (no exception handler runs): the temporary file.
    (tmp_path / "storage" / "p0000002.mq.tmp").write_bytes(b"")
    (tmp_path / "storage" / "p0000003.mq.tmp").write_bytes(bytes(4096))
    store = await open_store(tmp_path, OPTIONS)
    assert store.recovery.damaged == []
    assert not any(p.suffix == ".tmp" for p in (tmp_path / "storage").iterdir())
    assert store.count(1) == (2 if ahead else 1)
    await close_store(store)
