"""Atomic batches: several messages to several queues in one store transaction."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from gateway.msmq.message import MessageProperties, compose_id
from gateway.queues import sending
from gateway.queues.errors import BadRequest
from gateway.queues.manager import QueueManager, ReceivedMessage

__all__ = ["send_batch", "batch_answer"]


async def send_batch(qm: QueueManager, items: Sequence[tuple[str, bytes, MessageProperties]],
                     *, dedup_key: tuple[str, str] | None = None) -> list[ReceivedMessage]:
    """Store messages to several queues atomically (one store transaction): all or none.
    Messages to transactional queues are transactional; the others are not, but share
    the batch's atomicity. With ``dedup_key`` (key, digest) the answer (``batch_answer``)
    is remembered in the duplicate window in the same commit."""
    if not items:
        raise BadRequest("a batch needs at least one message", type_slug="bad-request")
    specs: list[sending.Send] = []
    try:
        return await _send(qm, items, dedup_key, specs)
    except BaseException:
        sending.release(qm.store, specs)
        raise


async def _send(qm: QueueManager, items: Sequence[tuple[str, bytes, MessageProperties]],
                dedup_key: tuple[str, str] | None, specs: list[sending.Send]
                ) -> list[ReceivedMessage]:
    now_ms = int(time.time() * 1000)
    made: list[ReceivedMessage] = []
    for name, body, properties in items:
        known = qm.queue(name)
        queue = qm.check_send(name, transactional=known.settings.transactional)
        tx = queue.settings.transactional
        props = replace(properties, transactional=tx, arrived_at_ms=now_ms,
                        sent_at_ms=properties.sent_at_ms or now_ms,
                        source_qm=properties.source_qm or qm.qm_guid,
                        priority=0 if tx else properties.priority, recoverable=True)
        # Its sequence number now, so the answer (which a dedup entry keeps) is known
        # before the commit.
        seq = sending.reserve(qm.store, queue)
        specs.append(sending.message(queue, props, body, seq=seq))
        made.append(ReceivedMessage(props.message_id or compose_id(qm.qm_guid, queue.queue_id,
                                                                    seq),
                                    queue.path.display, seq, props, body))
    if dedup_key is not None:  # remembered in the same commit as the messages
        assert qm.dedup is not None
        answer = batch_answer(made)
        specs.append(qm.dedup.spec(dedup_key[0], dedup_key[1], answer))
    records = await sending.commit(qm.store, specs, atomic=True, arrived=qm.arrived)
    if dedup_key is not None and qm.dedup is not None:
        qm.dedup.done(dedup_key[0], dedup_key[1], answer, records[-1])
    return made


def batch_answer(made: Sequence[ReceivedMessage]) -> dict[str, object]:
    """The answer to a batch: the ids, and each message's id, queue and sequence number."""
    return {"ids": [m.message_id for m in made],
            "messages": [{"id": m.message_id, "queue": m.queue, "seq": m.seq} for m in made]}
