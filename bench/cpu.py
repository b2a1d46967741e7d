"""CPU time of a server process and of its children (the fronts of ``server.workers``), from
/proc, so that a run can say what one message cost the process that owns the store."""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` so far (its own, not its children's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime (fields 14, 15)


def children(pid: int) -> list[int]:
    """The running children of ``pid``."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def rss_kib(pid: int) -> int:
    """Resident memory of ``pid`` (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS in /proc/{pid}/status")


def snapshot(pid: int) -> tuple[float, float]:
    """(CPU seconds of ``pid``, of its children together) now."""
    kids = 0.0
    for child in children(pid):
        try:
            kids += cpu_seconds(child)
        except FileNotFoundError:
            pass  # exited meanwhile
    return cpu_seconds(pid), kids
