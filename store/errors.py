"""Errors raised by the store package.

    StoreError
    ├── StoreLocked          another process holds the data directory
    ├── StoreUnusable        the data directory cannot be created or written
    ├── StoreClosed          the store was closed, or stopped after a fatal I/O error
    ├── StoreFailed          a sync or write failed: the store is fail-stopped (never retried)
    ├── MessageTooLarge      a record cannot fit in one segment
    ├── BadRecord            a record's field is outside what the format holds
    ├── QuotaExceeded        (abstract) admission refused before any byte was written
    │   ├── MachineQuotaExceeded
    │   ├── MachineJournalQuotaExceeded
    │   ├── QueueQuotaExceeded
    │   │   └── QueueQuotaTooSmall   the message alone is larger than the whole quota
    │   └── QueueJournalQuotaExceeded
    ├── DiskFull             no room for new data (a segment, a queue's file); reads go on
    ├── UnknownRecord        a reference to a record that is not (or no longer) in the store
    ├── QueueDeleted         a write into a queue being (or that was) deleted
    └── CheckpointError      neither copy of a ping-pong checkpoint is valid

Damaged bytes on disk are not exceptions: scans return them as values and recovery quarantines
them (``store.recovery``).
"""

from __future__ import annotations

import errno

__all__ = [
    "StoreError",
    "StoreLocked",
    "StoreUnusable",
    "StoreClosed",
    "StoreFailed",
    "MessageTooLarge",
    "BadRecord",
    "QuotaExceeded",
    "MachineQuotaExceeded",
    "MachineJournalQuotaExceeded",
    "QueueQuotaExceeded",
    "QueueQuotaTooSmall",
    "QueueJournalQuotaExceeded",
    "DiskFull",
    "UnknownRecord",
    "QueueDeleted",
    "CheckpointError",
    "StoreBusy",
    "out_of_descriptors",
]


class StoreError(Exception):
    """Root of every error the store raises on purpose."""


class StoreLocked(StoreError):
    """Another process has the data directory open."""


class StoreUnusable(StoreError):
    """The data directory cannot be created, locked or written."""


class StoreClosed(StoreError):
    """The store is closed (or fail-stopped) and takes no more writes."""


class StoreFailed(StoreError):
    """A write or sync failed; the store stopped all writes and must be recovered by a restart."""


class MessageTooLarge(StoreError):
    """A record is larger than one segment can hold; nothing was written."""

    @classmethod
    def of(cls, size: int, largest: int) -> MessageTooLarge:
        return cls(f"message of {size} bytes exceeds the largest a segment holds "
                   f"({largest} bytes)")


class BadRecord(StoreError):
    """A record's priority or expiry time is outside what the record format holds; refused
    before anything is written (it would otherwise fail in the writer, which is fatal)."""

    @staticmethod
    def check(priority: int, expires_ms: int) -> None:
        """Raises: BadRecord unless the priority is 0..7 and the expiry fits the header's u64
        (the limits of store.framing's record header)."""
        if not (0 <= expires_ms < 1 << 64 and 0 <= priority <= 7):
            raise BadRecord(f"a record with priority {priority} and expiry {expires_ms} ms: "
                            "the store holds priorities 0..7 and expiry times 0 .. 2**64-1 ms")


class QuotaExceeded(StoreError):
    """A quota would be exceeded; nothing was written."""


class MachineQuotaExceeded(QuotaExceeded):
    """The machine quota over all messages is full."""


class MachineJournalQuotaExceeded(QuotaExceeded):
    """The machine journal quota (journals and dead-letter queues) is full."""


class QueueQuotaExceeded(QuotaExceeded):
    """The destination queue's own quota is full."""


class QueueQuotaTooSmall(QueueQuotaExceeded):
    """The message alone is larger than the queue's whole quota: it never fits there."""


class QueueJournalQuotaExceeded(QuotaExceeded):
    """The queue journal's quota is full."""


class DiskFull(StoreError):
    """The volume is full: new data (a segment, a queue's registration) was refused and
    nothing of it kept; reads and removals go on (``store.space``)."""


class UnknownRecord(StoreError):
    """No live record has that id."""


class QueueDeleted(StoreError):
    """A write into a queue ``delete_queue`` is deleting or deleted: refused, as its record
    would outlive the queue (and come back at the next start in a recovered queue)."""


class StoreBusy(StoreError):
    """The process has no file descriptor left (EMFILE, ENFILE) for a file the store must
    open: nothing was written or changed, the store goes on, and the checkpoint (or the
    write that needed one) can be tried again."""


def out_of_descriptors(exc: BaseException) -> bool:
    """An error that says the process (or the system) has no file descriptor left: the
    state of the process, not of the disk, and over once descriptors are closed."""
    return isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE)


class CheckpointError(StoreError):
    """Neither copy of a ping-pong checkpoint file is valid."""
