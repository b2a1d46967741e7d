"""Deleting a queue without losing a message into it or leaving one behind.

A queue an open or prepared transaction sends to is not deleted (the commit would have
nowhere to go), nor one holding messages being received. Its messages are purged (with the
negative acknowledgements they ask for); then, in one step with no wait, the checks are made
again and the queue leaves the names, so a send that came meanwhile is either seen or finds
no queue; one already past its check is refused by the store (``QueueDeleted``), whose
deletion admits no write into the queue from its start.
"""

from __future__ import annotations

from gateway.msmq.classes import MessageClass
from gateway.queues.errors import Conflict, Forbidden
from gateway.queues.model import Queue, QueueHost
from mapping.names import SYSTEM_QUEUES, journal_of

__all__ = ["delete_queue"]


async def delete_queue(qm: QueueHost, queue: Queue) -> None:
    if queue.path.system or queue.path.canonical in SYSTEM_QUEUES:
        raise Forbidden(f"{queue.path.display!r} is a system queue and cannot be "
                        "deleted", type_slug="MQ_ERROR_ACCESS_DENIED")
    if qm.sent_to_in_transactions(queue.queue_id):
        raise Conflict(f"{queue.path.display!r} is where an open or prepared transaction "
                       "sends: commit or abort it first", type_slug="queue-busy")
    await qm.purge(queue.path.canonical, reason=MessageClass.NACK_Q_DELETED)
    if queue.reserved or qm.store.holds_or_awaits(queue.queue_id) or (
            qm.sent_to_in_transactions(queue.queue_id)):
        raise Conflict(f"{queue.path.display!r} holds messages being received or sent "
                       "(in a transaction): end it first", type_slug="queue-busy")
    qm.forget(queue)
    await qm.store.delete_queue(queue.queue_id)
    journal = qm.lookup(journal_of(queue.path).canonical) if not queue.path.journal else None
    if journal is not None and not qm.store.count(journal.queue_id):
        qm.forget(journal)
        await qm.store.delete_queue(journal.queue_id)
