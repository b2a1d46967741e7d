"""Registered range consumers (Spark): per queue, who reads by sequence and how far each has
committed, and the retention that follows from it.

The contract (docs/spark.md): a ``[from, to)`` read below the queue's
stable head returns the same records every time; nothing at or after the lowest committed
position of the registered consumers is removed; a read below the queue's floor (what
retention or a purge removed) is refused with 410, never answered short. So while a queue has
registered consumers it behaves as a log: receives are refused (409), expiry leaves it alone,
and only a consumer's commit (retention) or an operator's purge removes messages.

State lives in an internal queue, one small JSON record per consumer and one per queue floor,
each replaced in one atomic store commit with the change it records.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import TypeVar

from gateway.logs import server_log
from gateway.queues import sending
from gateway.queues.errors import BadRequest, Conflict, Gone, NotFound
from gateway.queues.internal import CONSUMERS_QUEUE
from gateway.queues.manager import Queue, QueueManager
from gateway.queues.state_records import StateQueue
from gateway.queues.store_errors import store_call
from gateway.range_wire import CONSUMER_NAME, CONSUMER_NAME_RULE
from store.records import SendSpec, StoredRecord

__all__ = ["RangeConsumers"]

CONSUMERS_PER_QUEUE_MAX = 64  # per queue and owner (a partner, or the admin's side)
_TRIM_CHUNK = 5000
K = TypeVar("K")  # records removed per store commit when retention catches up


@dataclass(slots=True)
class _Entry:
    value: int  # a consumer's committed position, or a queue's floor
    record: StoredRecord
    # Whose consumer it is (a partner's ``Principal.scope``); None: the admin's, an open
    # gateway's or the gateway's own (gateway.outbound.landing), and a floor's.
    owner: str | None = None


def _parse_entry(raw: bytes) -> tuple[int, str | None, int, str | None]:
    """(queue id, consumer name or None for a floor, position, owner) of one record.

    Raises:
        ValueError, KeyError, TypeError: not a record this module wrote.
    """
    doc = json.loads(raw)
    if not isinstance(doc, dict):
        raise TypeError("a consumer record is a JSON object")
    if "floor" in doc:
        return int(doc["queue_id"]), None, int(doc["floor"]), None
    owner = doc.get("owner")
    if owner is not None and not isinstance(owner, str):
        raise TypeError("a consumer's owner is a string")
    return int(doc["queue_id"]), str(doc["consumer"]), int(doc["position"]), owner


CONSUMERS_STATE = StateQueue(CONSUMERS_QUEUE, _parse_entry)


class RangeConsumers:
    """Consumers and floors of every queue; owns ``Queue.pin``."""

    def __init__(self, qm: QueueManager) -> None:
        self.qm = qm
        self.store = qm.store
        self.own = qm.internal(CONSUMERS_QUEUE)
        self._consumers: dict[int, dict[str, _Entry]] = {}
        self._floors: dict[int, _Entry] = {}
        self._stale: list[StoredRecord] = []
        self._lock = asyncio.Lock()
        # Retention runs behind the commits (a commit answers once its position is durable;
        # Spark waits for it in walCommit); one trim at a time, and never during a purge.
        self._trim_lock = asyncio.Lock()
        self._trims: set[asyncio.Task[None]] = set()
        for record, (queue_id, consumer, value, owner) in qm.quarantine.read(
                CONSUMERS_STATE, self.own.queue_id):
            if self.qm.queue_by_id_or_none(queue_id) is None:
                self._stale.append(record)
            elif consumer is None:
                self._keep(self._floors, queue_id, _Entry(value, record))
            else:
                self._keep(self._consumers.setdefault(queue_id, {}), consumer,
                           _Entry(value, record, owner))
        for queue_id in self._consumers:
            self._pin(self.qm.queue_by_id(queue_id))

    def _keep(self, table: dict[K, _Entry], key: K, entry: _Entry) -> None:
        older = table.get(key)
        if older is not None and older.value >= entry.value:
            self._stale.append(entry.record)
            return
        if older is not None:
            self._stale.append(older.record)
        table[key] = entry

    async def start(self) -> None:
        """Drop stale records and finish any retention a crash interrupted."""
        if self._stale:
            stale, self._stale = self._stale, []
            await store_call(self.store.remove(stale))
        for queue_id, floor in list(self._floors.items()):
            queue = self.qm.queue_by_id_or_none(queue_id)
            if queue is not None and queue.pin is not None:
                await self._trim(queue, floor.value)

    # ---- reading -------------------------------------------------------------------------

    def positions(self, queue: Queue, owner: str | None = None) -> dict[str, int]:
        """The positions of the consumers ``owner`` may see (None: all of them)."""
        return {name: e.value for name, e in self._consumers.get(queue.queue_id, {}).items()
                if _visible(e, owner)}

    def floor(self, queue: Queue) -> int:
        """The lowest sequence a range read may start at."""
        saved = self._floors.get(queue.queue_id)
        floor = saved.value if saved is not None else 1
        if queue.pin is None:  # nobody holds retention: what receives left is what there is
            floor = max(floor, self._lowest_live(queue))
        return floor

    def _lowest_live(self, queue: Queue) -> int:
        end = self.store.readable_end(queue.queue_id)
        lowest = self.store.first_records(queue.queue_id, 0, 1)  # not a walk of the queue
        return lowest[0].seq if lowest and lowest[0].seq < end else end

    def check_range(self, queue: Queue, start: int) -> int:
        """The floor, after refusing a range that starts below it (410, naming the range)."""
        if queue.pin is None and self.store.record(queue.queue_id, start) is not None:
            return start  # the first record is there: nothing below it matters
        floor = self.floor(queue)
        if start < floor:
            raise Gone(f"{queue.path.display}: sequences [{start}, {floor}) are gone (trimmed "
                f"by retention, a purge or receives); the oldest readable is {floor}",
                type_slug="range-trimmed", fields={"first": floor, "from": start})
        return floor

    def head(self, queue: Queue, owner: str | None = None) -> dict[str, object]:
        count = self.store.count(queue.queue_id)
        info = self.store.registry.get(queue.queue_id)
        return {"queue": queue.path.display, "first": self.floor(queue),
                # When the queue was created: one deleted and created again starts over.
                "created_ms": int(info.properties.get("created_ms", 0)) if info else 0,
                "next": self.store.readable_end(queue.queue_id),
                "consumers": self.positions(queue, owner), "messages": count,
                "average_bytes": self.store.queue_bytes(queue.queue_id) // count if count else 0}

    # ---- changing ------------------------------------------------------------------------

    async def register(self, queue: Queue, name: str, start: str | int,
                       owner: str | None = None) -> tuple[int, bool]:
        """(position, created). ``start``: ``earliest``, ``latest`` or a sequence; the new
        consumer is ``owner``'s (a partner's scope): only its owner and those who see every
        consumer (``owner`` None: the admin, an open gateway) see, commit or delete it.

        Raises:
            Conflict: the name is another's consumer on the queue (the names are the
                queue's), the queue has its most consumers, or ``start`` is beyond the
                queue's head.
            Gone: ``start`` is below what retention keeps.
        """
        self._check_name(name)
        async with self._lock:
            known = self._consumers.get(queue.queue_id, {})
            if name in known:
                if not _visible(known[name], owner):
                    raise Conflict(f"consumer name {name!r} on {queue.path.display} is "
                                   "another's: choose another name",
                                   type_slug="consumer-name-taken")
                return known[name].value, False
            # Each owner's own: one partner's consumers cannot leave another none.
            if sum(e.owner == owner for e in known.values()) >= CONSUMERS_PER_QUEUE_MAX:
                raise Conflict(f"{queue.path.display} already has "
                               f"{CONSUMERS_PER_QUEUE_MAX} consumers of yours",
                               type_slug="too-many-consumers")
            floor = self.floor(queue)
            end = self.store.readable_end(queue.queue_id)
            if start == "earliest":
                position = floor
            elif start == "latest":
                position = end
            else:
                position = int(start)
                if position < floor:
                    raise Gone(f"{queue.path.display}: sequence {position} is "
                               f"gone; the oldest readable is {floor}",
                               type_slug="range-trimmed", fields={"first": floor})
                if position > end:  # as a range or a commit beyond it: a conflict
                    raise Conflict(f"start {position} is beyond the queue's head {end}",
                                   type_slug="beyond-head", fields={"next": end})
            await self._save(queue, name, position, max(floor, self._saved_floor(queue)),
                             owner)
            server_log.info("range consumer %s registered on %s at %d", name,
                            queue.path.display, position)
            return position, True

    async def commit(self, queue: Queue, name: str, position: int,
                     owner: str | None = None) -> int:
        """Advance ``name`` to ``position`` (a lower one changes nothing: commits may arrive
        late) and trim what every registered consumer has passed; returns the position.
        Raises NotFound unless ``owner`` may see the consumer."""
        entry = self._entry(queue, name, owner)
        end = self.store.readable_end(queue.queue_id)
        if position > end:
            raise Conflict(f"position {position} is beyond the queue's head {end}",
                           type_slug="beyond-head", fields={"next": end})
        async with self._lock:
            entry = self._entry(queue, name, owner)
            if position <= entry.value:
                return entry.value
            others = [e.value for n, e in self._consumers[queue.queue_id].items() if n != name]
            previous = self._saved_floor(queue)
            floor = max(previous, min([position, *others]))
            await self._save(queue, name, position, floor, entry.owner)
        if floor > previous:
            task = asyncio.create_task(self._trim(queue, floor, previous),
                                       name=f"retention {queue.path.display}")
            self._trims.add(task)
            task.add_done_callback(self._trim_done)
        return position

    def _trim_done(self, task: asyncio.Task[None]) -> None:
        self._trims.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # The floor is durable: reads below it are 410 already, and the next start
            # finishes the removal.
            server_log.error("retention failed: %s", task.exception())

    async def settle(self) -> None:
        """Wait for the retention work started so far (tests, shutdown)."""
        while self._trims:
            await asyncio.gather(*list(self._trims), return_exceptions=True)

    async def unregister(self, queue: Queue, name: str, owner: str | None = None) -> None:
        """Raises NotFound unless ``owner`` may see the consumer."""
        entry = self._entry(queue, name, owner)
        async with self._lock:
            consumers = self._consumers[queue.queue_id]
            await store_call(self.store.commit([], removes=[entry.record]))
            del consumers[name]
            if not consumers:
                del self._consumers[queue.queue_id]
            self._pin(queue)
        server_log.info("range consumer %s unregistered from %s", name, queue.path.display)

    async def purge(self, queue: Queue) -> int:
        """Purge the queue (every message, as ``QueueManager.purge``) and raise its floor to
        what the purge removed, so reads below it are 410; returns how many went."""
        async with self._lock, self._trim_lock:
            end = self.store.readable_end(queue.queue_id)
            removed = await self.qm.purge(queue.path.canonical)
            if queue.pin is not None or queue.queue_id in self._floors:
                await self._save(queue, None, 0, end)
            return removed

    async def drop_queue(self, queue: Queue) -> None:
        """Forget a deleted queue's consumers and floor."""
        records = [e.record for e in self._consumers.pop(queue.queue_id, {}).values()]
        floor = self._floors.pop(queue.queue_id, None)
        if floor is not None:
            records.append(floor.record)
        if records:
            await store_call(self.store.remove(records))
        queue.pin = None

    # ---- internals -----------------------------------------------------------------------

    @staticmethod
    def _check_name(name: str) -> None:
        if not CONSUMER_NAME.match(name):
            raise BadRequest(f"consumer name {name!r}: {CONSUMER_NAME_RULE}",
                             type_slug="bad-request")

    def _entry(self, queue: Queue, name: str, owner: str | None) -> _Entry:
        self._check_name(name)
        entry = self._consumers.get(queue.queue_id, {}).get(name)
        if entry is None or not _visible(entry, owner):  # another's is not there for you
            raise NotFound(f"no consumer {name!r} on {queue.path.display}",
                           type_slug="consumer-not-found")
        return entry

    def _saved_floor(self, queue: Queue) -> int:
        saved = self._floors.get(queue.queue_id)
        return saved.value if saved is not None else 1

    async def _save(self, queue: Queue, name: str | None, position: int, floor: int,
                    owner: str | None = None) -> None:
        """One atomic commit: the consumer's new record (when ``name``, ``owner``'s) and the
        queue's floor (when it rises), each replacing its old record."""
        sends: list[SendSpec] = []
        removes: list[StoredRecord] = []
        base = {"queue_id": queue.queue_id, "queue": queue.path.canonical}
        consumers = self._consumers.setdefault(queue.queue_id, {})
        if name is not None:
            sends.append(self._spec({**base, "consumer": name, "position": position,
                                     **({} if owner is None else {"owner": owner})}))
            if name in consumers:
                removes.append(consumers[name].record)
        old_floor = self._floors.get(queue.queue_id)
        raise_floor = floor > (old_floor.value if old_floor else 1)
        if raise_floor:
            sends.append(self._spec({**base, "floor": floor}))
            if old_floor is not None:
                removes.append(old_floor.record)
        if not sends:
            return
        try:
            made = await store_call(self.store.commit(sends, removes=removes))
        finally:
            if not consumers:
                del self._consumers[queue.queue_id]
        if name is not None:
            self._consumers.setdefault(queue.queue_id, {})[name] = _Entry(position, made[0],
                                                                          owner)
        if raise_floor:
            self._floors[queue.queue_id] = _Entry(floor, made[-1])
        self._pin(queue)

    def _spec(self, doc: dict[str, object]) -> SendSpec:
        return sending.state(self.own.queue_id, json.dumps(doc, separators=(",", ":")).encode())

    def _pin(self, queue: Queue) -> None:
        positions = self._consumers.get(queue.queue_id)
        queue.pin = min(e.value for e in positions.values()) if positions else None

    async def _remove_consumed(self, queue: Queue, records: list[StoredRecord]) -> None:
        """Messages every consumer has read past leave the queue: counted as its outflow
        (``consumed``), as a receive's are (``received``)."""
        await store_call(self.store.remove(records))
        self.qm.events.count(queue.path.display, "consumed", len(records))

    async def _trim(self, queue: Queue, below: int, start: int | None = None) -> None:
        """Remove the queue's messages below ``below``, looking from ``start`` (the previous
        floor; everything under it is gone already) or, at start-up, from the lowest live
        one. The floor record is durable first, so an interrupted trim finishes later."""
        async with self._trim_lock:
            if start is None:
                start = self._lowest_live(queue)
            chunk: list[StoredRecord] = []
            for seq in range(start, below):
                record = self.store.record(queue.queue_id, seq)
                if record is not None:
                    chunk.append(record)
                if len(chunk) >= _TRIM_CHUNK or (seq - start) % _TRIM_CHUNK == _TRIM_CHUNK - 1:
                    if chunk:
                        await self._remove_consumed(queue, chunk)
                        chunk = []
                    else:
                        await asyncio.sleep(0)  # a long run of gaps: let the loop breathe
            if chunk:
                await self._remove_consumed(queue, chunk)
            for lane in queue.order:
                while lane and lane[0] < below:
                    lane.popleft()


def _visible(entry: _Entry, owner: str | None) -> bool:
    return owner is None or entry.owner == owner
