"""Store errors -> the answers clients get (problem+json with the MSMQ class or error)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from gateway.errors import ProblemError
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
        raise ProblemError(503, str(exc), type_slug="MQ_ERROR_INSUFFICIENT_RESOURCES",
                           headers={"Retry-After": "5"}) from exc
    except (QueueQuotaExceeded, QueueJournalQuotaExceeded) as exc:
        raise ProblemError(507, str(exc), type_slug="MQMSG_CLASS_NACK_Q_EXCEED_QUOTA",
                           headers={"Retry-After": "5"},
                           extra={"class": "MQMSG_CLASS_NACK_Q_EXCEED_QUOTA"}) from exc
    except DiskFull as exc:
        raise ProblemError(507, str(exc), type_slug="MQ_ERROR_MESSAGE_STORAGE_FAILED",
                           headers={"Retry-After": "10"}) from exc
    except MessageTooLarge as exc:
        raise ProblemError(413, str(exc), type_slug="MQ_ERROR_INSUFFICIENT_RESOURCES") from exc
    except (StoreFailed, StoreClosed) as exc:
        raise ProblemError(503, f"the store takes no writes: {exc}",
                           type_slug="MQ_ERROR_SERVICE_NOT_AVAILABLE",
                           headers={"Retry-After": "5"}) from exc
    except UnknownRecord as exc:
        raise ProblemError(409, str(exc), type_slug="message-gone") from exc
