"""One snapshot of what an operator asks first — queues and their message rates, links,
dead letters, quota, free disk, recent errors, version and uptime — for the status page,
the metrics and the admin CLI alike.

Cheap enough to take every second: per queue one decode (its oldest message), per
dead-letter message one decode the first time it is seen (its class is remembered by
sequence), the rest from counters the store keeps anyway.
"""

from __future__ import annotations

import collections
import logging
import shutil
import time
from typing import Any

from gateway.metrics import VERSION
from gateway.msmq.classes import MessageClass
from gateway.queues.internal import is_internal
from gateway.queues.manager import Queue, QueueManager
from gateway.web.state import GatewayState

__all__ = ["RecentErrors", "DeadLetterClasses", "MessageRates", "snapshot"]

_ERRORS_KEPT = 50
_RATE_WINDOW_S = 60.0  # message rates are averaged over about the last minute
_RATE_SPACING_S = 5.0  # one sample of the counts kept per this many seconds at most


class RecentErrors(logging.Handler):
    """The last warnings and errors of the gateway's loggers, for the status page."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: collections.deque[dict[str, str]] = collections.deque(maxlen=_ERRORS_KEPT)

    def emit(self, record: logging.LogRecord) -> None:
        if not record.name.startswith(("gateway", "store", "mapping")):
            return
        try:
            message = record.getMessage()
        except (TypeError, ValueError):
            message = str(record.msg)
        self.records.append({
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record.created)),
            "level": record.levelname.lower(), "logger": record.name,
            "message": message[:500]})


class DeadLetterClasses:
    """Dead letters held now, by queue and class. Each message is decoded once, when first
    counted; after that a refresh is set arithmetic over the queue's sequence numbers, not
    a decode of every dead letter (a refresh runs every 2 s while the status page is open
    and at every metrics scrape)."""

    def __init__(self) -> None:
        self._classes: dict[int, dict[int, str]] = {}  # queue number -> sequence -> class
        self._counts: dict[int, collections.Counter[str]] = {}

    def count(self, qm: QueueManager, queue: Queue) -> dict[str, int]:
        classes = self._classes.setdefault(queue.queue_id, {})
        counts = self._counts.setdefault(queue.queue_id, collections.Counter())
        live = qm.store.seqs(queue.queue_id)
        for seq in classes.keys() - live:
            counts[classes.pop(seq)] -= 1
        for seq in live - classes.keys():
            record = qm.store.record(queue.queue_id, seq)
            if record is None:
                continue
            number = qm.decode(queue, record).properties.message_class
            try:
                name = MessageClass(number).msmq_name
            except ValueError:
                name = str(number)
            classes[seq] = name
            counts[name] += 1
        return {name: count for name, count in counts.items() if count}


class MessageRates:
    """Messages sent to and received from each queue per second, over about the last minute:
    the queue manager's counts since start (gateway.queues.events) sampled at each status
    snapshot, a sample kept every few seconds (a bounded number of them).

    The first sample is the counts' start (all zero, at ``started``, a ``time.monotonic()``
    reading; by default when this object is made, with the application): a single look
    gets the average since start, and the window slides once a minute's samples exist."""

    def __init__(self, started: float | None = None) -> None:
        self._samples: collections.deque[tuple[float, dict[str, tuple[int, int]]]] = (
            collections.deque(maxlen=int(_RATE_WINDOW_S / _RATE_SPACING_S) + 1))
        self._samples.append((time.monotonic() if started is None else started, {}))

    def rates(self, counts: dict[str, dict[str, int]], now: float
              ) -> dict[str, tuple[float, float]] | None:
        """queue -> (sent, received) per second since the oldest sample of the window (the
        start, until the window has slid past it); None only when no time has passed."""
        # What leaves: received, or read by every range consumer (a log's outflow).
        current = {name: (per.get("sent", 0), per.get("received", 0) + per.get("consumed", 0))
                   for name, per in counts.items()}
        if not self._samples or now - self._samples[-1][0] >= _RATE_SPACING_S:
            self._samples.append((now, current))
        while len(self._samples) > 1 and now - self._samples[1][0] >= _RATE_WINDOW_S:
            self._samples.popleft()
        then, before = self._samples[0]
        elapsed = now - then
        if elapsed <= 0:
            return None
        out = {}
        for name, (sent, received) in current.items():
            sent_then, received_then = before.get(name, (0, 0))
            out[name] = ((sent - sent_then) / elapsed, (received - received_then) / elapsed)
        return out


