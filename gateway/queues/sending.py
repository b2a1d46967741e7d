"""The one send path: every message record is composed and committed here.

A REST send, a batch, a format-name or remote send, an SRMP delivery or stream batch, a
forwarded message, an acknowledgement, a receipt, a journal or dead-letter copy, a
transaction's commit, a redrive: each composes its records with ``message`` or ``copy`` and
writes them with ``commit`` (``commit_each``: independent records stored together). So how
a client's message is stamped (``stamp``; an SRMP message keeps its sender's stamps and
takes only its arrival time), how a record is encoded (priority, expiry, durability),
whether one record takes the store's append or an atomic commit, how store refusals read in
the queue domain, and that a record is announced to its queue only after it is durable, are
written once. The gateway's own state records (duplicate window, wire ids, links,
positions) are composed here too (``state``); their owners write them, with the removals of
the records they replace.

Sequence numbers a caller reserved for records (``reserve``) are given back by ``commit``
when the store refuses them, and by ``release`` when composing fails before the commit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gateway.msmq.message import MessageProperties, encode_payload
from gateway.queues.model import Queue
from gateway.queues.store_errors import store_call
from store.errors import StoreError
from store.framing import RecordFlags
from store.message_store import MessageStore
from store.records import SendSpec, StoredRecord

__all__ = ["Send", "stamp", "message", "encoded", "copy", "state", "reserve", "release", "commit",
           "commit_each", "prepare", "commit_prepared"]

# A record and the queue it becomes visible in (None: a record of the gateway's own state,
# which its owner takes over after the commit).
Send = tuple[Queue | None, SendSpec]


def stamp(props: MessageProperties, now_ms: int, qm_guid: str) -> None:
    """A message enters this queue manager: its arrival time, and the sender's time and queue
    manager when it came without them."""
    props.arrive(now_ms)
    props.sent_at_ms = props.sent_at_ms or now_ms
    props.source_qm = props.source_qm or qm_guid


def message(queue: Queue, props: MessageProperties, body: bytes, *, seq: int = 0,
            flags: RecordFlags = RecordFlags.NONE, priority: int | None = None,
            express: bool | None = None) -> Send:
    """A message's own record: ordered by its priority (``priority`` overrides it: a stream
    keeps arrival order), removed at its receive-by time, durable unless express
    (``express=False``: kept durable whatever the message says)."""
    return queue, SendSpec(queue.queue_id, encode_payload(props, body),
                           priority=props.priority if priority is None else priority,
                           expires_ms=props.receive_by_ms, flags=flags,
                           express=not props.recoverable if express is None else express,
                           seq=seq)


def encoded(queue: Queue, payload: bytes, *, priority: int, expires_ms: int) -> Send:
    """A durable message's own record from its payload, stamped and encoded already (by a
    front, for a message that needs nothing but this record: gateway.queues.plain_sends)."""
    return queue, SendSpec(queue.queue_id, payload, priority=priority, expires_ms=expires_ms)


def copy(queue: Queue, props: MessageProperties, body: bytes, *, priority: int = 0) -> Send:
    """A record the gateway makes of a message: a journal or dead-letter copy, an
    acknowledgement, a receipt. Always durable, and never expires."""
    return queue, SendSpec(queue.queue_id, encode_payload(props, body), priority=priority)


def state(queue_id: int, doc: bytes) -> SendSpec:
    """A record of one of the gateway's own state queues (duplicate window, wire ids, links,
    stream and consumer positions); in a ``commit`` with messages it goes as ``(None, spec)``:
    its owner takes the record over."""
    return SendSpec(queue_id, doc)


def reserve(store: MessageStore, queue: Queue) -> int:
    """A sequence number for a record composed before its commit (its id names it)."""
    return store.reserve_seq(queue.queue_id)


def release(store: MessageStore, sends: Sequence[Send]) -> None:
    """Give back the sequence numbers of records that will not be committed."""
    store.release_sends([spec for _, spec in sends])


async def commit(store: MessageStore, sends: Sequence[Send], *,
                 removes: Sequence[StoredRecord] = (), tx_id: int = 0, atomic: bool = False,
                 arrived: Callable[[Queue, StoredRecord], None] | None = None
                 ) -> list[StoredRecord]:
    """Write ``sends`` and remove ``removes`` together, then announce each message record
    to its queue (``arrived``). A lone record without removals takes the store's append (one
    fsync, no QMLog) unless ``atomic``; anything more is one atomic commit.

    Raises:
        QueueError: the store's refusal (gateway.queues.store_errors), the reserved
            sequence numbers given back.
    """
    specs = [spec for _, spec in sends]
    try:
        if len(specs) == 1 and not removes and not atomic and not tx_id:
            made = [await store_call(store.append(specs[0]))]
        else:
            made = await store_call(store.commit(specs, removes, tx_id=tx_id))
    except BaseException:
        store.release_sends(specs)
        raise
    if arrived is not None:
        for (queue, _), record in zip(sends, made):
            if queue is not None:
                arrived(queue, record)
    return made


async def commit_each(store: MessageStore, sends: Sequence[Send],
                      arrived: Callable[[Queue, StoredRecord], None]
                      ) -> list[StoredRecord | StoreError]:
    """Write durable message records each on its own, with one wait for all of them (the
    plain sends and SRMP messages of one loop pass: gateway.queues.plain_sends): for each,
    in order, its record, announced to its queue, or the store's refusal of it alone (its
    reserved sequence number given back).

    Raises:
        QueueError: the store takes no writes (503); none was written.
    """
    made = await store_call(store.append_many([spec for _, spec in sends]))
    for (queue, _), record in zip(sends, made):
        if queue is not None and not isinstance(record, StoreError):
            arrived(queue, record)
    return made


async def prepare(store: MessageStore, sends: Sequence[Send], removes: Sequence[StoredRecord],
                  *, tx_id: int) -> None:
    """The first phase of a two-phase commit: ``sends`` and ``removes`` durable as the
    prepared transaction ``tx_id``, visible to nobody until ``commit_prepared``."""
    await store_call(store.prepare([spec for _, spec in sends], removes, tx_id=tx_id))


async def commit_prepared(store: MessageStore, tx_id: int) -> list[StoredRecord]:
    """The second phase: the prepared transaction's records become visible; the caller
    announces each to its queue."""
    return await store_call(store.commit_prepared(tx_id))
