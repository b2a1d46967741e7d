"""Counts since start of what happens to messages, by name (a queue, a link's destination)
and event, read by the metrics (``entrepot_queue_messages_total``, link counters) and the
status page's message rates.

The names become Prometheus label values and senders choose them (a queue created on
demand, a remote destination), so the first ``names_max`` names get their own count and
every later one is summed under ``OTHER``: memory and series stay bounded, and each count
only grows (a name never moves between its own count and ``OTHER``).
"""

from __future__ import annotations

from gateway.queues.internal import is_internal

__all__ = ["OTHER", "QUEUE_EVENTS", "Tally", "QueueEvents"]

OTHER = "_other"
# What a queue's messages do: arrive (a committed send, a copy, a redrive), leave by a
# delivered receive, expire, get a dead-letter copy, get purged, are received without the
# journal copy their queue keeps (no room in the journal), leave a log once every range
# consumer has read past them (retention).
QUEUE_EVENTS = ("sent", "received", "expired", "dead_lettered", "purged", "not_journaled",
                "consumed")
NAMES_MAX = 100  # the default of metrics.queues_max


class Tally:
    """``counts[name][event]``, with at most ``names_max`` names besides ``OTHER``."""

    def __init__(self, names_max: int = NAMES_MAX) -> None:
        self.names_max = names_max
        self.counts: dict[str, dict[str, int]] = {}

    @property
    def full(self) -> bool:
        """No room for another name: new ones are counted under OTHER."""
        return len(self.counts) - (OTHER in self.counts) >= self.names_max

    def label(self, name: str) -> str:
        """``name`` when it has its own count (taking one if there is room), else OTHER."""
        if name in self.counts:
            return name
        if self.full:
            return OTHER
        self.counts[name] = {}
        return name

    def count(self, name: str, event: str, n: int = 1) -> None:
        per = self.counts.get(name)
        if per is None:
            per = self.counts.setdefault(self.label(name), {})
        per[event] = per.get(event, 0) + n


class QueueEvents(Tally):
    """The queue manager's tally: client queues only (the gateway's own are not counted)."""

    def count(self, name: str, event: str, n: int = 1) -> None:
        per = self.counts.get(name)
        if per is not None:  # the hot path: a queue already counted
            per[event] = per.get(event, 0) + n
        elif n and not is_internal(name.lower()):
            super().count(name, event, n)
