"""The front processes' CPU time and memory, for /metrics: the owner's own ``process_*``
metrics (prometheus_client's ProcessCollector) describe the owner alone.

Read from ``/proc/<pid>/stat`` and ``/proc/<pid>/statm`` of each serving front at scrape
time; a front that exits between the listing and the read is left out of that scrape.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["FrontStats", "read_process"]

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def read_process(pid: int) -> tuple[float, int] | None:
    """(CPU seconds, user and system; resident bytes) of ``pid``, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # The command name, in parentheses, may hold spaces: the fields follow its ")".
            fields = stat.read().rpartition(b")")[2].split()
        with open(f"/proc/{pid}/statm", "rb") as statm:
            resident_pages = int(statm.read().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of proc(5)
    return (utime + stime) / _TICKS, resident_pages * _PAGE


class FrontStats(Collector):
    """``entrepot_front_cpu_seconds_total{front}`` and
    ``entrepot_front_resident_memory_bytes{front}``; ``serving()``: front index -> pid."""

    def __init__(self, serving: Callable[[], Mapping[int, int]]) -> None:
        self._serving = serving

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        cpu = CounterMetricFamily(
            "entrepot_front_cpu_seconds", "CPU time (user and system) of each front process "
            "since it started (a restarted front starts again from 0).", labels=["front"])
        rss = GaugeMetricFamily("entrepot_front_resident_memory_bytes",
                                "Resident memory of each front process.", labels=["front"])
        for index, pid in sorted(self._serving().items()):
            read = read_process(pid)
            if read is not None:
                cpu.add_metric([str(index)], read[0])
                rss.add_metric([str(index)], read[1])
        yield cpu
        yield rss
