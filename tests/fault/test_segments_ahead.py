"""Segments made ahead of need (store.spare): taken by the writer when the current one fills,
kept across a restart when unused, skipped quietly on a full disk, fatal on an I/O error."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import pytest

from store.errors import StoreFailed
from store.message_store import MessageStore
from store.options import StoreOptions
from store.records import SendSpec
from tests.fault.faulty_ops import FaultyFileOps
from tests.fault.test_store_faults import made_ahead, until_failed
from tests.store.conftest import close_store, open_store

OPTIONS = StoreOptions(segment_size=64 << 10, qmlog_size=1 << 20, group_commit_bytes_max=32 << 10,
                       checkpoint_interval_s=3600, cleanup_interval_s=3600)
BODY = bytes(20000)  # three to a 64 KiB segment


class _FailsMaking(FaultyFileOps):
    """Creating ``p0000002.mq`` fails with ``error`` (ENOSPC or EIO) at its open."""

    def __init__(self, error: int) -> None:
        super().__init__()
        self.error = error

    def open(self, path: Path, *, create: bool = False, exclusive: bool = False) -> int:
        if create and path.name == "p0000002.mq.tmp":
            raise OSError(self.error, f"{errno.errorcode[self.error]} (injected)")
        return super().open(path, create=create, exclusive=exclusive)


async def _idle(store: MessageStore) -> None:
    preparer = store._engine.preparer
    assert preparer is not None
    for _ in range(3000):  # an upper bound only
        with preparer._lock:
            if not preparer._wanted:
                return
        await asyncio.sleep(0.01)
    raise AssertionError("the preparer never finished")


async def test_the_writer_takes_the_segment_made_ahead(tmp_path: Path) -> None:
    store = await open_store(tmp_path, OPTIONS)
    first = [await store.append(SendSpec(1, BODY)) for _ in range(3)]
    ahead = await made_ahead(store)
    assert ahead == 2 and {r.segment for r in first} == {1}
    fourth = await store.append(SendSpec(1, BODY))
    assert fourth.segment == ahead, "the full segment's successor was ready"
    assert await made_ahead(store) == 3, "and the next one is made meanwhile"
    await close_store(store)
    store = await open_store(tmp_path, OPTIONS)  # segment 3 is on disk, empty: used again
    assert store.count(1) == 4
    more = [await store.append(SendSpec(1, BODY)) for _ in range(3)]
    assert {r.segment for r in more} == {2, 3}
    assert store.recovery.damaged == []
    await close_store(store)


async def test_no_space_to_make_ahead_is_not_an_error(tmp_path: Path) -> None:
    store = await open_store(tmp_path, OPTIONS, _FailsMaking(errno.ENOSPC))
    await store.append(SendSpec(1, BODY))
    await _idle(store)
    assert store.failed is None
    records = [await store.append(SendSpec(1, BODY)) for _ in range(3)]
    assert records[-1].segment == 3, "the writer made its own (2 was reserved, never made)"
    assert not (tmp_path / "storage" / "p0000002.mq").exists()
    await close_store(store)
    store = await open_store(tmp_path, OPTIONS)
    assert store.count(1) == 4
    await close_store(store)


async def test_an_io_error_making_a_segment_ahead_stops_the_store(tmp_path: Path) -> None:
    store = await open_store(tmp_path, OPTIONS, _FailsMaking(errno.EIO))
    await store.append(SendSpec(1, b"durable"))
    assert "I/O error making segment 2" in await until_failed(store)
    with pytest.raises(StoreFailed):
        await store.append(SendSpec(1, b"refused"))
    await close_store(store)
    store = await open_store(tmp_path, OPTIONS)
    assert [store.read(r) for r in store.records(1)] == [b"durable"]
    await close_store(store)
