"""Metrics read from the gateway's state at scrape time (a Prometheus custom collector):
queues, links, dead letters, quota, range consumers, the store writer's histograms.

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
        yield from _links(doc)
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
    counts = state.queue_manager.expiry.expired if state.queue_manager is not None else {}
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


def _links(doc: dict[str, Any]) -> Iterator[Metric]:
    state = GaugeMetricFamily("entrepot_link_state", "1 for a link's current state.",
                              labels=["destination", "state"])
    retries = GaugeMetricFamily("entrepot_link_retries", "Retries since the link started.",
                                labels=["destination"])
    age = GaugeMetricFamily("entrepot_link_oldest_age_seconds", "Age of the oldest message "
                            "waiting to be acknowledged on a link.", labels=["destination"])
    for link in doc["links"]:
        for name in _LINK_STATES:
            state.add_metric([link["destination"], name], 1 if link["state"] == name else 0)
        retries.add_metric([link["destination"]], link["retries"])
        age.add_metric([link["destination"]], link["oldest_age_s"])
    yield from (state, retries, age)


def _histogram(name: str, text: str, histogram: Histogram) -> Metric:
    counts, total = histogram.snapshot()
    buckets, running = [], 0
    for bound, count in zip([*map(str, histogram.bounds), "+Inf"], counts):
        running += count
        buckets.append((bound, running))
    return HistogramMetricFamily(name, text, buckets=buckets, sum_value=total)
