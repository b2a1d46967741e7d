"""A queue read a page at a time, in sequence order, with a turn of the event loop between pages.

Why: purge, bulk requeue and lookup by a kept id each walked a whole queue in one go on the
event loop (a million messages held it for seconds). Each page is found in O(page) by the
index's sequence order (``store/seqorder.py``), and the reader may remove what it was given
before asking for the next page.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from store.message_store import MessageStore
from store.records import StoredRecord

__all__ = ["pages"]


async def pages(store: MessageStore, queue_id: int, size: int, *,
                below: int | None = None) -> AsyncIterator[list[StoredRecord]]:
    """Up to ``size`` live records a page, oldest first; only sequences under ``below``."""
    after = 0
    while True:
        page = store.first_records(queue_id, after, size)
        if below is not None:
            page = [r for r in page if r.seq < below]
        if not page:
            return
        after = page[-1].seq
        yield page
        await asyncio.sleep(0)
