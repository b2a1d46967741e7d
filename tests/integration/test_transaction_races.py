"""Calls on one transaction while it is being committed, on the real queue manager and store:
nothing is committed twice, and nothing accepted is lost."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.auth.principal import OPEN
from gateway.queues.errors import QueueError
from gateway.msmq.message import MessageProperties
from gateway.queues.manager import QueueManager, QueueSettings
from gateway.queues.transactions import Transactions
from store.message_store import MessageStore
from store.options import StoreOptions

OPTIONS = StoreOptions(segment_size=256 << 10, qmlog_size=1 << 20,
                       group_commit_bytes_max=64 << 10, checkpoint_interval_s=3600,
                       cleanup_interval_s=3600)
GUID = "00000000-0000-0000-0000-000000000002"
QUEUE = "private$/tx"


@pytest.fixture
async def txs(tmp_path: Path) -> AsyncIterator[Transactions]:
    store = MessageStore.open(tmp_path, OPTIONS)
    store.start(asyncio.get_running_loop())
    try:
        qm = QueueManager(store, GUID)
        await qm.open()
        await qm.create_queue(QUEUE, QueueSettings(transactional=True))
        yield Transactions(qm)
    finally:
        store.close()


def _bodies(txs: Transactions) -> list[bytes]:
    messages, _ = txs.qm.browse(QUEUE, after=0, limit=100)
    return [m.body for m in messages]


async def test_a_commit_waiting_for_another_finds_the_transaction_ended(txs: Transactions
                                                                         ) -> None:
    tx = txs.begin(OPEN)
    txs.send(tx.id, OPEN, QUEUE, b"once", MessageProperties())
    results = await asyncio.gather(txs.commit(tx.id, OPEN), txs.commit(tx.id, OPEN),
                                   return_exceptions=True)
    assert isinstance(results[0], list) and len(results[0]) == 1
    assert isinstance(results[1], QueueError) and results[1].status_hint == 404, results[1]
    assert _bodies(txs) == [b"once"]


async def test_a_send_while_the_commit_is_written_is_refused(txs: Transactions) -> None:
    tx = txs.begin(OPEN)
    txs.send(tx.id, OPEN, QUEUE, b"first", MessageProperties())
    committing = asyncio.create_task(txs.commit(tx.id, OPEN))
    await asyncio.sleep(0)  # the commit holds the transaction and waits for the store
    with pytest.raises(QueueError) as refused:
        txs.send(tx.id, OPEN, QUEUE, b"late", MessageProperties())
    assert refused.value.status_hint == 409
    await committing
    assert _bodies(txs) == [b"first"]
