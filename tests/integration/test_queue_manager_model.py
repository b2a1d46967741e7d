"""A Hypothesis state machine drives random sends, receives, transactions and restarts against
the real queue manager and store, and compares every queue with a simple model."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from gateway.auth.principal import OPEN
from gateway.queues.errors import QueueError
from gateway.msmq.message import MessageProperties
from gateway.queues.manager import QueueManager, QueueSettings
from gateway.queues.transactions import Transactions
from store.message_store import MessageStore
from store.options import StoreOptions

OPTIONS = StoreOptions(segment_size=256 << 10, qmlog_size=1 << 20, group_commit_bytes_max=64 << 10,
                       checkpoint_interval_s=3600, cleanup_interval_s=3600)
QUEUES = ("plain", "private$/tx")
GUID = "00000000-0000-0000-0000-000000000001"


class QueueManagerModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.root = Path(tempfile.mkdtemp(prefix="entrepot-model-"))
        self.model: dict[str, list[bytes]] = {q: [] for q in QUEUES}
        self.held: dict[str, list[tuple[str, int, bytes]]] = {}  # tx -> (queue, index, body)
        self.pending: dict[str, list[bytes]] = {}
        self.counter = 0
        self._open()
        self.run(self.qm.create_queue("plain", QueueSettings()))
        self.run(self.qm.create_queue("private$/tx", QueueSettings(transactional=True)))

    def run(self, coroutine):  # type: ignore[no-untyped-def]
        return self.loop.run_until_complete(coroutine)

    def _open(self) -> None:
        self.store = MessageStore.open(self.root, OPTIONS)
        self.store.start(self.loop)
        self.qm = QueueManager(self.store, GUID)
        self.run(self.qm.open())
        self.txs = Transactions(self.qm)
        self.run(self.txs.restore_prepared())

    def _body(self) -> bytes:
        self.counter += 1
        return b"m%d" % self.counter

    @rule(queue=st.sampled_from(QUEUES), fresh=st.booleans())
    def send(self, queue: str, fresh: bool) -> None:
        body = self._body()
        props = MessageProperties(priority=3)
        self.run(self.qm.send(queue, body, props, transaction=None, fresh=fresh))
        if not fresh:  # the caller's properties are left as they were
            assert props == MessageProperties(priority=3)
        self.model[queue].append(body)

    @rule(queue=st.sampled_from(QUEUES), count=st.integers(1, 3))
    def receive(self, queue: str, count: int) -> None:
        got = self.run(self.qm.receive(queue, max_messages=count, wait_s=0))
        held_bodies = {b for items in self.held.values() for q, _, b in items if q == queue}
        free = [b for b in self.model[queue] if b not in held_bodies]
        assert [m.body for m in got] == free[:count]
        for message in got:
            self.model[queue].remove(message.body)

    @precondition(lambda self: len(self.held) < 3)
    @rule()
    def begin(self) -> None:
        tx = self.txs.begin(OPEN)
        self.held[tx.id] = []
        self.pending[tx.id] = []

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def tx_send(self, data: st.DataObject) -> None:
        tx = data.draw(st.sampled_from(sorted(self.held)))
        body = self._body()
        self.txs.send(tx, OPEN, "private$/tx", body, MessageProperties())
        self.pending[tx].append(body)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def tx_receive(self, data: st.DataObject) -> None:
        tx = data.draw(st.sampled_from(sorted(self.held)))
        held_bodies = {b for items in self.held.values() for _, _, b in items}
        free = [b for b in self.model["private$/tx"] if b not in held_bodies]
        # Nothing to take but its own (not yet visible) sends: the documented refusal.
        refused = not free and bool(self.pending[tx])
        try:
            got = self.run(self.txs.receive(tx, OPEN, "private$/tx", max_messages=1,
                                            wait_s=0))
        except QueueError as exc:
            assert refused, exc
            assert (exc.status_hint, exc.type_slug) == (409, "MQ_ERROR_TRANSACTION_USAGE"), exc
            return
        assert not refused, f"receiving only its own sends gave {got}"
        assert [m.body for m in got] == free[:1]
        for message in got:
            self.held[tx].append(("private$/tx", 0, message.body))

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data(), commit=st.booleans())
    def finish(self, data: st.DataObject, commit: bool) -> None:
        tx = data.draw(st.sampled_from(sorted(self.held)))
        if commit:
            self.run(self.txs.commit(tx, OPEN))
            for queue, _, body in self.held[tx]:
                self.model[queue].remove(body)
            self.model["private$/tx"].extend(self.pending[tx])
        else:
            self.run(self.txs.abort(tx, OPEN))
        del self.held[tx]
        del self.pending[tx]

    @rule()
    def restart(self) -> None:
        self.loop.run_until_complete(asyncio.sleep(0))
        self.store.close()
        self.held.clear()  # active transactions do not survive: their receives come back
        self.pending.clear()
        self._open()

    @invariant()
    def queues_match_the_model(self) -> None:
        held_bodies = {b for items in self.held.values() for _, _, b in items}
        for queue in QUEUES:
            # What open transactions received is invisible to browsing and peeking alike.
            free = [b for b in self.model[queue] if b not in held_bodies]
            messages, _ = self.qm.browse(queue, after=0, limit=1000)
            assert [m.body for m in messages] == free, queue
            head = self.qm.peek(queue)
            assert (head.body if head else None) == (free[0] if free else None), queue

    def teardown(self) -> None:
        if not self.store.closed:
            self.store.close()
        self.loop.close()
        shutil.rmtree(self.root, ignore_errors=True)


async def test_a_transaction_receiving_only_its_own_sends_is_refused(tmp_path: Path) -> None:
    """The refusal the model accepts, every time (the model reaches it only by chance)."""
    store = MessageStore.open(tmp_path, OPTIONS)
    store.start(asyncio.get_running_loop())
    try:
        qm = QueueManager(store, GUID)
        await qm.open()
        await qm.create_queue("private$/tx", QueueSettings(transactional=True))
        txs = Transactions(qm)
        tx = txs.begin(OPEN)
        txs.send(tx.id, OPEN, "private$/tx", b"mine", MessageProperties())
        with pytest.raises(QueueError) as refused:
            await txs.receive(tx.id, OPEN, "private$/tx", max_messages=1, wait_s=0)
        assert (refused.value.status_hint, refused.value.type_slug) == (
            409, "MQ_ERROR_TRANSACTION_USAGE")
        assert qm.peek("private$/tx") is None  # and its send is still not visible
    finally:
        store.close()


QueueManagerModel.TestCase.settings = settings(max_examples=25, stateful_step_count=30,
                                               deadline=None)
test_queue_manager_matches_the_model = QueueManagerModel.TestCase
