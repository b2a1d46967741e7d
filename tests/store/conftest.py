from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from store.fileops import FileOps
from store.message_store import MessageStore
from store.options import StoreOptions

SMALL = StoreOptions(segment_size=256 << 10, qmlog_size=1 << 20, group_commit_bytes_max=64 << 10,
                     checkpoint_interval_s=3600.0, cleanup_interval_s=3600.0)


async def open_store(root: Path, options: StoreOptions = SMALL,
                     ops: FileOps | None = None) -> MessageStore:
    loop = asyncio.get_running_loop()
    store = await loop.run_in_executor(None, lambda: MessageStore.open(root, options, ops=ops))
    store.start(loop)
    return store


async def close_store(store: MessageStore) -> None:
    await asyncio.get_running_loop().run_in_executor(None, store.close)


async def halt_threads(store: MessageStore) -> None:
    """Stop the writer and the segment preparer as a crash would: nothing more written, no
    final checkpoint (a preparer left running could still add a segment to the directory)."""
    loop = asyncio.get_running_loop()
    writer = store._writer
    if writer is not None:
        await loop.run_in_executor(None, writer.stop)
        store._writer = None
    preparer = store._engine.preparer
    if preparer is not None:
        await loop.run_in_executor(None, preparer.stop)
        store._engine.preparer = None


async def abandon_store(store: MessageStore) -> None:
    """Stop without a final checkpoint, as a crash would, and let the directory go."""
    await halt_threads(store)
    assert store._lock is not None
    store._lock.release()
    store._lock = None


@pytest.fixture
async def store_factory(tmp_path: Path) -> AsyncIterator[Callable[..., object]]:
    opened: list[MessageStore] = []

    async def make(options: StoreOptions = SMALL, ops: FileOps | None = None) -> MessageStore:
        store = await open_store(tmp_path / "data", options, ops)
        opened.append(store)
        return store

    yield make
    for store in opened:
        if not store.closed:
            await close_store(store)
