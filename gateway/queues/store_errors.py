"""Store errors -> the queue domain's errors (the MSMQ class or error each one means)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from gateway.queues.errors import (
    BadRequest,
    Conflict,
    NotFound,
    QueueError,
    QueueFull,
    StorageFull,
    TooLarge,
    Unavailable,
)
from store.errors import (
    BadRecord,
    DiskFull,
    MachineJournalQuotaExceeded,
    MachineQuotaExceeded,
    MessageTooLarge,
    QueueDeleted,
    QueueJournalQuotaExceeded,
    QueueQuotaExceeded,
    QueueQuotaTooSmall,
    StoreBusy,
    StoreClosed,
    StoreError,
    StoreFailed,
    UnknownRecord,
)

__all__ = ["queue_error", "store_call"]

T = TypeVar("T")


async def store_call(call: Awaitable[T]) -> T:
    """Await a store call; its refusal raised as ``queue_error`` names it."""
    try:
        return await call
    except StoreError as exc:
        error = queue_error(exc)
        if error is None:
            raise
        raise error from exc


def queue_error(exc: StoreError) -> QueueError | None:
    """The queue domain's error for a store refusal (None: not a refusal the queue domain
    names): a machine quota or a stopped store is 503 (senders retry), a queue quota or a
    full disk 507, both with Retry-After; a message too large 413."""
    if isinstance(exc, (MachineQuotaExceeded, MachineJournalQuotaExceeded)):
        return Unavailable(str(exc), type_slug="MQ_ERROR_INSUFFICIENT_RESOURCES",
                           retry_after_s=5)
    if isinstance(exc, QueueQuotaTooSmall):  # no use retrying: no Retry-After
        return QueueFull(str(exc), type_slug="MQMSG_CLASS_NACK_Q_EXCEED_QUOTA",
                         fields={"class": "MQMSG_CLASS_NACK_Q_EXCEED_QUOTA"})
    if isinstance(exc, (QueueQuotaExceeded, QueueJournalQuotaExceeded)):
        return QueueFull(str(exc), type_slug="MQMSG_CLASS_NACK_Q_EXCEED_QUOTA", retry_after_s=5,
                         fields={"class": "MQMSG_CLASS_NACK_Q_EXCEED_QUOTA"})
    if isinstance(exc, DiskFull):
        return StorageFull(str(exc), type_slug="MQ_ERROR_MESSAGE_STORAGE_FAILED",
                           retry_after_s=10)
    if isinstance(exc, BadRecord):
        return BadRequest(str(exc), type_slug="bad-request")
    if isinstance(exc, MessageTooLarge):
        return TooLarge(str(exc), type_slug="MQ_ERROR_INSUFFICIENT_RESOURCES")
    if isinstance(exc, StoreBusy):  # out of file descriptors for a moment
        return Unavailable(str(exc), type_slug="MQ_ERROR_INSUFFICIENT_RESOURCES",
                           retry_after_s=5)
    if isinstance(exc, (StoreFailed, StoreClosed)):
        return Unavailable(f"the store takes no writes: {exc}",
                           type_slug="MQ_ERROR_SERVICE_NOT_AVAILABLE", retry_after_s=5)
    if isinstance(exc, QueueDeleted):  # deleted while the send was on its way
        return NotFound(f"the queue was deleted: {exc}", type_slug="MQ_ERROR_QUEUE_NOT_FOUND")
    if isinstance(exc, UnknownRecord):
        return Conflict(str(exc), type_slug="message-gone")
    return None
