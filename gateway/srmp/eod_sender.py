"""Exactly-once in-order delivery, sender side (pure; time is an argument).
docs/srmp.md, "Exactly-once in-order delivery: sender"; [MC-MQSRM] §3.1.7.2.3.

One stream per outgoing queue. A message's stream number is derived, not stored: ``current``
is its outgoing-queue sequence minus the stream's first sequence, plus one. Only the stream id
and that first sequence are persisted (once, before the stream's first send), so numbers never
change across restarts and cost no write per message. Sequences that never became messages (a
refused commit) leave gaps; ``previous`` bridges them and messages that left the stream
(expired): it is the number of the nearest earlier message still pending, else the last
acknowledged one.

Resends: when no stream receipt has moved the stream for the current interval, the oldest
unacknowledged messages (at most ``limit``, a window's worth) are sent again; the interval
steps through the schedule (Windows: 30 s x3, 5 min x3, 30 min x3, then 6 h) and starts over
from each receipt that makes progress. Only the head: the receiver takes a stream in order,
so the head is what it can be missing, and a duplicate of it makes the receiver acknowledge
again when only the receipt was lost. Resending everything would flood a store-and-forward
hop with tens of thousands of copies whenever receipts lag behind a deep backlog. A receiver
that rejects a whole stream for ``restart_after`` rounds has probably lost its state: the
remaining messages move to a new stream (docs/architecture.md §Store and forward).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

__all__ = ["SenderStream", "DEFAULT_RESEND_S", "stream_id_for"]

DEFAULT_RESEND_S = (30.0, 30.0, 30.0, 300.0, 300.0, 300.0, 1800.0, 1800.0, 1800.0, 21600.0)


def stream_id_for(qm_guid: str, seconds: int, ordinal: int) -> str:
    """``uid:{QM GUID}\\{64-bit}``: high 32 bits a time in seconds, low 32 bits an ordinal."""
    return f"uid:{qm_guid}\\{((seconds & 0xFFFFFFFF) << 32) | (ordinal & 0xFFFFFFFF)}"


@dataclass(slots=True)
class SenderStream:
    stream_id: str
    base_seq: int  # the outgoing-queue sequence of current = 1
    send_receipts_to: str
    last_acked: int = 0
    pending: list[int] = field(default_factory=list)  # currents not acknowledged, ascending
    sent: set[int] = field(default_factory=set)  # pending ones sent since the last round
    round_started: float | None = None
    round: int = 0  # resend rounds without progress

    def current(self, seq: int) -> int:
        assert seq >= self.base_seq
        return seq - self.base_seq + 1

    def seq(self, current: int) -> int:
        return self.base_seq + current - 1

    def add(self, seq: int) -> int:
        """A message of the outgoing queue joins the stream; returns its number."""
        current = self.current(seq)
        if current > self.last_acked and current not in self.pending:
            bisect.insort(self.pending, current)
        return current

    def previous(self, current: int) -> int:
        """What ``<previous>`` says for ``current`` now."""
        index = bisect.bisect_left(self.pending, current)
        return self.pending[index - 1] if index > 0 else self.last_acked

    def left(self, current: int) -> None:
        """The message left the stream unacknowledged (expired, dead-lettered)."""
        index = bisect.bisect_left(self.pending, current)
        if index < len(self.pending) and self.pending[index] == current:
            del self.pending[index]
        self.sent.discard(current)

    def acknowledged(self, last_ordinal: int, now: float) -> list[int]:
        """A stream receipt: the numbers it covers (to remove from the outgoing queue).
        Progress restarts the receipt wait for what remains sent."""
        if last_ordinal <= self.last_acked:
            return []
        index = bisect.bisect_right(self.pending, last_ordinal)
        done, self.pending = self.pending[:index], self.pending[index:]
        self.sent.difference_update(done)
        self.last_acked = last_ordinal
        self.round = 0
        self.round_started = now if self.sent else None
        return done

    def to_send(self) -> list[int]:
        """Pending numbers not yet sent in this round, in order."""
        return [c for c in self.pending if c not in self.sent]

    def mark_sent(self, current: int, now: float) -> None:
        self.sent.add(current)
        if self.round_started is None:
            self.round_started = now

    def resend_due(self, now: float, schedule: tuple[float, ...], limit: int) -> int:
        """When the receipt wait ran out: start a new round in which the oldest ``limit``
        pending messages are unsent again; returns how many (0: not due)."""
        if not self.pending or self.round_started is None or self.to_send():
            return 0
        wait = schedule[min(self.round, len(schedule) - 1)]
        if now - self.round_started < wait:
            return 0
        self.round += 1
        self.round_started = None
        again = self.pending[:limit]
        self.sent.difference_update(again)
        return len(again)

    def next_deadline(self, schedule: tuple[float, ...]) -> float | None:
        if not self.pending or self.round_started is None:
            return None
        return self.round_started + schedule[min(self.round, len(schedule) - 1)]

    @property
    def finished(self) -> bool:
        return not self.pending
