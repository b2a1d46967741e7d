"""DeadLetterClasses: counts by class that follow arrivals and removals, each message decoded
once."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from gateway.msmq.classes import MessageClass
from gateway.web.status import DeadLetterClasses


class _Queue:
    queue_id = 4


class _QueueManager:
    def __init__(self) -> None:
        self.classes: dict[int, int] = {}  # sequence -> message class
        self.decoded: list[int] = []
        self.store = SimpleNamespace(seqs=lambda queue_id: self.classes.keys(),
                                     record=lambda queue_id, seq: SimpleNamespace(seq=seq))

    def decode(self, queue: Any, record: Any) -> Any:
        self.decoded.append(record.seq)
        return SimpleNamespace(properties=SimpleNamespace(message_class=self.classes[record.seq]))


def test_counts_follow_the_queue_and_each_message_is_decoded_once() -> None:
    qm: Any = _QueueManager()
    queue: Any = _Queue()
    dead = DeadLetterClasses()
    timeout = MessageClass.NACK_RECEIVE_TIMEOUT
    qm.classes = {1: timeout.value, 2: timeout.value, 3: MessageClass.NACK_Q_PURGED.value}
    assert dead.count(qm, queue) == {timeout.msmq_name: 2,
                                     MessageClass.NACK_Q_PURGED.msmq_name: 1}
    del qm.classes[3]
    del qm.classes[1]
    qm.classes[9] = 0xFFFE  # a class this gateway does not name
    assert dead.count(qm, queue) == {timeout.msmq_name: 1, str(0xFFFE): 1}
    assert dead.count(qm, queue) == {timeout.msmq_name: 1, str(0xFFFE): 1}
    assert sorted(qm.decoded) == [1, 2, 3, 9], "each message decoded once"
