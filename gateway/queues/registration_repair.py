"""A queue's registration file found damaged at start: the queue is kept, with the
defaults for what could not be read, and the file is rewritten with them."""

from __future__ import annotations

from gateway.logs import server_log
from gateway.queues.model import Queue
from store.errors import DiskFull
from store.lqs import QueueInfo
from store.message_store import MessageStore

__all__ = ["repair_registration"]


async def repair_registration(store: MessageStore, info: QueueInfo, queue: Queue,
                              problems: list[str]) -> None:
    server_log.warning("queue %s: registration damaged (%s); defaults used and the file "
                       "rewritten", queue.path.display, ", ".join(problems))
    try:
        await store.update_queue(info.queue_id, {**info.properties,
                                                 **queue.settings.as_properties()})
    except DiskFull as exc:  # served with the defaults; the next start repairs it
        server_log.error("queue %s: registration not rewritten: %s", queue.path.display, exc)
