"""Fixed-bucket histograms the writer thread fills (stdlib only: the gateway exports them)."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Sequence

__all__ = ["Histogram", "SYNC_BUCKETS_S", "BATCH_BUCKETS"]

SYNC_BUCKETS_S = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


class Histogram:
    """Counts per upper bound (the last bucket is +Inf) and the sum; thread-safe."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self._counts = [0] * (len(self.bounds) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()

    def observe(self, value: float) -> None:
        with self._lock:
            self._counts[bisect.bisect_left(self.bounds, value)] += 1
            self._sum += value

    def snapshot(self) -> tuple[list[int], float]:
        """(counts per bucket, +Inf last; not cumulative), sum."""
        with self._lock:
            return list(self._counts), self._sum
