"""Prometheus metrics: one registry per application, so tests can run several apps at once."""

from __future__ import annotations

import platform
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Info,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
    generate_latest,
)

from gateway.http_stats import HttpStats

__all__ = ["Metrics", "CONTENT_TYPE_LATEST", "VERSION", "SnakeCaseLabels"]


def _version() -> str:
    try:
        return version("entrepot")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


VERSION = _version()

# Latency buckets from 250 µs (a group-committed write on a fast disk) to 10 s (a long poll).
_LATENCY_BUCKETS_S = (
    0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)


def _snake(value: str) -> str:
    """A label value as Prometheus users expect it: SRMP names its kinds in kebab-case
    (``stream-receipt``), the metrics say ``stream_receipt``."""
    return value.replace("-", "_")


class SnakeCaseLabels:
    """A labelled counter whose label values are made snake_case, whoever counts."""

    def __init__(self, counter: Counter) -> None:
        self._counter = counter

    def labels(self, *values: str) -> Counter:
        return self._counter.labels(*map(_snake, values))


class Metrics:
    """The gateway's metric families, registered in a private registry."""

    def __init__(self) -> None:
        # A counter is its ``_total`` sample alone: prometheus_client's ``_created`` gauge
        # beside each one doubles the series and is not in the Prometheus text format.
        disable_created_metrics()  # type: ignore[no-untyped-call]  # unannotated upstream
        self.registry = CollectorRegistry(auto_describe=True)
        Info("entrepot_build", "The running gateway's version and Python.",
             registry=self.registry).info({"version": VERSION,
                                           "python": platform.python_version()})
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.http = HttpStats(_LATENCY_BUCKETS_S)
        self.registry.register(self.http)
        self.http_in_flight = Gauge(
            "entrepot_http_requests_in_flight",
            "Requests being handled now.",
            registry=self.registry,
        )
        self.in_flight_now: Callable[[], int] = lambda: 0  # the middleware's count
        self.http_connections = Gauge(
            "entrepot_http_connections",
            "Client connections open now, in every serving process (over TLS from its "
            "accept, while its handshake is made).",
            registry=self.registry,
        )
        self.http_connections_refused = Counter(
            "entrepot_http_connections_refused",
            "Connections closed as they were accepted: over server.connections_max, or over "
            "a process's share of its open-file limit.",
            registry=self.registry,
        )
        self.http_long_polls = Gauge(
            "entrepot_http_long_polls_parked",
            "Receives waiting for a message now (server.long_polls_max caps them).",
            registry=self.registry,
        )
        self.srmp_messages = Counter(
            "entrepot_srmp_messages",
            "SRMP messages received, by kind (user or receipt type) and outcome (stored, "
            "duplicate, out_of_order, quota_dropped, rejected).",
            ["kind", "outcome"],
            registry=self.registry,
        )
        self._srmp_counts: dict[tuple[str, str], Callable[[], None]] = {}
        self.srmp_receipts = SnakeCaseLabels(Counter(
            "entrepot_srmp_receipts_sent",
            "Receipts posted to senders, by kind and result (sent, failed, dropped, "
            "superseded, not_allowed, rate_limited).",
            ["kind", "result"],
            registry=self.registry,
        ))
        self.srmp_parse_workers_started = Counter(
            "entrepot_srmp_parse_workers_started",
            "SRMP parse worker processes started (more than srmp.parse_workers: some died).",
            registry=self.registry,
        )
        self.srmp_streams = Gauge(
            "entrepot_srmp_incoming_streams",
            "Incoming exactly-once streams remembered.",
            registry=self.registry,
        )
        self.ready = Gauge(
            "entrepot_ready",
            "1 when the store is open and recovered and the gateway accepts messages.",
            registry=self.registry,
        )

    def srmp_message(self, kind: str, outcome: str) -> None:
        """Count one SRMP message: its labelled child is looked up once (``labels`` takes a
        lock and builds a key: 3x the cost of the increment, on every SRMP request)."""
        inc = self._srmp_counts.get((kind, outcome))
        if inc is None:
            if len(self._srmp_counts) >= 256:  # kinds and outcomes are few; bounded anyway
                self._srmp_counts.clear()
            inc = self._srmp_counts[(kind, outcome)] = self.srmp_messages.labels(
                _snake(kind), _snake(outcome)).inc
        inc()

    def render(self) -> bytes:
        """The registry in the Prometheus text format."""
        return generate_latest(self.registry)
