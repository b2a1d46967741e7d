"""Quota arithmetic (pure: no I/O), in MSMQ's order (docs/store.md §Quotas).

Every message counts towards the machine quota (queues, outgoing queues, journals). Messages
in journal-class queues (queue journals, the machine journal, the dead-letter queues) also
count towards the machine journal quota. Each queue may have its own quota (0 = none); for a
journal-class queue that is the journal quota of the queue it belongs to.

The machine quota is checked first, then the machine journal quota, then the queue's own. A
request is checked whole (all its messages) and charged only if every check passes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from store.errors import (
    MachineJournalQuotaExceeded,
    MachineQuotaExceeded,
    QueueJournalQuotaExceeded,
    QueueQuotaExceeded,
    QueueQuotaTooSmall,
    QuotaExceeded,
)
from store.framing import RecordFlags
from store.records import Placed

__all__ = ["Charge", "QuotaBook", "charges_by_queue"]


class Charge(NamedTuple):  # one per stored message: a tuple is the cheapest to build
    queue_id: int
    size: int
    journal: bool


class QuotaBook:
    """Bytes used against each quota; limits set per queue by the registry."""

    def __init__(self, *, machine_quota: int, machine_journal_quota: int) -> None:
        self.machine_quota = machine_quota
        self.machine_journal_quota = machine_journal_quota
        self.machine_used = 0
        self.machine_journal_used = 0
        self.queue_used: defaultdict[int, int] = defaultdict(int)
        self.queue_limits: dict[int, int] = {}
        # How a refusal names a queue (the store's registry knows their paths).
        self.names: Callable[[int], str] = str

    def set_limit(self, queue_id: int, quota: int) -> None:
        assert quota >= 0
        if quota:
            self.queue_limits[queue_id] = quota
        else:
            self.queue_limits.pop(queue_id, None)

    def check(self, charges: Iterable[Charge]) -> None:
        """Raise the first quota the charges would exceed; change nothing."""
        charges = list(charges)
        if len(charges) == 1 and self._fits(charges[0]):  # the common case, kept cheap
            return
        total = sum(c.size for c in charges)
        limits = self.queue_limits
        if (self.machine_used + total <= self.machine_quota
                and self.machine_journal_used + total <= self.machine_journal_quota
                and not any(c.queue_id in limits for c in charges)):
            return  # several messages, no queue limit among them: the machine checks suffice
        if self.machine_used + total > self.machine_quota:
            raise MachineQuotaExceeded(
                f"machine quota of {self.machine_quota} bytes is full "
                f"({self.machine_used} used, {total} more asked)")
        journal = sum(c.size for c in charges if c.journal)
        if journal and self.machine_journal_used + journal > self.machine_journal_quota:
            raise MachineJournalQuotaExceeded(
                f"machine journal quota of {self.machine_journal_quota} bytes is full "
                f"({self.machine_journal_used} used, {journal} more asked)")
        per_queue: defaultdict[int, int] = defaultdict(int)
        for charge in charges:
            per_queue[charge.queue_id] += charge.size
        for queue_id, size in per_queue.items():
            limit = self.queue_limits.get(queue_id, 0)
            if limit and self.queue_used[queue_id] + size > limit:
                is_journal = any(c.journal for c in charges if c.queue_id == queue_id)
                name = self.names(queue_id)
                if not is_journal and size > limit:
                    raise QueueQuotaTooSmall(
                        f"{size} bytes are larger than the whole quota of queue {name} "
                        f"({limit} bytes): they can never be stored there")
                error = QueueJournalQuotaExceeded if is_journal else QueueQuotaExceeded
                raise error(f"queue {name} quota of {limit} bytes is full "
                            f"({self.queue_used[queue_id]} used, {size} more asked)")

    def fits(self, charges: Iterable[Charge]) -> bool:
        """Whether ``check`` would pass now."""
        try:
            self.check(charges)
        except QuotaExceeded:
            return False
        return True

    def take(self, one: Charge) -> None:
        """``check`` then ``charge`` of one message: what every single send does."""
        if not self._fits(one):
            self.check((one,))
        self.machine_used += one.size
        if one.journal:
            self.machine_journal_used += one.size
        self.queue_used[one.queue_id] += one.size

    def _fits(self, one: Charge) -> bool:
        return (self.machine_used + one.size <= self.machine_quota
                and (not one.journal
                     or self.machine_journal_used + one.size <= self.machine_journal_quota)
                and (one.queue_id not in self.queue_limits
                     or self.queue_used[one.queue_id] + one.size
                     <= self.queue_limits[one.queue_id]))

    def charge(self, charges: Iterable[Charge]) -> None:
        for charge in charges:
            self.machine_used += charge.size
            if charge.journal:
                self.machine_journal_used += charge.size
            self.queue_used[charge.queue_id] += charge.size

    def release(self, charges: Iterable[Charge]) -> None:
        for charge in charges:
            self.machine_used -= charge.size
            if charge.journal:
                self.machine_journal_used -= charge.size
            self.queue_used[charge.queue_id] -= charge.size
            assert self.machine_used >= 0
            assert self.queue_used[charge.queue_id] >= 0


def charges_by_queue(records: Sequence[Placed]) -> list[Charge]:
    """One charge per queue and class: recovery charges a million records at once."""
    by_flags: dict[tuple[int, int], int] = {}
    for record in records:  # flag values are few: the enum arithmetic runs once per value
        key = (record.queue_id, record.flags)
        by_flags[key] = by_flags.get(key, 0) + record.size
    totals: dict[tuple[int, bool], int] = {}
    for (queue_id, flags), size in by_flags.items():
        journal = (queue_id, bool(flags & RecordFlags.JOURNAL))
        totals[journal] = totals.get(journal, 0) + size
    return [Charge(queue_id, size, journal) for (queue_id, journal), size in totals.items()]
