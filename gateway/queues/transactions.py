"""Explicit transactions (docs/rest-api.md §Transactions): begin, send, receive, prepare,
commit, abort.

Rules:
- Sends are held in memory (bounded) and become visible together, in send order, at commit —
  or never. A transaction cannot see (so cannot receive) what it sent.
- A receive reserves the messages; commit removes them, abort puts them back where they were
  (by sequence, not at the tail).
- Prepare makes everything durable but invisible (the store's two-phase state); a prepared
  transaction survives a restart until it is committed or aborted, and never times out.
- An active transaction idle longer than its timeout is aborted.
- A transaction belongs to the principal that began it. Anyone else is told it does not
  exist (404, the answer to an unknown id); the admin may also see, commit and abort it, but
  only its owner sends, receives or prepares in it. Ids are 128 random bits, so they cannot
  be guessed, and a prepared transaction keeps its id and owner across restarts
  (gateway.queues.tx_names).
- Limits: transactions open at once (in all and per principal), messages and bytes per
  transaction, and bodies held in memory by active ones (in all and per principal; a
  prepared transaction's are on disk and dropped from memory). A message the store cannot
  hold as one record is refused when it is sent, not at commit.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import secrets
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace

from gateway.auth.principal import Principal
from gateway.logs import server_log
from gateway.msmq.message import MessageProperties, compose_id, encode_payload
from gateway.queues import sending
from gateway.queues.errors import (
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    QueueError,
    StorageFull,
    TooLarge,
    TooMany,
    Unavailable,
)
from gateway.queues.heap import TRIM_AFTER_BYTES, HeapTrimmer
from gateway.queues.manager import Park, Queue, QueueManager, ReceivedMessage
from gateway.queues.store_errors import store_call
from gateway.queues.tx_names import Named, PreparedNames
from store.framing import max_payload
from store.quota import Charge
from store.records import StoredRecord

__all__ = ["Transactions", "Transaction", "TxState", "owner_key"]

# Seconds a client is told to wait when the bodies held by open transactions are at a cap.
PENDING_RETRY_AFTER_S = 5


def owner_key(principal: Principal) -> str:
    """Who owns what a principal begins: partners by name, the admin and the open gateway's
    user apart (a partner may not take their place by being named like them)."""
    if principal.admin:
        return "admin"
    if principal.open:
        return "open"
    return "partner:" + principal.name


def _owner_name(key: str | None) -> str | None:
    if key is None or not key.startswith("partner:"):
        return {"admin": "admin", "open": "anonymous"}.get(key or "")
    return key.removeprefix("partner:")


def _new_id() -> str:
    return "tx-" + secrets.token_urlsafe(16)


class TxState(enum.Enum):
    ACTIVE = "active"
    PREPARED = "prepared"


@dataclass(slots=True)
class Transaction:
    id: str
    tx_id: int
    expires_at: float
    state: TxState = TxState.ACTIVE
    owner: str | None = None  # owner_key; None (restored without its entry): the admin's
    # Held in memory while active, dropped at prepare (then in the store); ``sent`` counts
    # every send, held or not.
    sends: list[tuple[Queue, MessageProperties, bytes]] = field(default_factory=list)
    send_bytes: int = 0
    sent: int = 0
    receives: list[tuple[Queue, StoredRecord]] = field(default_factory=list)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # The queues its sends go to (held or prepared): none of them is deleted before it ends.
    targets: set[int] = field(default_factory=set)
    # When it was prepared (Unix seconds): until its coordinator commits or aborts it, it holds
    # what it received and the queues' ``next`` (range readers wait for its outcome). Its age
    # is measured on the monotonic clock (``prepared_mono``): a wall clock set back does not
    # make it young.
    prepared_at: float | None = None
    prepared_mono: float = 0.0

    def summary(self) -> dict[str, object]:
        return {"id": self.id, "state": self.state.value, "owner": _owner_name(self.owner),
                "expires_at": None if self.state is TxState.PREPARED else _iso(self.expires_at),
                "prepared_at": None if self.prepared_at is None else _iso(self.prepared_at),
                "sends": self.sent, "receives": len(self.receives)}


def _iso(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))


class Transactions:
    """Open transactions of one queue manager."""

    def __init__(self, qm: QueueManager, *, idle_timeout_s: float = 60.0,
                 open_max: int = 10_000, open_max_per_principal: int = 1000,
                 sends_max: int = 10_000, bytes_max: int = 64 << 20,
                 pending_bytes_max: int = 512 << 20,
                 pending_bytes_max_per_principal: int = 128 << 20) -> None:
        self.qm = qm
        self.idle_timeout_s = idle_timeout_s
        self.open_max = open_max
        self.open_max_per_principal = open_max_per_principal
        self.sends_max = sends_max
        self.bytes_max = bytes_max
        self.pending_bytes_max = pending_bytes_max
        self.pending_bytes_max_per_principal = pending_bytes_max_per_principal
        self.payload_max = max_payload(qm.store.options.segment_size)
        self._open: dict[str, Transaction] = {}
        self._open_by_owner: dict[str | None, int] = {}
        self._pending = 0  # bytes of bodies held by active transactions
        self._pending_by_owner: dict[str | None, int] = {}
        self._names = PreparedNames(qm.store.data_dir.root)
        self._trimmer = HeapTrimmer()
        qm.sent_to_in_transactions = self._targeted  # a queue they send to is not deleted

    def names_held(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Around a backup: ended transactions keep their entries (gateway.queues.tx_names)."""
        return self._names.holding()

    async def restore_prepared(self, partners: Collection[str] = ()) -> None:
        """Prepared transactions found by recovery, with the ids and owners they had (one
        without a recorded entry gets a new id, for the admin to resolve); their receives
        stay reserved. ``partners``: the configured partners' names; an owner no longer
        among them is logged (only the admin can resolve its transactions)."""
        loop = asyncio.get_running_loop()
        names = await loop.run_in_executor(None, self._names.load)
        kept: dict[int, Named] = {}
        found_at = time.time()
        for tx_id in sorted(self.qm.store.prepared):
            named = names.get(tx_id)
            if named is None or named.id in self._open:
                why = "no recorded id" if named is None else "the recorded id of another"
                named = Named(self._unused_id(), None, found_at)
                server_log.warning("prepared transaction %d has %s: it is %s, for the admin "
                                   "to commit or abort", tx_id, why, named.id)
            elif named.prepared_at is None or named.prepared_at > found_at:
                if named.prepared_at is None:  # recorded before times were
                    server_log.info("transaction %s has no recorded time of preparation: its "
                                    "age counts from this start", named.id)
                else:  # the clock went back, or a bad entry
                    server_log.warning("transaction %s was prepared at %s, after now: its age "
                                       "counts from this start", named.id,
                                       _iso(named.prepared_at))
                named = Named(named.id, named.owner, found_at)
            partner = (named.owner or "").removeprefix("partner:")
            if named.owner != partner and partner not in partners:
                server_log.warning("prepared transaction %s belongs to partner %r, which is "
                                   "not configured: only the admin can commit or abort it",
                                   named.id, partner)
            kept[tx_id] = named
            tx = Transaction(named.id, tx_id, 0.0, TxState.PREPARED, owner=named.owner,
                             prepared_at=named.prepared_at)
            tx.prepared_mono = time.monotonic() - (found_at - (named.prepared_at or found_at))
            tx.targets = {r.queue_id for r in self.qm.store.prepared[tx_id].records}
            tx.sent = sum(1 for r in self.qm.store.prepared[tx_id].records  # not the journal
                          if (q := self.qm.queue_by_id_or_none(r.queue_id)) is not None
                          and not (q.path.journal or q.path.system))
            for record in self.qm.store.prepared_receives(tx_id):
                queue = self.qm.queue_by_id(record.queue_id)
                self.qm.hold(queue, record)
                tx.receives.append((queue, record))
            self._add(tx)
        if kept != names:  # entries of ended transactions dropped, new ones recorded
            try:
                await self._names.replace(kept)
            except OSError as exc:
                server_log.warning("%s not rewritten: %s", self._names.path, exc)

    def begin(self, principal: Principal) -> Transaction:
        owner = owner_key(principal)
        if len(self._open) >= self.open_max:
            raise Unavailable(f"{self.open_max} transactions are open "
                              "(transactions.open_max)",
                              type_slug="too-many-transactions", retry_after_s=1)
        if self._open_by_owner.get(owner, 0) >= self.open_max_per_principal:
            raise TooMany(f"{principal.name} has {self.open_max_per_principal} "
                          "transactions open (transactions.open_max_per_principal): "
                          "commit or abort one first", type_slug="too-many-transactions",
                          retry_after_s=1)
        tx_id = self.qm.store.reserve_tx_id()
        tx = Transaction(self._unused_id(), tx_id, time.time() + self.idle_timeout_s,
                         owner=owner)
        self._add(tx)
        return tx

    def _unused_id(self) -> str:
        while True:  # a repeat of 128 random bits is not expected; it would not be served
            tx_id = _new_id()
            if tx_id not in self._open:
                return tx_id

    def get(self, tx_id: str, principal: Principal, *, join: bool = False) -> Transaction:
        """The transaction, if ``principal`` may see it (and, with ``join``, prepare it or
        send and receive in it).

        Raises: QueueError 404 (unknown, ended, or another principal's: the same answer);
        403 for the admin joining another principal's transaction."""
        tx = self._open.get(tx_id)
        if tx is not None and tx.owner == owner_key(principal):
            return tx
        if tx is not None and (principal.admin or principal.open):
            if not join:
                return tx
            owner = _owner_name(tx.owner) or "nobody (restored without its owner)"
            raise Forbidden(f"transaction {tx_id} belongs to {owner}: only its "
                            "owner prepares it or sends and receives in it; the admin "
                            "may commit or abort it", type_slug="MQ_ERROR_ACCESS_DENIED")
        raise NotFound(f"no open transaction {tx_id!r}",
                       type_slug="MQ_ERROR_TRANSACTION_USAGE")

    def visible(self, principal: Principal) -> list[Transaction]:
        """The principal's own transactions; all of them for the admin."""
        owner = owner_key(principal)
        return sorted((t for t in self._open.values()
                       if principal.admin or principal.open or t.owner == owner),
                      key=lambda t: t.tx_id)

    def census(self) -> tuple[int, int, float]:
        """(active, prepared, the oldest prepared one's age in seconds, 0 with none): what
        an operator watches, since a prepared transaction waits for its coordinator for
        ever."""
        prepared = [t.prepared_mono for t in self._open.values()
                    if t.state is TxState.PREPARED]
        return (len(self._open) - len(prepared), len(prepared),
                max(0.0, time.monotonic() - min(prepared)) if prepared else 0.0)

    def _targeted(self, queue_id: int) -> bool:
        return any(queue_id in tx.targets for tx in self._open.values())

    def _add(self, tx: Transaction) -> None:
        self._open[tx.id] = tx
        self._open_by_owner[tx.owner] = self._open_by_owner.get(tx.owner, 0) + 1

    def _remove(self, tx: Transaction) -> None:
        if self._open.pop(tx.id, None) is None:
            return
        left = self._open_by_owner.get(tx.owner, 0) - 1
        if left > 0:
            self._open_by_owner[tx.owner] = left
        else:
            self._open_by_owner.pop(tx.owner, None)

    def _drop_bodies(self, tx: Transaction) -> int:
        """Forget the bodies a transaction holds (ended, or prepared into the store), so
        that nothing keeps them; returns how many bytes were held."""
        held = tx.send_bytes
        tx.sends = []
        tx.send_bytes = 0
        self._pending -= held
        left = self._pending_by_owner.get(tx.owner, 0) - held
        if left > 0:
            self._pending_by_owner[tx.owner] = left
        else:
            self._pending_by_owner.pop(tx.owner, None)
        return held

    async def _give_back(self, held: int) -> None:
        if held >= TRIM_AFTER_BYTES:
            await self._trimmer.trim()

    def _active(self, tx_id: str, principal: Principal) -> Transaction:
        tx = self.get(tx_id, principal, join=True)
        if tx.state is not TxState.ACTIVE:
            raise Conflict(f"transaction {tx_id} is {tx.state.value}",
                           type_slug="MQ_ERROR_TRANSACTION_USAGE")
        if tx.lock.locked():  # what it holds is being written: a send now would be lost
            raise Conflict(f"transaction {tx_id} is being prepared, committed or "
                           "aborted", type_slug="MQ_ERROR_TRANSACTION_USAGE")
        tx.expires_at = time.time() + self.idle_timeout_s
        return tx

    def send(self, tx_id: str, principal: Principal, name: str, body: bytes,
             properties: MessageProperties) -> tuple[Transaction, int]:
        """Hold a send until commit; returns its position in the transaction."""
        tx, held = self.send_many(tx_id, principal, [name], [], body, properties)
        return tx, held[0]

    def send_many(self, tx_id: str, principal: Principal, names: Sequence[str],
                  remote: Sequence[tuple[Queue, str, MessageProperties]], body: bytes,
                  properties: MessageProperties) -> tuple[Transaction, list[int]]:
        """Hold one body for several local queues and remote ones, all or none. A remote
        one goes into its outgoing queue (``remote``: the queue, the destination URL and
        the message's properties), which its link drains once the transaction commits.
        Returns the sends' positions in the transaction.

        Raises: QueueError 413 (over the transaction's limits, or a message the store
        cannot hold), 507 with Retry-After (the bodies held by open transactions, the
        principal's or all, are at their cap); then nothing is held."""
        tx = self._active(tx_id, principal)
        targets = [(self.qm.check_send(name, transactional=True), properties)
                   for name in names]
        targets += [(outgoing, replace(props, extra={**props.extra, "srmp_to": url}))
                    for outgoing, url, props in remote]
        self._check_room(tx, [props for _, props in targets], len(body))
        return tx, [self._hold(tx, queue, props, body) for queue, props in targets]

    def _check_room(self, tx: Transaction, copies: list[MessageProperties], size: int
                    ) -> None:
        count, total = len(copies), size * len(copies)
        if (len(tx.sends) + count > self.sends_max
                or tx.send_bytes + total > self.bytes_max):
            raise TooLarge(f"a transaction holds at most {self.sends_max} messages "
                           f"and {self.bytes_max} bytes", type_slug="transaction-too-large")
        now_ms = int(time.time() * 1000)
        header = max((len(encode_payload(self._stamp(p, now_ms), b"")) for p in copies),
                     default=0)
        stored = header + size
        if stored > self.payload_max:
            raise TooLarge(f"message of {stored} bytes with its properties is larger "
                           f"than the largest record the store holds ({self.payload_max} "
                           "bytes, set by store.segment_size)",
                           type_slug="MQ_ERROR_INSUFFICIENT_RESOURCES")
        mine = self._pending_by_owner.get(tx.owner, 0)
        if mine + total > self.pending_bytes_max_per_principal:
            raise StorageFull(f"the open transactions of {_owner_name(tx.owner)} hold "
                              f"{mine} bytes; {total} more would pass "
                              "transactions.pending_bytes_max_per_principal "
                              f"({self.pending_bytes_max_per_principal} bytes): commit or "
                              "abort first, or retry later",
                              type_slug="transaction-memory-full",
                              retry_after_s=PENDING_RETRY_AFTER_S)
        if self._pending + total > self.pending_bytes_max:
            raise StorageFull(f"open transactions hold {self._pending} bytes; {total} "
                              "more would pass transactions.pending_bytes_max "
                              f"({self.pending_bytes_max} bytes): retry later",
                              type_slug="transaction-memory-full",
                              retry_after_s=PENDING_RETRY_AFTER_S)

    def _hold(self, tx: Transaction, queue: Queue, props: MessageProperties, body: bytes
              ) -> int:
        size = len(body)
        tx.sends.append((queue, props, body))
        tx.targets.add(queue.queue_id)
        tx.send_bytes += size
        tx.sent += 1
        self._pending += size
        self._pending_by_owner[tx.owner] = self._pending_by_owner.get(tx.owner, 0) + size
        return tx.sent - 1

    def _stamp(self, props: MessageProperties, now_ms: int) -> MessageProperties:
        """The properties a transactional send is stored with."""
        return replace(props, transactional=True, priority=0, recoverable=True,
                       arrived_at_ms=now_ms, sent_at_ms=props.sent_at_ms or now_ms,
                       source_qm=props.source_qm or self.qm.qm_guid)

    async def receive(self, tx_id: str, principal: Principal, name: str, *,
                      max_messages: int, wait_s: float, park: Park | None = None,
                      gone: Callable[[], bool] | None = None) -> list[ReceivedMessage]:
        """``gone``: the caller can no longer be answered (QueueManager.wait_and_take)."""
        tx = self._active(tx_id, principal)
        queue = self.qm.queue(name)
        if not queue.settings.transactional:
            raise BadRequest(f"{queue.path.display!r} is not transactional: receive "
                             "outside the transaction", type_slug="MQ_ERROR_TRANSACTION_USAGE")

        def ended() -> bool:
            """Committed, aborted, expired or being ended while the receive waited: it may
            take nothing more (a message reserved for it would stay reserved for nobody)."""
            return (tx.state is not TxState.ACTIVE or tx.lock.locked()
                    or self._open.get(tx_id) is not tx)

        records = await self.qm.wait_and_take(
            queue, max_messages, wait_s, park,
            lambda: ended() or (gone is not None and gone()))
        if ended():  # then nothing was taken: the look comes before every take
            raise Conflict(f"transaction {tx_id} ended while the receive waited",
                           type_slug="MQ_ERROR_TRANSACTION_USAGE")
        if not records and any(q is queue for q, _, _ in tx.sends):
            raise Conflict("a transaction cannot receive a message it sent (its "
                           "sends become visible at commit)",
                           type_slug="MQ_ERROR_TRANSACTION_USAGE")
        tx.receives.extend((queue, record) for record in records)
        return [self.qm.decode(queue, record) for record in records]

    def _specs(self, tx: Transaction) -> list[sending.Send]:
        now_ms = int(time.time() * 1000)
        specs: list[sending.Send] = []
        for queue, props, body in tx.sends:
            # In commit order (priority 0) and durable, as a transactional message is.
            specs.append(sending.message(queue, self._stamp(props, now_ms), body, priority=0,
                                         express=False))
        charges: list[Charge] = []
        for queue, record in tx.receives:  # queue journals keep what was received
            journal = self.qm.journal_queue(queue)
            if journal is not None:
                specs += self.qm.journal_copies.copies(
                    queue, journal, [self.qm.decode(queue, record)], charges)
        return specs

    async def prepare(self, tx_id: str, principal: Principal) -> Transaction:
        tx = self._active(tx_id, principal)
        async with tx.lock:
            self._still_open(tx)
            specs = self._specs(tx)
            try:  # recorded first: a prepared transaction always has its id and owner
                prepared_at = time.time()
                await self._names.put(tx.tx_id, Named(tx.id, tx.owner, prepared_at))
            except OSError as exc:  # the path and the details are the log's, not a partner's
                server_log.error("transaction %s not prepared: %s", tx.id, exc)
                raise Unavailable("the transaction's id and owner cannot be recorded ("
                                  f"{exc.strerror or type(exc).__name__}): not prepared",
                                  type_slug="MQ_ERROR_SERVICE_NOT_AVAILABLE",
                                  retry_after_s=5) from exc
            await sending.prepare(self.qm.store, specs, [r for _, r in tx.receives],
                                  tx_id=tx.tx_id)
            del specs  # its payloads copy the bodies: gone before the heap is trimmed
            tx.state = TxState.PREPARED
            tx.prepared_at, tx.prepared_mono = prepared_at, time.monotonic()
            held = self._drop_bodies(tx)  # in the store now
        await self._give_back(held)
        return tx

    def _still_open(self, tx: Transaction) -> None:
        """Raises: QueueError 404 when ``tx`` ended while its caller waited for its lock."""
        if self._open.get(tx.id) is not tx:
            raise NotFound(f"no open transaction {tx.id!r}",
                           type_slug="MQ_ERROR_TRANSACTION_USAGE")

    async def commit(self, tx_id: str, principal: Principal) -> list[dict[str, object]]:
        tx = self.get(tx_id, principal)
        async with tx.lock:
            self._still_open(tx)
            removes = [r for _, r in tx.receives]
            if tx.state is TxState.PREPARED:
                records = await sending.commit_prepared(self.qm.store, tx.tx_id)
            else:
                specs = self._specs(tx)
                records = await sending.commit(self.qm.store, specs, removes=removes,
                                               tx_id=tx.tx_id)
                del specs  # its payloads copy the bodies: gone before the heap is trimmed
            self._remove(tx)
            held = self._drop_bodies(tx)
        await self._names.drop(tx.tx_id)
        for queue, record in tx.receives:
            self.qm.release(queue, record, removed=True)
            self.qm.events.count(queue.path.display, "received")
        made = []
        for record in records:
            queue = self.qm.queue_by_id(record.queue_id)
            self.qm.arrived(queue, record)
            if not queue.path.journal:
                # A remote copy is shown by its destination, not its outgoing queue.
                shown = queue.info.properties.get("destination") or queue.path.display
                # A remote copy carries its wire id (gateway.queues.wire_ids); a local one's is
                # composed from where it is.
                kept = (self.qm.decode(queue, record).properties.message_id
                        if "destination" in queue.info.properties else "")
                made.append({"id": kept or compose_id(self.qm.qm_guid, record.queue_id,
                                                      record.seq),
                             "queue": shown, "seq": record.seq})
        await self._give_back(held)
        return made

    async def abort(self, tx_id: str, principal: Principal) -> None:
        await self._abort(self.get(tx_id, principal))

    async def _abort(self, tx: Transaction) -> None:
        async with tx.lock:
            self._still_open(tx)
            if tx.state is TxState.PREPARED:
                await store_call(self.qm.store.abort_prepared(tx.tx_id))
            self._remove(tx)
            held = self._drop_bodies(tx)
        await self._names.drop(tx.tx_id)
        for queue, record in tx.receives:
            self.qm.release(queue, record, removed=False)
        await self._give_back(held)

    async def reap(self) -> None:
        """Abort active transactions idle past their timeout (runs until cancelled)."""
        while True:
            await asyncio.sleep(min(1.0, self.idle_timeout_s / 4))
            now = time.time()
            for tx in [t for t in self._open.values()
                       if t.state is TxState.ACTIVE and t.expires_at < now]:
                server_log.info("transaction %s idle past its timeout: aborted", tx.id)
                try:
                    await self._abort(tx)
                except QueueError:
                    continue

