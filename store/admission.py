"""What every write is checked for before anything is charged, numbered or written: a record
that fits one segment, fields the record header holds, a queue not being deleted. A write
that failed any of these later, in the writer thread, would stop the store."""

from __future__ import annotations

from store.errors import BadRecord, MessageTooLarge, QueueDeleted
from store.records import SendSpec

__all__ = ["Admission"]

_DELETED_KEPT = 4096  # the latest deleted queues refused by id (older ids are long unused)


class Admission:
    def __init__(self, payload_max: int) -> None:
        self.payload_max = payload_max
        self._deleted: dict[int, None] = {}  # oldest first

    def check(self, send: SendSpec) -> None:
        """Raises: MessageTooLarge, BadRecord or QueueDeleted; nothing is changed."""
        if len(send.payload) > self.payload_max:
            raise MessageTooLarge.of(len(send.payload), self.payload_max)
        BadRecord.check(send.priority, send.expires_ms)
        if send.queue_id in self._deleted:
            raise QueueDeleted(f"queue {send.queue_id} was deleted")

    def deleting(self, queue_id: int) -> None:
        """From now on no write into ``queue_id`` is admitted (its file is being removed)."""
        self._deleted[queue_id] = None
        if len(self._deleted) > _DELETED_KEPT:
            del self._deleted[next(iter(self._deleted))]

    def reopen(self, queue_id: int) -> None:
        """The deletion failed, or a new queue took the id."""
        self._deleted.pop(queue_id, None)
