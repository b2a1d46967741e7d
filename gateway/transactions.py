"""Explicit transactions (seed 002): begin, send, receive, prepare, commit, abort.

Rules:
- Sends are held in memory (bounded) and become visible together, in send order, at commit —
  or never. A transaction cannot see (so cannot receive) what it sent.
- A receive reserves the messages; commit removes them, abort puts them back where they were
  (by sequence, not at the tail).
- Prepare makes everything durable but invisible (the store's two-phase state); a prepared
  transaction survives a restart until it is committed or aborted, and never times out.
- An active transaction idle longer than its timeout is aborted.
"""

from __future__ import annotations

import asyncio
import enum
import time
from dataclasses import dataclass, field, replace

from gateway.errors import ProblemError
from gateway.logs import server_log
from gateway.msmq.message import MessageProperties, compose_id, encode_payload
from gateway.queue_manager import Queue, QueueManager, ReceivedMessage
from gateway.store_errors import store_call
from store.records import SendSpec, StoredRecord

__all__ = ["Transactions", "Transaction", "TxState"]


class TxState(enum.Enum):
    ACTIVE = "active"
    PREPARED = "prepared"


@dataclass(slots=True)
class Transaction:
    id: str
    tx_id: int
    expires_at: float
    state: TxState = TxState.ACTIVE
    sends: list[tuple[Queue, MessageProperties, bytes]] = field(default_factory=list)
    send_bytes: int = 0
    receives: list[tuple[Queue, StoredRecord]] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    def summary(self) -> dict[str, object]:
        return {"id": self.id, "state": self.state.value,
                "expires_at": None if self.state is TxState.PREPARED else _iso(self.expires_at),
                "sends": len(self.sends), "receives": len(self.receives)}


def _iso(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))


