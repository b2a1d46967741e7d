"""Metrics read from the gateway's state at scrape time (a Prometheus custom collector):
queues and what happened to their messages, links, dead letters, quota, range consumers,
mapping reloads, the store writer's histograms.

Read when scraped rather than updated on every message: the hot path pays nothing, and the
figures are exact at the moment of the scrape.
"""

from __future__ import annotations

from collections.abc import Iterator
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
        yield from _queues(doc)
        yield _queue_events(self._state)
        services = self._state.services
        yield from _links(doc, services.links.counts if services is not None else Tally())
        yield from _mapping(self._state)
        dead = GaugeMetricFamily("entrepot_dead_letters", "Dead letters held, by queue and "
                                 "message class.", labels=["queue", "class"])
        for item in doc["dead_letters"]:
            dead.add_metric([item["queue"], item["class"]], item["messages"])
        yield dead
        yield _expired(self._state)
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


def _queues(doc: dict[str, Any]) -> Iterator[Metric]:
    depth = GaugeMetricFamily("entrepot_queue_messages", "Messages in a queue.", labels=["queue"])
    size = GaugeMetricFamily("entrepot_queue_bytes", "Bytes a queue's messages occupy.",
                             labels=["queue"])
    age = GaugeMetricFamily("entrepot_queue_oldest_age_seconds",
                            "Age of the oldest message waiting in a queue.", labels=["queue"])
    lag = GaugeMetricFamily("entrepot_consumer_position", "Committed position of a "
                            "registered range consumer.", labels=["queue", "consumer"])
    for queue in doc["queues"]:
        depth.add_metric([queue["path"]], queue["messages"])
        size.add_metric([queue["path"]], queue["bytes"])
        age.add_metric([queue["path"]], queue["oldest_age_s"])
        for name, position in queue["consumers"].items():
            lag.add_metric([queue["path"], name], position)
    yield from (depth, size, age, lag)


def _queue_events(state: GatewayState) -> Metric:
    family = CounterMetricFamily(
        "entrepot_queue_messages", "Messages of a queue since start, by event: sent (arrived "
        "in it), received (delivered), expired, dead_lettered, purged. Queues beyond "
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