def _oldest_age_s(qm: QueueManager, queue: Queue, now_ms: int) -> float:
    """Age of the oldest message waiting: the lowest live sequence at the head of the
    delivery lanes (a few stale entries at a lane's head are skipped, not popped)."""
    oldest = None
    for lane in queue.order:
        for index, seq in enumerate(lane):
            if index >= 64:
                break
            record = qm.store.record(queue.queue_id, seq)
            if record is not None:
                if oldest is None or record.seq < oldest.seq:
                    oldest = record
                break
    if oldest is None:
        return 0.0
    arrived = qm.decode(queue, oldest).properties.arrived_at_ms
    return round(max(0, now_ms - arrived) / 1000, 3) if arrived else 0.0


def snapshot(state: GatewayState, dead: DeadLetterClasses, errors: RecentErrors | None,
             rates: MessageRates | None = None) -> dict[str, Any]:
    """The status document (``GET /ui/status.json``); ``rates`` adds each queue's
    ``sent_per_s`` and ``received_per_s``."""
    services = state.services
    reason = state.readiness()
    doc: dict[str, Any] = {"ready": not reason, "reason": reason,
                           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "version": VERSION,
                           "uptime_s": round(max(0.0, time.time() - state.started_at), 1),
                           "queues": [], "links": [], "dead_letters": [], "errors": []}
    if errors is not None:
        doc["errors"] = list(reversed(errors.records))
    if services is None or not state.ready:
        return doc
    qm, consumers = services.queue_manager, services.consumers
    now_ms = int(time.time() * 1000)
    per_s = rates.rates(qm.events.counts, time.monotonic()) if rates is not None else None
    counted_full = qm.events.full
    for queue in sorted(qm.all_queues(), key=lambda q: q.path.canonical):
        if is_internal(queue.path.canonical):
            continue
        doc["queues"].append({
            "path": queue.path.display, "messages": qm.store.count(queue.queue_id),
            "bytes": qm.store.queue_bytes(queue.queue_id),
            "oldest_age_s": _oldest_age_s(qm, queue, now_ms),
            "transactional": queue.settings.transactional,
            "consumers": consumers.positions(queue)})
        if rates is not None:  # null for a queue past metrics.queues_max (not counted
            # on its own)
            found = per_s.get(queue.path.display, None if counted_full else (0.0, 0.0)
                              ) if per_s is not None else None
            doc["queues"][-1].update(
                sent_per_s=round(found[0], 3) if found else None,
                received_per_s=round(found[1], 3) if found else None)
        if queue.is_dead_letter:
            for name, count in sorted(dead.count(qm, queue).items()):
                doc["dead_letters"].append({"queue": queue.path.display, "class": name,
                                            "messages": count})
    doc["links"] = services.links.summaries()
    quotas = qm.store.quotas
    doc["store"] = {"used_bytes": quotas.machine_used, "quota_bytes": quotas.machine_quota,
                    "journal_used_bytes": quotas.machine_journal_used,
                    "journal_quota_bytes": quotas.machine_journal_quota}
    try:  # one statvfs: as cheap as the counters above
        disk = shutil.disk_usage(qm.store.data_dir.storage)
        doc["disk"] = {"free_bytes": disk.free, "total_bytes": disk.total}
    except OSError:  # the status page still shows the rest
        doc["disk"] = None
    return doc
