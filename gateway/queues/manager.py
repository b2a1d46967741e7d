"""The queue manager: the one place that decides what happens to a message.

It owns the queues (registered in the store's ``lqs/``), the order in which messages are
delivered (priority then arrival for ordinary queues, sequence for transactional ones), which
messages are being received right now, and MSMQ's rules (docs/rest-api.md §Rules): transactional
messages only in transactional queues, nobody sends to the dead-letter queues, journals.
HTTP handlers translate requests into calls here and never decide anything themselves.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from gateway.logs import server_log
from gateway.msmq.classes import JournalLevel, MessageClass
from gateway.msmq.message import DecodedMessage, MessageProperties, compose_id, decode_payload
from gateway.queues import internal, sending
from gateway.queues.acks import wants_ack
from gateway.queues.copies import ack_specs, dead_letter_spec
from gateway.queues.dedup import DedupWindow, srmp_keyed_entry
from gateway.queues.deletion import delete_queue
from gateway.queues.errors import BadRequest, Conflict, Forbidden, NotFound, StorageFull
from gateway.queues.events import QueueEvents
from gateway.queues.expiry import Expiry
from gateway.queues.internal import DEDUP_QUEUE, INTERNAL_QUEUES, WIRE_IDS_QUEUE, is_internal
from gateway.queues.journaling import JournalCopies, sync_journal
from gateway.queues.local_names import LocalNames
from gateway.queues.model import Queue, ReceivedMessage
from gateway.queues.purge import purge_queue
from gateway.queues.registration_repair import repair_registration
from gateway.queues.seen_ids import SeenIds, locate
from gateway.queues.send_rules import check_send_to
from gateway.queues.settings import QueueSettings
from gateway.queues.state_records import Quarantine
from gateway.queues.store_errors import store_call
from gateway.queues.wire_ids import WireIds
from mapping.names import (
    DEADXACT,
    MACHINE_JOURNAL,
    ORDER_QUEUE,
    SYSTEM_QUEUES,
    QueueNameError,
    QueuePath,
    journal_of,
    parse_queue_path,
)
from store.errors import StoreError
from store.lqs import QueueInfo
from store.message_store import MessageStore
from store.records import StoredRecord

__all__ = ["QueueManager", "Queue", "ReceivedMessage", "QueueSettings"]

_PARSED_MAX = 4096  # queue names kept parsed

RECEIVE_WAIT_S_MAX = 60.0
# Held while a receive waits for a message (a long-poll slot, gateway.web.long_polls).
Park = Callable[[], contextlib.AbstractContextManager[object]]
RECEIVE_MAX = 1000
ANSWER_BYTES_MAX = 16 << 20  # bodies in one receive or browse answer (beyond its first)
GONE_CHECK_S = 1.0  # how often a waiting receive looks whether its caller is still there
PRIORITIES = 8


class QueueManager:
    """Queues and messages on top of one ``MessageStore``."""

    def __init__(self, store: MessageStore, qm_guid: str) -> None:
        self.store = store
        self.qm_guid = qm_guid
        self._queues: dict[str, Queue] = {}
        self._by_id: dict[int, Queue] = {}
        # Every request names its queue: parsed names are kept rather than parsed each time.
        self._parsed: dict[str, QueuePath] = {}
        # Ids that do not lead to their record by themselves (copies, ids from SRMP senders),
        # the latest ones seen.
        self.seen_ids = SeenIds()
        self.expiry = Expiry(self)
        # What happened to each queue's messages since start (the metrics read it).
        self.events = QueueEvents()
        self.journal_copies = JournalCopies(store.quotas, self.events)
        self.dedup: DedupWindow | None = None
        # Unreadable records of the internal queues, set aside once the gateway is open.
        self.quarantine = Quarantine(store)
        self.wire_ids: WireIds | None = None  # ordinals of the SRMP ids composed here
        self.local_names = LocalNames(frozenset(), frozenset())  # the web layer's
        self.stopping = False  # set by end_waits: no client's receive waits any more
        self.sent_to_in_transactions: Callable[[int], bool] = lambda queue_id: False

    # ---- start-up ------------------------------------------------------------------------

    async def open(self, declared: Sequence[tuple[str, QueueSettings]] = ()) -> None:
        """Index the store's queues; create the system queues and declared ones if missing."""
        for info in self.store.registry.all():
            try:
                path = parse_queue_path(info.path)
            except QueueNameError:
                server_log.warning("registered queue with an invalid path skipped: %r",
                                   info.path)
                continue
            problems: list[str] = []
            queue = self._add(info, path, problems)
            if problems:  # a damaged registration: keep the queue, repair the file
                await repair_registration(self.store, info, queue, problems)
        for name in SYSTEM_QUEUES:
            if name not in self._queues:
                tx = name == DEADXACT
                await self.register(parse_queue_path(name), QueueSettings(transactional=tx),
                                     journal_class=name != ORDER_QUEUE)
        for name in (n for n in INTERNAL_QUEUES if n not in self._queues):
            await self.register(parse_queue_path(name), QueueSettings())
        self.dedup = DedupWindow(self.store, self._queues[DEDUP_QUEUE].queue_id,
                                 keyed_entry=srmp_keyed_entry(self.store, self._canonical_path),
                                 quarantine=self.quarantine)
        self.store.removal_hooks.append(self.dedup.before_removal)
        self.wire_ids = WireIds(self.store, self._queues[WIRE_IDS_QUEUE].queue_id,
                                quarantine=self.quarantine)
        for name, settings in declared:
            path = self._parse(name)
            if path.canonical not in self._queues:
                try:
                    await self.create_queue(name, settings)
                except StorageFull as exc:
                    # A full disk: serve the queues there are; the next start registers it.
                    server_log.error("declared queue %s not created: %s", path.display, exc)

    def _add(self, info: QueueInfo, path: QueuePath, problems: list[str] | None = None
             ) -> Queue:
        queue = Queue(info, path, QueueSettings.from_properties(info.properties, problems),
                      [collections.deque() for _ in range(PRIORITIES)])
        for seq, priority, expires_ms in self.store.timings(info.queue_id):
            self._place(queue, seq, priority, expires_ms)  # no record built: start-up
        self._queues[path.canonical] = queue
        self._by_id[info.queue_id] = queue
        return queue

    def _place(self, queue: Queue, seq: int, priority: int, expires_ms: int) -> None:
        self.expiry.track(queue, seq, expires_ms)
        lane = queue.order[0 if queue.settings.transactional else 7 - priority]
        if lane and lane[-1] > seq:  # a late commit (two-phase): keep sequence order
            lane.insert(bisect.bisect_left(lane, seq), seq)
        else:
            lane.append(seq)

    async def register(self, path: QueuePath, settings: QueueSettings, *,
                       journal_class: bool = False, extra: dict[str, str] | None = None
                       ) -> Queue:
        """Register a queue in the store (``extra``: more properties for its lqs file)."""
        props = {**settings.as_properties(), **(extra or {})}
        props["journal_class"] = "1" if journal_class or path.journal else "0"
        if path.journal:
            props["quota"] = str(settings.journal_quota)
        try:  # store_call: a full disk is 507, not a queue that exists
            info = await store_call(self.store.create_queue(path.display, props))
        except StoreError as exc:
            raise Conflict(str(exc), type_slug="queue-exists") from exc
        return self._add(info, path)

    # ---- queues --------------------------------------------------------------------------

    def _parse(self, name: str) -> QueuePath:
        path = self._parsed.get(name)
        if path is not None:
            return path
        try:
            path = parse_queue_path(name)
        except QueueNameError as exc:
            raise BadRequest(str(exc), type_slug="MQ_ERROR_ILLEGAL_QUEUE_PATHNAME"
                             ) from exc
        if len(self._parsed) >= _PARSED_MAX:  # names come from the internet: bounded
            self._parsed.clear()
        self._parsed[name] = path
        return path

    def queue(self, name: str) -> Queue:
        path = self._parse(name)
        if is_internal(path.canonical):
            raise Forbidden(f"{path.display!r} is a queue the gateway keeps for itself",
                            type_slug="MQ_ERROR_ACCESS_DENIED")
        queue = self._queues.get(path.canonical)
        if queue is None:
            raise NotFound(f"no queue {path.display!r}",
                           type_slug="MQ_ERROR_QUEUE_NOT_FOUND")
        return queue

    def queues(self) -> list[Queue]:
        return sorted((q for q in self._queues.values() if not is_internal(q.path.canonical)),
                      key=lambda q: q.path.canonical)

    async def create_queue(self, name: str, settings: QueueSettings) -> tuple[Queue, bool]:
        """Create the queue, or update it when it exists; True when it was created."""
        path = self._parse(name)
        if internal.not_creatable(path):
            raise Forbidden(f"{path.display!r} is a system queue or a name the gateway "
                            "keeps for its own queues", type_slug="MQ_ERROR_ACCESS_DENIED")
        existing = self._queues.get(path.canonical)
        if existing is not None:
            if existing.settings.transactional != settings.transactional:
                if self.sent_to_in_transactions(existing.queue_id):
                    raise Conflict(f"{path.display!r} is where an open or prepared "
                                   "transaction sends: commit or abort it before changing "
                                   "whether it is transactional", type_slug="queue-busy")
                if self.store.holds_or_awaits(existing.queue_id):
                    raise Conflict("a queue holding messages (or with sends on their way) "
                                   "cannot change whether it is transactional",
                                   type_slug="queue-not-empty")
            # Before the wait: a send checked meanwhile sees the new settings (one checked
            # against the old ones would be stored after the checks above).
            previous, existing.settings = existing.settings, settings
            try:
                existing.info = await store_call(self.store.update_queue(
                    existing.queue_id, settings.as_properties()))
            except BaseException:
                existing.settings = previous
                raise
            await sync_journal(self, existing)
            return existing, False
        queue = await self.register(path, settings)
        await sync_journal(self, queue)
        return queue, True

    async def delete_queue(self, name: str) -> None:
        """Raises: QueueError: a system queue (403); one a transaction sends to, or holding
        messages being received (409 queue-busy)."""
        await delete_queue(self, self.queue(name))

    def forget(self, queue: Queue) -> None:
        """The queue is no longer known by its name or id (``deletion``)."""
        del self._queues[queue.path.canonical]
        del self._by_id[queue.queue_id]

    async def purge(self, name: str, *, reason: MessageClass = MessageClass.NACK_Q_PURGED
                    ) -> int:
        """Remove every message that is not being received right now; return how many.
        Messages whose acknowledgement level asks get a negative acknowledgement."""
        return await purge_queue(self, self.queue(name), reason)

    # ---- send ----------------------------------------------------------------------------

    def check_send(self, name: str, *, transactional: bool) -> Queue:
        """The queue, if a message (transactional or not) may be sent to it.

        Raises:
            QueueError: unknown queue; a dead-letter queue or journal (403); a transactional
                mismatch (400 with MQMSG_CLASS_NACK_NOT_TRANSACTIONAL_Q or _MSG).
        """
        queue = self.queue(name)
        check_send_to(queue, transactional)
        return queue

    async def send(self, name: str, body: bytes, properties: MessageProperties, *,
                   transaction: str | None, dedup_key: str | None = None,
                   fresh: bool = False) -> ReceivedMessage:
        """Store one message in a local queue; returns once it is stored (on disk when
        recoverable). ``transaction``: None (a single-message transaction for a transactional
        queue), "single", or "none" (explicitly outside any transaction). With a
        ``dedup_key`` seen in the window for the same body, the first answer comes back and
        nothing is stored. ``fresh``: the caller made ``properties`` for this call alone, so
        they are completed in place (no copy on the send path)."""
        queue = self.queue(name)
        transactional = queue.settings.transactional if transaction is None else (
            transaction != "none")
        check_send_to(queue, transactional)
        assert self.dedup is not None
        digest = ""
        if dedup_key is not None:
            digest = self.dedup.digest(body, queue.path.canonical)
            prior = await self.dedup.seen(dedup_key, digest)
            if prior:
                return ReceivedMessage(str(prior["id"]), str(prior["queue"]), int(str(
                    prior["seq"])), properties, body)
            check_send_to(queue, transactional)  # again: its settings may have changed
            self.dedup.begin(dedup_key)
        try:
            return await self._send(queue, body, properties, transactional, dedup_key, digest,
                                    fresh)
        finally:
            if dedup_key is not None:
                self.dedup.failed(dedup_key)  # no-op when it succeeded

    async def _send(self, queue: Queue, body: bytes, properties: MessageProperties,
                    transactional: bool, dedup_key: str | None, digest: str, fresh: bool
                    ) -> ReceivedMessage:
        assert self.dedup is not None
        now_ms = int(time.time() * 1000)
        props = properties if fresh else replace(properties)
        props.transactional = transactional
        sending.stamp(props, now_ms, self.qm_guid)
        extra: list[sending.Send] = []
        seq = 0
        journal_copy = props.journal == JournalLevel.JOURNAL.value
        answer: dict[str, object] = {}
        if journal_copy or wants_ack(props, MessageClass.ACK_REACH_QUEUE) or dedup_key:
            # The copies name the original's id, so its sequence number is taken first.
            seq = sending.reserve(self.store, queue)
            try:
                original_id = props.message_id or compose_id(self.qm_guid, queue.queue_id, seq)
                original = ReceivedMessage(original_id, queue.path.display, seq, props, body)
                if journal_copy:
                    extra.append(self._journal_copy(self._queues[MACHINE_JOURNAL], props, body,
                                                    original_id))
                extra.extend(ack_specs(self, queue, original, MessageClass.ACK_REACH_QUEUE,
                                       now_ms))
                if dedup_key is not None:
                    answer = {"id": original_id, "queue": queue.path.display, "seq": seq}
                    extra.append(self.dedup.spec(dedup_key, digest, answer))
            except BaseException:
                self.store.release_seq(queue.queue_id, seq)
                raise
        made = await sending.commit(self.store, [sending.message(queue, props, body, seq=seq),
                                                 *extra],
                                    atomic=transactional, arrived=self.arrived)
        record = made[0]
        if dedup_key is not None and answer:
            self.dedup.done(dedup_key, digest, answer, made[-1])
        return ReceivedMessage(self.message_id(queue, record, props), queue.path.display,
                               record.seq, props, body)

    @staticmethod
    def _journal_copy(journal: Queue, props: MessageProperties, body: bytes,
                      original_id: str | None) -> sending.Send:
        copy = replace(props, message_id=original_id or props.message_id)
        return sending.copy(journal, copy, body, priority=props.priority)

    def arrived(self, queue: Queue, record: StoredRecord) -> None:
        """A record became visible in ``queue`` (after a commit)."""
        self._place(queue, record.seq, record.priority, record.expires_ms)
        queue.arrived.set()
        self.events.count(queue.path.display, "sent")

    def message_id(self, queue: Queue, record: StoredRecord, props: MessageProperties) -> str:
        return self.id_of(queue, record, props.message_id)

    def id_of(self, queue: Queue, record: StoredRecord, own_id: str) -> str:
        """A stored message's id: the one it came with (``own_id``), else one made of its
        queue and sequence."""
        if own_id:
            self.seen_ids.note(queue.queue_id, own_id, record.seq)
            return own_id
        return compose_id(self.qm_guid, queue.queue_id, record.seq)

    # ---- receive, browse, get, delete ------------------------------------------------------

    async def receive(self, name: str, *, max_messages: int, wait_s: float,
                      park: Park | None = None,
                      gone: Callable[[], bool] | None = None) -> list[ReceivedMessage]:
        """Take up to ``max_messages`` messages, waiting up to ``wait_s`` for the first.

        ``gone``: the caller can no longer be answered (``wait_and_take``)."""
        queue = self.queue(name)
        chosen = await self.wait_and_take(queue, max_messages, wait_s, park, gone)
        if not chosen:
            return []
        try:
            taken = await self._remove_and_journal(queue, chosen)
            self.events.count(queue.path.display, "received", len(taken))
            return taken
        finally:
            queue.reserved.difference_update(r.seq for r in chosen)

    async def wait_and_take(self, queue: Queue, max_messages: int, wait_s: float,
                            park: Park | None = None,
                            gone: Callable[[], bool] | None = None) -> list[StoredRecord]:
        """Reserve up to ``max_messages`` deliverable messages, waiting for the first.

        ``park`` is entered for the wait, only when there is one (nothing to take at once):
        the caller's hold on a long-poll slot (gateway.web.long_polls). ``gone``: the caller
        can no longer be answered (its connection closed); looked at every
        ``GONE_CHECK_S`` of the wait and before taking, it ends the wait with nothing taken
        (the message stays for others, the slot is given back).

        Raises:
            QueueError: 409 when registered range consumers read the queue as a log;
                whatever ``park`` raises (503 when no long-poll slot is free).
        """
        self.check_removable(queue)
        max_messages = max(1, min(max_messages, RECEIVE_MAX))
        chosen = self._take(queue, max_messages)
        if chosen or wait_s <= 0:
            return chosen
        deadline = time.monotonic() + min(wait_s, RECEIVE_WAIT_S_MAX)
        with park() if park is not None else contextlib.nullcontext():
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.stopping and park is not None):
                    return []  # (a client's receive: the gateway's own readers go on)
                queue.arrived.clear()
                try:
                    await asyncio.wait_for(queue.arrived.wait(), remaining if gone is None
                                           else min(remaining, GONE_CHECK_S))
                except TimeoutError:
                    pass  # the deadline or a look at ``gone``: the loop decides which
                if gone is not None and gone():
                    return []
                chosen = self._take(queue, max_messages)
                if chosen:
                    return chosen

    def end_waits(self) -> None:
        """The gateway stops: every client's waiting receive (one with a long-poll ``park``)
        ends now with nothing, as if its wait had run out, and none waits from now on; the
        gateway's own readers wait on until their tasks are cancelled."""
        self.stopping = True
        for queue in self._queues.values():
            queue.arrived.set()

    @staticmethod
    def check_removable(queue: Queue, seq: int | None = None) -> None:
        """Refuse to remove what a registered range consumer has not passed yet."""
        if queue.pin is not None and (seq is None or seq >= queue.pin):
            raise Conflict(f"{queue.path.display} is read by registered range "
                           "consumers: its messages leave only by their commits (or a "
                           "purge); unregister them to receive or delete (a partner sees "
                           "its own; the admin sees them all)",
                           type_slug="queue-has-consumers")

    def hold(self, queue: Queue, record: StoredRecord) -> None:
        """Reserve a message that is not in the delivery order any more (a prepared
        transaction's receive after a restart)."""
        lane = queue.order[self._lane(queue, record)]
        with contextlib.suppress(ValueError):  # already out of the order (taken before)
            lane.remove(record.seq)
        queue.reserved.add(record.seq)

    def release(self, queue: Queue, record: StoredRecord, *, removed: bool) -> None:
        """End a reservation; a message not removed goes back to its original position."""
        queue.reserved.discard(record.seq)
        if removed:
            return
        lane = queue.order[self._lane(queue, record)]
        lane.insert(bisect.bisect_left(lane, record.seq), record.seq)
        queue.arrived.set()

    def _lane(self, queue: Queue, record: StoredRecord) -> int:
        return 0 if queue.settings.transactional else 7 - record.priority

    def internal(self, name: str) -> Queue:
        return self._queues[name]

    def lookup(self, canonical: str) -> Queue | None:
        return self._queues.get(canonical)

    def all_queues(self) -> list[Queue]:
        return list(self._queues.values())

    def queue_by_id(self, queue_id: int) -> Queue:
        return self._by_id[queue_id]

    def queue_by_id_or_none(self, queue_id: int) -> Queue | None:
        return self._by_id.get(queue_id)

    def _canonical_path(self, queue_id: int) -> str | None:
        queue = self._by_id.get(queue_id)
        return None if queue is None else queue.path.canonical

    def journal_queue(self, queue: Queue) -> Queue | None:
        if not queue.settings.journal or queue.path.journal or queue.path.system:
            return None
        return self._queues.get(journal_of(queue.path).canonical)

    def decode(self, queue: Queue, record: StoredRecord) -> ReceivedMessage:
        decoded = decode_payload(self.store.read(record))
        return ReceivedMessage(self.message_id(queue, record, decoded.properties),
                               queue.path.display, record.seq, decoded.properties, decoded.body)

    def peek(self, name: str) -> ReceivedMessage | None:
        """The message a receive would take next, without taking it (MSMQ's Peek)."""
        queue = self.queue(name)
        for lane in queue.order:
            for seq in lane:
                record = self.store.record(queue.queue_id, seq)
                if record is not None and seq not in queue.reserved:
                    return self.decode(queue, record)
        return None

    def _take(self, queue: Queue, count: int) -> list[StoredRecord]:
        """Reserve the next ``count`` deliverable messages (highest priority, then oldest),
        fewer when their bodies would pass ``ANSWER_BYTES_MAX``."""
        chosen: list[StoredRecord] = []
        size = 0
        for lane in queue.order:
            while lane and len(chosen) < count:
                record = self.store.record(queue.queue_id, lane[0])
                if record is None or lane[0] in queue.reserved:
                    lane.popleft()  # deleted by id meanwhile
                    continue
                size += record.payload_len
                if chosen and size > ANSWER_BYTES_MAX:
                    return chosen  # it stays first in its lane for the next receive
                queue.reserved.add(lane.popleft())
                chosen.append(record)
            if len(chosen) >= count:
                break
        return chosen

    async def _remove_and_journal(self, queue: Queue, records: list[StoredRecord]
                                  ) -> list[ReceivedMessage]:
        try:
            return await self.finish(queue, records, ack=MessageClass.ACK_RECEIVE,
                                      journal=True)
        except BaseException:
            self._put_back(queue, records)
            raise

    def _put_back(self, queue: Queue, records: Sequence[StoredRecord]) -> None:
        """Records taken and not removed (the removal failed): back at their original
        positions (still reserved until the caller releases them, which it does before
        anything else runs)."""
        for record in records:
            lane = queue.order[self._lane(queue, record)]
            lane.insert(bisect.bisect_left(lane, record.seq), record.seq)
        queue.arrived.set()

    async def finish(self, queue: Queue, records: Sequence[StoredRecord], *,
                      ack: MessageClass, journal: bool = False,
                      dead_letter: MessageClass | None = None) -> list[ReceivedMessage]:
        """Remove ``records`` from ``queue`` in one atomic store commit together with what
        their removal causes: queue-journal copies, dead-letter copies (when the message's
        journal level asks), acknowledgements to admin queues (when its level asks)."""
        messages = [self.decode(queue, r) for r in records]
        now_ms = int(time.time() * 1000)
        journal_queue = self.journal_queue(queue) if journal else None
        extra: list[sending.Send] = []
        dead_lettered = 0
        if journal_queue is not None:
            extra.extend(self.journal_copies.copies(queue, journal_queue, messages))
        for message in messages:
            props = message.properties
            if dead_letter is not None and props.journal == JournalLevel.DEADLETTER.value:
                extra.append(dead_letter_spec(self, queue, message, dead_letter, now_ms))
                dead_lettered += 1
            extra.extend(ack_specs(self, queue, message, ack, now_ms))
        if extra:
            await sending.commit(self.store, extra, removes=list(records), arrived=self.arrived)
        else:
            await store_call(self.store.remove(list(records)))
        self.events.count(queue.path.display, "dead_lettered", dead_lettered)
        return messages

    def browse(self, name: str, *, after: int, limit: int) -> tuple[list[ReceivedMessage], int]:
        """Up to ``limit`` messages after ``after``, left in place, and where the next page
        starts; one a transaction received is invisible, as to receives, until it ends."""
        queue = self.queue(name)
        limit = max(1, min(limit, RECEIVE_MAX))
        messages: list[ReceivedMessage] = []
        size = 0
        last = after
        while len(messages) < limit:
            records = self.store.first_records(queue.queue_id, last, limit - len(messages))
            if not records:
                break
            for record in records:
                if record.seq not in queue.reserved:
                    size += record.payload_len
                    if messages and size > ANSWER_BYTES_MAX:
                        return messages, last  # the next page starts at this one
                    messages.append(self.decode(queue, record))
                last = record.seq
        return messages, last

    async def find(self, queue: Queue, message_id: str) -> StoredRecord:
        """The record of ``message_id`` in ``queue`` (``gateway.queues.seen_ids.locate``)."""
        holds_copies = (queue.is_dead_letter or queue.path.journal
                        or queue.path.canonical == MACHINE_JOURNAL)
        record = await locate(self.store, self.seen_ids, self.qm_guid, queue.queue_id,
                              message_id, holds_copies=holds_copies)
        if record is None:
            raise NotFound(f"no message '{message_id}' in {queue.path.display!r}",
                           type_slug="MQ_ERROR_MESSAGE_NOT_FOUND")
        return record

    async def get(self, name: str, message_id: str) -> ReceivedMessage:
        queue = self.queue(name)
        record = await self.find(queue, message_id)
        decoded: DecodedMessage = decode_payload(self.store.read(record))
        return ReceivedMessage(message_id, queue.path.display, record.seq, decoded.properties,
                               decoded.body)

    async def delete(self, name: str, message_id: str) -> None:
        queue = self.queue(name)
        record = await self.find(queue, message_id)
        self.check_removable(queue, record.seq)
        if record.seq in queue.reserved:
            raise Conflict(f"message {message_id!r} is being received",
                           type_slug="message-busy")
        queue.reserved.add(record.seq)
        try:
            await store_call(self.store.remove([record]))
        finally:
            queue.reserved.discard(record.seq)
