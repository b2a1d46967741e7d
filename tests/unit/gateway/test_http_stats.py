"""gateway.http_stats: the request counter and latency histogram as Prometheus renders
them, compared with prometheus_client's own Counter and Histogram fed the same requests."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

from gateway.http_stats import HttpStats

BOUNDS = (0.00025, 0.001, 0.01, 0.1, 1.0, 10.0)
REQUEST = st.tuples(st.sampled_from(["/healthz", "/v1/queues/{path}/messages"]),
                    st.sampled_from(["GET", "POST"]), st.sampled_from([200, 201, 503]),
                    st.sampled_from([0.0, 0.00025, 0.0003, 0.001, 0.05, 1.0, 99.0]))


def _samples(text: bytes) -> set[str]:
    return {line for line in text.decode().splitlines()
            if line and not line.startswith("#") and "_created" not in line}


@settings(max_examples=100, deadline=None)
@given(st.lists(REQUEST, max_size=40))
def test_renders_as_prometheus_client_does(requests: list[tuple[str, str, int, float]]) -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    stats = HttpStats(BOUNDS)
    ours.register(stats)
    counter = Counter("entrepot_http_requests", "d", ["route", "method", "status"],
                      registry=theirs)
    histogram = Histogram("entrepot_http_request_duration_seconds", "d", ["route", "method"],
                          buckets=BOUNDS, registry=theirs)
    for route, method, status, seconds in requests:
        stats.record(route, method, status, seconds)
        counter.labels(route, method, str(status)).inc()
        histogram.labels(route, method).observe(seconds)
    assert _samples(generate_latest(ours)) == _samples(generate_latest(theirs))


def test_methods_from_the_network_are_bounded() -> None:
    stats = HttpStats(BOUNDS)
    for n in range(1000):
        stats.record("unmatched", f"X{n}", 405, 0.001)
    families = list(stats.collect())
    assert [s.labels["method"] for s in families[0].samples] == ["other"]
    assert families[0].samples[0].value == 1000
