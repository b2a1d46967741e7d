"""Who may send to a queue, and how: the checks every send path makes before storing."""

from __future__ import annotations

from gateway.msmq.classes import MessageClass
from gateway.queues.errors import BadRequest, Forbidden
from gateway.queues.model import Queue
from mapping.names import MACHINE_JOURNAL

__all__ = ["check_send_to"]


def check_send_to(queue: Queue, transactional: bool) -> None:
    """Raises: QueueError for a dead-letter queue or journal (403), and for a transactional
    mismatch (400 with MQMSG_CLASS_NACK_NOT_TRANSACTIONAL_Q or _MSG)."""
    if queue.is_dead_letter or queue.path.journal or queue.path.canonical == MACHINE_JOURNAL:
        raise Forbidden(f"nobody sends to {queue.path.display!r}: only the queue "
                        "manager puts messages there", type_slug="MQ_ERROR_ACCESS_DENIED")
    if transactional and not queue.settings.transactional:
        nack = MessageClass.NACK_NOT_TRANSACTIONAL_Q.msmq_name
        raise BadRequest(f"{queue.path.display!r} is not transactional",
                         type_slug=nack, fields={"class": nack})
    if not transactional and queue.settings.transactional:
        nack = MessageClass.NACK_NOT_TRANSACTIONAL_MSG.msmq_name
        raise BadRequest(f"{queue.path.display!r} is transactional: send in a "
                         "transaction", type_slug=nack, fields={"class": nack})
