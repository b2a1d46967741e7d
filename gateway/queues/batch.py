"""Atomic batches: several messages to several queues in one store transaction."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from gateway.queues import sending
from gateway.queues.errors import BadRequest
from gateway.msmq.message import MessageProperties
from gateway.queues.manager import QueueManager, ReceivedMessage

__all__ = ["send_batch"]


async def send_batch(qm: QueueManager, items: Sequence[tuple[str, bytes, MessageProperties]]
                     ) -> list[ReceivedMessage]:
    """Store messages to several queues atomically (one store transaction): all or none.
    Messages to transactional queues are transactional; the others are not, but share
    the batch's atomicity."""
    if not items:
        raise BadRequest("a batch needs at least one message", type_slug="bad-request")
    now_ms = int(time.time() * 1000)
    specs, targets, stamped = [], [], []
    for name, body, properties in items:
        known = qm.queue(name)
        queue = qm.check_send(name, transactional=known.settings.transactional)
        tx = queue.settings.transactional
        props = replace(properties, transactional=tx, arrived_at_ms=now_ms,
                        sent_at_ms=properties.sent_at_ms or now_ms,
                        source_qm=properties.source_qm or qm.qm_guid,
                        priority=0 if tx else properties.priority, recoverable=True)
        specs.append(sending.message(queue, props, body))
        targets.append(queue)
        stamped.append((props, body))
    records = await sending.commit(qm.store, specs, atomic=True, arrived=qm.arrived)
    made = []
    for queue, record, (props, body) in zip(targets, records, stamped):
        made.append(ReceivedMessage(qm.message_id(queue, record, props),
                                    queue.path.display, record.seq, props, body))
    return made

