"""Store errors -> the queue domain's errors (the MSMQ class or error each one means)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from gateway.queues.errors import Conflict, QueueFull, StorageFull, TooLarge, Unavailable
from store.errors import (
    DiskFull,
    MachineJournalQuotaExceeded,
    MachineQuotaExceeded,
    MessageTooLarge,
    QueueJournalQuotaExceeded,
    QueueQuotaExceeded,
    StoreClosed,
    StoreFailed,
    UnknownRecord,
)

__all__ = ["store_call"]

T = TypeVar("T")


async def store_call(call: Awaitable[T]) -> T:
    """Await a store call; a machine quota or a stopped store is 503 (senders retry), a queue
    quota or a full disk 507, both with Retry-After; a message too large 413."""
    try:
        return await call
    except (MachineQuotaExceeded, MachineJournalQuotaExceeded) as exc:
        raise Unavailable(str(exc), type_slug="MQ_ERROR_INSUFFICIENT_RESOURCES",
                          retry_after_s=5) from exc
    except (QueueQuotaExceeded, QueueJournalQuotaExceeded) as exc:
        raise QueueFull(str(exc), type_slug="MQMSG_CLASS_NACK_Q_EXCEED_QUOTA",
                        retry_after_s=5,
                        fields={"class": "MQMSG_CLASS_NACK_Q_EXCEED_QUOTA"}) from exc
    except DiskFull as exc:
        raise StorageFull(str(exc), type_slug="MQ_ERROR_MESSAGE_STORAGE_FAILED",
                          retry_after_s=10) from exc
    except MessageTooLarge as exc:
        raise TooLarge(str(exc), type_slug="MQ_ERROR_INSUFFICIENT_RESOURCES") from exc
    except (StoreFailed, StoreClosed) as exc:
        raise Unavailable(f"the store takes no writes: {exc}",
                          type_slug="MQ_ERROR_SERVICE_NOT_AVAILABLE", retry_after_s=5) from exc
    except UnknownRecord as exc:
        raise Conflict(str(exc), type_slug="message-gone") from exc
