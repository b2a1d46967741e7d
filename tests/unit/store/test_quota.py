from __future__ import annotations

import pytest

from store.errors import (
    MachineJournalQuotaExceeded,
    MachineQuotaExceeded,
    QueueJournalQuotaExceeded,
    QueueQuotaExceeded,
)
from store.quota import Charge, QuotaBook


def _book() -> QuotaBook:
    book = QuotaBook(machine_quota=1000, machine_journal_quota=300)
    book.set_limit(1, 500)
    book.set_limit(9, 200)  # a journal-class queue
    return book


def test_charges_and_releases_add_up() -> None:
    book = _book()
    book.charge([Charge(1, 100, False), Charge(9, 50, True)])
    assert (book.machine_used, book.machine_journal_used) == (150, 50)
    assert book.queue_used[1] == 100
    book.release([Charge(9, 50, True)])
    assert (book.machine_used, book.machine_journal_used) == (100, 0)


def test_machine_quota_is_checked_first() -> None:
    book = _book()
    book.charge([Charge(2, 900, False)])
    # Over both the machine quota and queue 1's quota: the machine quota wins.
    with pytest.raises(MachineQuotaExceeded):
        book.check([Charge(1, 600, False)])


def test_queue_quota_and_journal_quotas_are_distinct() -> None:
    book = _book()
    with pytest.raises(QueueQuotaExceeded):
        book.check([Charge(1, 501, False)])
    with pytest.raises(QueueJournalQuotaExceeded):
        book.check([Charge(9, 201, True)])
    book.charge([Charge(8, 290, True)])
    with pytest.raises(MachineJournalQuotaExceeded):
        book.check([Charge(9, 20, True)])


def test_a_request_is_checked_whole_and_check_changes_nothing() -> None:
    book = _book()
    with pytest.raises(QueueQuotaExceeded):
        book.check([Charge(1, 300, False), Charge(1, 300, False)])
    assert book.machine_used == 0
    book.check([Charge(1, 250, False), Charge(1, 250, False)])


def test_zero_means_no_queue_quota() -> None:
    book = _book()
    book.set_limit(1, 0)
    book.check([Charge(1, 999, False)])


def test_several_messages_without_queue_limits_still_meet_the_machine_quotas() -> None:
    book = _book()
    book.check([Charge(2, 400, False), Charge(3, 400, False)])
    with pytest.raises(MachineQuotaExceeded):
        book.check([Charge(2, 600, False), Charge(3, 600, False)])
    book.charge([Charge(4, 250, True)])
    with pytest.raises(MachineJournalQuotaExceeded):
        book.check([Charge(2, 10, False), Charge(4, 200, True)])
    book.check([Charge(2, 300, False), Charge(4, 10, True)])


def test_take_charges_one_message_only_when_every_quota_allows_it() -> None:
    book = _book()
    book.take(Charge(1, 400, False))
    with pytest.raises(QueueQuotaExceeded):
        book.take(Charge(1, 101, False))
    book.take(Charge(9, 200, True))
    with pytest.raises(MachineJournalQuotaExceeded):
        book.take(Charge(8, 101, True))
    book.take(Charge(2, 400, False))
    with pytest.raises(MachineQuotaExceeded):  # over queue 1's quota too: machine first
        book.take(Charge(1, 101, False))
    assert (book.machine_used, book.machine_journal_used) == (1000, 200)
    assert (book.queue_used[1], book.queue_used[9], book.queue_used[8]) == (400, 200, 0)