class Transactions:
    """Open transactions of one queue manager."""

    def __init__(self, qm: QueueManager, *, idle_timeout_s: float = 60.0,
                 open_max: int = 10_000, sends_max: int = 10_000,
                 bytes_max: int = 64 << 20) -> None:
        self.qm = qm
        self.idle_timeout_s = idle_timeout_s
        self.open_max = open_max
        self.sends_max = sends_max
        self.bytes_max = bytes_max
        self._open: dict[str, Transaction] = {}

    def restore_prepared(self) -> None:
        """Prepared transactions found by recovery: their receives stay reserved."""
        for tx_id in sorted(self.qm.store.prepared):
            tx = Transaction(f"tx-{tx_id}", tx_id, 0.0, TxState.PREPARED)
            for record in self.qm.store.prepared_receives(tx_id):
                queue = self.qm.queue_by_id(record.queue_id)
                self.qm.hold(queue, record)
                tx.receives.append((queue, record))
            self._open[tx.id] = tx

    def begin(self) -> Transaction:
        if len(self._open) >= self.open_max:
            raise ProblemError(503, f"{self.open_max} transactions are open",
                               type_slug="too-many-transactions", headers={"Retry-After": "1"})
        tx_id = self.qm.store.reserve_tx_id()
        tx = Transaction(f"tx-{tx_id}", tx_id, time.time() + self.idle_timeout_s)
        self._open[tx.id] = tx
        return tx

    def get(self, tx_id: str) -> Transaction:
        tx = self._open.get(tx_id)
        if tx is None:
            raise ProblemError(404, f"no open transaction {tx_id!r}",
                               type_slug="MQ_ERROR_TRANSACTION_USAGE")
        return tx

    def all(self) -> list[Transaction]:
        return sorted(self._open.values(), key=lambda t: t.tx_id)

    def _active(self, tx_id: str) -> Transaction:
        tx = self.get(tx_id)
        if tx.state is not TxState.ACTIVE:
            raise ProblemError(409, f"transaction {tx_id} is {tx.state.value}",
                               type_slug="MQ_ERROR_TRANSACTION_USAGE")
        tx.expires_at = time.time() + self.idle_timeout_s
        return tx

    def send(self, tx_id: str, name: str, body: bytes, properties: MessageProperties
             ) -> tuple[Transaction, int]:
        """Hold a send until commit; returns its position in the transaction."""
        tx = self._active(tx_id)
        queue = self.qm.check_send(name, transactional=True)
        if len(tx.sends) >= self.sends_max or tx.send_bytes + len(body) > self.bytes_max:
            raise ProblemError(413, f"a transaction holds at most {self.sends_max} messages "
                               f"and {self.bytes_max} bytes", type_slug="transaction-too-large")
        tx.sends.append((queue, properties, body))
        tx.send_bytes += len(body)
        return tx, len(tx.sends) - 1

    def send_remote(self, tx_id: str, outgoing: Queue, url: str, body: bytes,
                    properties: MessageProperties) -> tuple[Transaction, int]:
        """Hold a send to a remote queue (into its outgoing queue, which its link drains once
        the transaction commits); returns its position in the transaction."""
        tx = self._active(tx_id)
        if len(tx.sends) >= self.sends_max or tx.send_bytes + len(body) > self.bytes_max:
            raise ProblemError(413, f"a transaction holds at most {self.sends_max} messages "
                               f"and {self.bytes_max} bytes", type_slug="transaction-too-large")
        props = replace(properties, extra={**properties.extra, "srmp_to": url})
        tx.sends.append((outgoing, props, body))
        tx.send_bytes += len(body)
        return tx, len(tx.sends) - 1

    async def receive(self, tx_id: str, name: str, *, max_messages: int, wait_s: float
                      ) -> list[ReceivedMessage]:
        tx = self._active(tx_id)
        queue = self.qm.queue(name)
        if not queue.settings.transactional:
            raise ProblemError(400, f"{queue.path.display!r} is not transactional: receive "
                               "outside the transaction", type_slug="MQ_ERROR_TRANSACTION_USAGE")
        records = await self.qm.wait_and_take(queue, max_messages, wait_s)
        if not records and any(q is queue for q, _, _ in tx.sends):
            raise ProblemError(409, "a transaction cannot receive a message it sent (its "
                               "sends become visible at commit)",
                               type_slug="MQ_ERROR_TRANSACTION_USAGE")
        tx.receives.extend((queue, record) for record in records)
        return [self.qm.decode(queue, record) for record in records]

    def _specs(self, tx: Transaction) -> tuple[list[SendSpec], list[Queue]]:
        now_ms = int(time.time() * 1000)
        specs: list[SendSpec] = []
        targets: list[Queue] = []
        for queue, props, body in tx.sends:
            stamped = replace(props, transactional=True, priority=0, recoverable=True,
                              arrived_at_ms=now_ms, sent_at_ms=props.sent_at_ms or now_ms,
                              source_qm=props.source_qm or self.qm.qm_guid)
            specs.append(SendSpec(queue.queue_id, encode_payload(stamped, body),
                                  expires_ms=stamped.receive_by_ms))
            targets.append(queue)
        for queue, record in tx.receives:  # queue journals keep what was received
            journal = self.qm.journal_queue(queue)
            if journal is not None:
                message = self.qm.decode(queue, record)
                copy = replace(message.properties, message_id=message.message_id)
                specs.append(SendSpec(journal.queue_id, encode_payload(copy, message.body)))
                targets.append(journal)
        return specs, targets

    async def prepare(self, tx_id: str) -> Transaction:
        tx = self._active(tx_id)
        async with tx.lock:
            specs, _ = self._specs(tx)
            await store_call(self.qm.store.prepare(
                specs, [r for _, r in tx.receives], tx_id=tx.tx_id))
            tx.state = TxState.PREPARED
        return tx

    async def commit(self, tx_id: str) -> list[dict[str, object]]:
        tx = self.get(tx_id)
        async with tx.lock:
            removes = [r for _, r in tx.receives]
            if tx.state is TxState.PREPARED:
                records = await store_call(self.qm.store.commit_prepared(tx.tx_id))
            else:
                specs, _ = self._specs(tx)
                records = await store_call(self.qm.store.commit(specs, removes,
                                                                        tx_id=tx.tx_id))
            del self._open[tx.id]
        for queue, record in tx.receives:
            self.qm.release(queue, record, removed=True)
        made = []
        for record in records:
            queue = self.qm.queue_by_id(record.queue_id)
            self.qm.arrived(queue, record)
            if not queue.path.journal:
                # A remote copy is shown by its destination, not its outgoing queue.
                shown = queue.info.properties.get("destination") or queue.path.display
                made.append({"id": compose_id(self.qm.qm_guid, record.queue_id, record.seq),
                             "queue": shown, "seq": record.seq})
        return made

    async def abort(self, tx_id: str) -> None:
        tx = self.get(tx_id)
        async with tx.lock:
            if tx.state is TxState.PREPARED:
                await store_call(self.qm.store.abort_prepared(tx.tx_id))
            self._open.pop(tx.id, None)
        for queue, record in tx.receives:
            self.qm.release(queue, record, removed=False)

    async def reap(self) -> None:
        """Abort active transactions idle past their timeout (runs until cancelled)."""
        while True:
            await asyncio.sleep(min(1.0, self.idle_timeout_s / 4))
            now = time.time()
            for tx in [t for t in self._open.values()
                       if t.state is TxState.ACTIVE and t.expires_at < now]:
                server_log.info("transaction %s idle past its timeout: aborted", tx.id)
                try:
                    await self.abort(tx.id)
                except ProblemError:
                    continue

