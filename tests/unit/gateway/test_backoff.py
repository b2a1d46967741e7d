"""The shared back-off: doubling, capped, jittered; one WARNING per failing period."""

from __future__ import annotations

import logging

import pytest

from gateway.outbound.backoff import BASE_S, Failures, backoff_s


def test_backoff_doubles_with_jitter_and_stops_at_the_cap() -> None:
    for failures in range(1, 8):
        full = BASE_S * 2 ** failures
        for _ in range(50):
            assert full / 2 <= backoff_s(failures, 1000.0) <= full
    for _ in range(50):
        assert 1.5 <= backoff_s(40, 3.0) <= 3.0  # capped, still jittered
        assert backoff_s(10**6, 3.0) <= 3.0  # no overflow for a destination down for ever


def test_failures_warn_once_per_failing_period(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="gateway")
    failures = Failures("receipts to http://machine1", 2.0)
    delays = [failures.failed("HTTP 503 from http://relay/msmq") for _ in range(20)]
    assert all(0 < d <= 2.0 for d in delays) and failures.in_a_row == 20
    failures.succeeded()
    failures.failed("ConnectionRefusedError")
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in lines] == [logging.WARNING, logging.INFO, logging.WARNING]
    assert "http://machine1" in lines[0][1] and "HTTP 503" in lines[0][1]
    # The back-off: the wait before the next attempt (the first one's) and its cap.
    assert f"next attempt in {delays[0]:.1f}s" in lines[0][1], lines[0][1]
    assert "back-off up to 2s" in lines[0][1], lines[0][1]
    assert "20 failed attempt(s)" in lines[1][1]
    assert failures.in_a_row == 1
