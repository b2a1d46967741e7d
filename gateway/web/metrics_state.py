"""Metrics read from the gateway's state at scrape time (a Prometheus custom collector):
queues and what happened to their messages, links, dead letters, quota, range consumers,
open transactions, mapping reloads, the store writer's histograms.

Read when scraped rather than updated on every message: the hot path pays nothing, and the
figures are exact at the moment of the scrape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from gateway.queues.events import OTHER, QUEUE_EVENTS, Tally
from gateway.web.state import GatewayState
from gateway.web.status import DeadLetterClasses, snapshot
from store.stats import Histogram

__all__ = ["StateCollector"]

_LINK_STATES = ("active", "waiting to connect", "inactive", "paused")


class StateCollector(Collector):
    def __init__(self, state: GatewayState, dead: DeadLetterClasses) -> None:
        self._state = state
        self._dead = dead

    def collect(self) -> Iterator[Metric]:
        doc = snapshot(self._state, self._dead, None)
        services = self._state.services
        # A queue's label is the one its counters use (gateway.queues.events), taken now if
        # there is room: the per-queue gauges are bounded by metrics.queues_max like them.
        label: Callable[[str], str] = (services.queue_manager.events.label
                                       if services is not None else str)
        yield from _queues(doc, label, _heads(self._state))
        yield _queue_events(self._state)
        yield from _links(doc, services.links.counts if services is not None else Tally())
        yield from _mapping(self._state)
        dead = GaugeMetricFamily("entrepot_dead_letters", "Dead letters held, by queue and "
                                 "message class (MSMQ's MQMSG_CLASS_* name).",
                                 labels=["queue", "class"])
        held: dict[tuple[str, str], int] = {}
        for item in doc["dead_letters"]:
            where = (label(item["queue"]), item["class"])
            held[where] = held.get(where, 0) + item["messages"]
        for (queue, name), count in sorted(held.items()):
            dead.add_metric([queue, name], count)
        yield dead
        yield _expired(self._state)
        yield from _transactions(self._state)
        store = doc.get("store")
        if store is not None:
            for key, text in (("used_bytes", "Bytes used against the machine quota."),
                              ("quota_bytes", "The machine quota."),
                              ("journal_used_bytes", "Bytes used by journal-class queues."),
                              ("journal_quota_bytes", "The machine journal quota.")):
                yield GaugeMetricFamily(f"entrepot_store_{key}", text, value=store[key])
        store_obj = self._state.store
        histograms = store_obj.writer_histograms() if store_obj is not None else None
        if histograms is not None:
            yield _histogram("entrepot_store_sync_seconds",
                             "Write + fdatasync time of one group-commit batch.", histograms[0])
            yield _histogram("entrepot_store_batch_jobs",
                             "Jobs (sends, commits, removals) per group-commit batch.",
                             histograms[1])


def _expired(state: GatewayState) -> Metric:
    expired = CounterMetricFamily(
        "entrepot_messages_expired", "Messages removed when their time-to-be-received "
        "passed, by outcome (dead_lettered, discarded).", labels=["outcome"])
    services = state.services
    counts = services.queue_manager.expiry.expired if services is not None else {}
    for outcome in ("dead_lettered", "discarded"):
        expired.add_metric([outcome], counts.get(outcome, 0))
    return expired


def _transactions(state: GatewayState) -> Iterator[Metric]:
    services = state.services
    active, prepared, oldest = (services.transactions.census()
                                if services is not None else (0, 0, 0.0))
    count = GaugeMetricFamily("entrepot_transactions", "Open REST transactions, by state "
                              "(active, prepared).", labels=["state"])
    count.add_metric(["active"], active)
    count.add_metric(["prepared"], prepared)
    yield count
    yield GaugeMetricFamily("entrepot_transaction_prepared_oldest_age_seconds",
                            "Age of the oldest prepared transaction (0 with none): until "
                            "its coordinator commits or aborts it, it holds what it "
                            "received and its queues' range head.", value=oldest)


def _heads(state: GatewayState) -> dict[str, int]:
    """queue -> the sequence its next message will get (the range API's ``next``), for the
    queues with range consumers."""
    services = state.services
    if services is None or not state.ready:
        return {}
    qm, consumers = services.queue_manager, services.consumers
    return {queue.path.display: qm.store.readable_end(queue.queue_id)
            for queue in qm.all_queues() if consumers.positions(queue)}


def _queues(doc: dict[str, Any], label: Callable[[str], str], heads: dict[str, int]
            ) -> Iterator[Metric]:
    """Each queue under its label; those under ``_other`` summed (their oldest age the
    largest, their consumers one ``consumer="_other"`` lag, the largest)."""
    depth = GaugeMetricFamily("entrepot_queue_messages", "Messages in a queue.", labels=["queue"])
    size = GaugeMetricFamily("entrepot_queue_bytes", "Bytes a queue's messages occupy.",
                             labels=["queue"])
    age = GaugeMetricFamily("entrepot_queue_oldest_age_seconds",
                            "Age of the oldest message waiting in a queue.", labels=["queue"])
    position = GaugeMetricFamily("entrepot_consumer_position", "Committed position of a "
                                 "registered range consumer.", labels=["queue", "consumer"])
    lag = GaugeMetricFamily("entrepot_consumer_lag", "Messages between a range consumer's "
                            "committed position and its queue's head (the range API's lag).",
                            labels=["queue", "consumer"])
    rows: dict[str, list[float]] = {}
    positions: dict[tuple[str, str], int] = {}
    lags: dict[tuple[str, str], int] = {}
    for queue in doc["queues"]:
        name = label(queue["path"])
        row = rows.setdefault(name, [0, 0, 0.0])
        row[0] += queue["messages"]
        row[1] += queue["bytes"]
        row[2] = max(row[2], queue["oldest_age_s"])
        head = heads.get(queue["path"])
        for consumer, at in queue["consumers"].items():
            behind = max(0, (head if head is not None else at) - at)
            if name == OTHER:  # positions of different queues are not comparable
                lags[(OTHER, OTHER)] = max(lags.get((OTHER, OTHER), 0), behind)
            else:
                positions[(name, consumer)] = at
                lags[(name, consumer)] = behind
    for name, (messages, size_bytes, oldest) in sorted(rows.items()):
        depth.add_metric([name], messages)
        size.add_metric([name], size_bytes)
        age.add_metric([name], oldest)
    for key, at in sorted(positions.items()):
        position.add_metric(list(key), at)
    for key, behind in sorted(lags.items()):
        lag.add_metric(list(key), behind)
    yield from (depth, size, age, position, lag)


def _queue_events(state: GatewayState) -> Metric:
    family = CounterMetricFamily(
        "entrepot_queue_messages", "Messages of a queue since start, by event: sent (arrived "
        "in it), received (delivered), expired, dead_lettered, purged, not_journaled "
        "(received without its journal copy: no room in the journal), consumed (read by "
        "every range consumer and removed by retention). Queues beyond "
        "metrics.queues_max are summed under queue=\"_other\".", labels=["queue", "event"])
    counts = state.services.queue_manager.events.counts if state.services is not None else {}
    for queue in sorted(counts):
        per = counts[queue]
        if per:
            for event in QUEUE_EVENTS:
                family.add_metric([queue, event], per.get(event, 0))
    return family


def _links(doc: dict[str, Any], counts: Tally) -> Iterator[Metric]:
    """Each link (message links and receipt lanes) under its destination; those without a
    label of their own (``Tally.label``) summed under ``_other``: their backlog and
    unacknowledged messages added, states counted, the oldest age the largest."""
    state = GaugeMetricFamily(
        "entrepot_link_state", "Links in each state: 1 for a link's current state (a count "
        "of links under destination=\"_other\").", labels=["destination", "state"])
    backlog = GaugeMetricFamily("entrepot_link_backlog", "Messages in a link's outgoing "
                                "queue (receipts waiting, for a receipt lane).",
                                labels=["destination"])
    unacked = GaugeMetricFamily("entrepot_link_unacked", "Stream messages waiting for a "
                                "stream receipt.", labels=["destination"])
    age = GaugeMetricFamily("entrepot_link_oldest_age_seconds", "Age of the oldest message "
                            "waiting to be acknowledged on a link.", labels=["destination"])
    shown: dict[str, dict[str, float]] = {}
    for link in doc["links"]:
        destination = str(link["destination"])
        label = destination if destination in counts.counts else OTHER
        row = shown.setdefault(label, dict.fromkeys(
            ("backlog", "unacked", "oldest_age_s", *_LINK_STATES), 0.0))
        row["backlog"] += link["backlog"]
        row["unacked"] += link["unacked"]
        row["oldest_age_s"] = max(row["oldest_age_s"], link["oldest_age_s"])
        if link["state"] in row:
            row[link["state"]] += 1
    for label, row in sorted(shown.items()):
        for name in _LINK_STATES:
            state.add_metric([label, name.replace(" ", "_")], row[name])
        backlog.add_metric([label], row["backlog"])
        unacked.add_metric([label], row["unacked"])
        age.add_metric([label], row["oldest_age_s"])
    retries = CounterMetricFamily("entrepot_link_retries", "Failed attempts of a link since "
                                  "start (each is retried after a back-off).",
                                  labels=["destination"])
    acked = CounterMetricFamily("entrepot_link_acknowledged", "Stream messages acknowledged "
                                "by stream receipts since start.", labels=["destination"])
    for label, per in sorted(counts.counts.items()):
        retries.add_metric([label], per.get("retries", 0))
        acked.add_metric([label], per.get("acknowledged", 0))
    yield from (state, backlog, unacked, age, retries, acked)


def _mapping(state: GatewayState) -> Iterator[Metric]:
    loader = state.mapping
    yield CounterMetricFamily("entrepot_mapping_reloads", "Times the mapping files were "
                              "(re)loaded since start.",
                              value=loader.reloads if loader is not None else 0)
    yield CounterMetricFamily("entrepot_mapping_rejected_files", "Mapping files rejected "
                              "(malformed, DTD, unreadable) since start.",
                              value=loader.rejected_total if loader is not None else 0)


def _histogram(name: str, text: str, histogram: Histogram) -> Metric:
    counts, total = histogram.snapshot()
    buckets, running = [], 0
    for bound, count in zip([*map(str, histogram.bounds), "+Inf"], counts):
        running += count
        buckets.append((bound, running))
    return HistogramMetricFamily(name, text, buckets=buckets, sum_value=total)
