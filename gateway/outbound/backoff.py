"""The one back-off of everything the gateway sends (links and receipts), and the warning a
failing destination logs: once when it starts failing, again at most every ``REMIND_S``
while it goes on failing, and an INFO line when it answers again — not a line per attempt.
"""

from __future__ import annotations

import random
import time

from gateway.logs import server_log

__all__ = ["backoff_s", "Failures", "BASE_S", "REMIND_S"]

BASE_S = 0.1  # the first retry waits about 0.2 s, the next about 0.4 s, and so on
REMIND_S = 600.0  # a destination failing for long is named again every 10 minutes


def backoff_s(failures: int, cap_s: float) -> float:
    """The wait after ``failures`` failures in a row: ``BASE_S`` doubled per failure, at most
    ``cap_s``, with jitter (half to all of it) so that many senders do not retry in step."""
    return min(cap_s, BASE_S * 2.0 ** min(max(failures, 0), 30)) * (0.5 + random.random() / 2)


class Failures:
    """One destination's failures in a row, the back-off they call for, and its log lines.

    ``what`` names the destination in the log (``link to URL``, ``receipts to URL``).
    """

    def __init__(self, what: str, cap_s: float) -> None:
        self.what = what
        self.cap_s = cap_s
        self.in_a_row = 0
        self._warned_at: float | None = None  # None: not failing now

    def failed(self, problem: str) -> float:
        """Count a failure; returns the back-off (s) before the next attempt."""
        self.in_a_row += 1
        delay = backoff_s(self.in_a_row, self.cap_s)
        now = time.monotonic()
        if self._warned_at is None or now - self._warned_at >= REMIND_S:
            first = self._warned_at is None
            self._warned_at = now
            server_log.warning("%s %s: %s (%d failed attempt(s) in a row); next attempt "
                               "in %.1fs, back-off up to %gs", self.what,
                               "failing" if first else "still failing", problem,
                               self.in_a_row, delay, self.cap_s)
        return delay

    def succeeded(self) -> None:
        if self._warned_at is not None:
            server_log.info("%s: answering again after %d failed attempt(s)", self.what,
                            self.in_a_row)
        self.in_a_row = 0
        self._warned_at = None
