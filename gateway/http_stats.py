"""HTTP requests answered and their latency, kept as plain numbers on the event loop and
turned into Prometheus metric families when ``/metrics`` is scraped.

Why not prometheus_client's Counter and Histogram: their ``inc`` and ``observe`` take a lock
and search the buckets in Python on every request, several times the cost of plain numbers,
on the event loop that is the limit of a REST send. Only the loop records and the
scrape runs on the loop too, so nothing here needs a lock.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

__all__ = ["HttpStats", "METHODS", "Snapshot", "since"]

# Methods counted by name; anything else a client sends is counted as "other" (the label
# values come from the network: bounded).
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})


class HttpStats:
    """``entrepot_http_requests_total{route,method,status}`` and
    ``entrepot_http_request_duration_seconds{route,method}`` (a histogram with ``bounds``:
    a route and method are one operation, e.g. a send and a browse of the same queue)."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self._bounds = tuple(bounds)
        self._labels = [*(repr(float(b)) for b in self._bounds), "+Inf"]  # as prometheus' le
        self._requests: dict[tuple[str, str, int], int] = {}
        # (route, method) -> one count a bound and one over the last, then the sum of seconds
        self._latency: dict[tuple[str, str], list[float]] = {}

    def record(self, route: str, method: str, status: int, seconds: float) -> None:
        method = method if method in METHODS else "other"
        key = (route, method, status)
        self._requests[key] = self._requests.get(key, 0) + 1
        counts = self._latency.get((route, method))
        if counts is None:
            counts = self._latency[(route, method)] = [0.0] * (len(self._bounds) + 2)
        counts[bisect.bisect_left(self._bounds, seconds)] += 1  # le: the first bound >= it
        counts[-1] += seconds

    def snapshot(self) -> tuple[dict[tuple[str, str, int], int],
                                dict[tuple[str, str], list[float]]]:
        """Everything counted so far, as plain data (a front process sends it to the store
        owner, which serves /metrics)."""
        return dict(self._requests), {k: list(v) for k, v in self._latency.items()}

    def add(self, requests: dict[tuple[str, str, int], int],
            latency: dict[tuple[str, str], list[float]]) -> None:
        """Count what another process counted (``since`` of two of its snapshots)."""
        for key, count in requests.items():
            self._requests[key] = self._requests.get(key, 0) + count
        for pair, counts in latency.items():
            mine = self._latency.get(pair)
            if mine is None:
                mine = self._latency[pair] = [0.0] * (len(self._bounds) + 2)
            for index, value in enumerate(counts):
                mine[index] += value

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily("entrepot_http_requests",
                                       "HTTP requests answered, by route, method and status.",
                                       labels=["route", "method", "status"])
        for (route, method, status), count in sorted(self._requests.items()):
            requests.add_metric([route, method, str(status)], count)
        yield requests
        latency = HistogramMetricFamily("entrepot_http_request_duration_seconds",
                                        "Time from request start to response, by route and "
                                        "method.", labels=["route", "method"])
        for (route, method), counts in sorted(self._latency.items()):
            cumulative = 0.0
            buckets = []
            for bound, taken in zip(self._labels, counts):
                cumulative += taken
                buckets.append((bound, cumulative))
            latency.add_metric([route, method], buckets, sum_value=counts[-1])
        yield latency


Snapshot = tuple[dict[tuple[str, str, int], int], dict[tuple[str, str], list[float]]]


def since(now: Snapshot, before: Snapshot) -> Snapshot:
    """What was counted between two snapshots of one process."""
    requests = {key: count - before[0].get(key, 0) for key, count in now[0].items()
                if count != before[0].get(key, 0)}
    latency = {}
    for pair, counts in now[1].items():
        old = before[1].get(pair)
        if old is None:
            latency[pair] = counts
        elif old != counts:
            latency[pair] = [a - b for a, b in zip(counts, old)]
    return requests, latency
