"""How many CPUs this process may use: the default number of front processes.

The scheduler's affinity mask (``taskset``, systemd's ``CPUAffinity=``) and a cgroup v2 CPU
quota (``docker run --cpus``, systemd's ``CPUQuota=``) both limit it; ``os.cpu_count``
sees neither.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["usable_cpus", "quota_cpus"]


def usable_cpus(proc: Path = Path("/proc/self/cgroup"),
                cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """The CPUs of the affinity mask, fewer when the cgroup's quota allows less (at least 1)."""
    count = len(os.sched_getaffinity(0))
    quota = _cgroup_quota(proc, cgroup_root)
    return max(1, min(count, quota) if quota is not None else count)


def quota_cpus(cpu_max: str) -> int | None:
    """The CPUs a cgroup v2 ``cpu.max`` line ("quota period", or "max period") allows,
    rounded up; None without a quota or for a line this does not read."""
    fields = cpu_max.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    if quota <= 0 or period <= 0:
        return None
    return max(1, math.ceil(quota / period))


def _cgroup_quota(proc: Path, root: Path) -> int | None:
    """The smallest quota of this process's cgroup v2 group and the groups above it (each
    limits it), or None when none has one."""
    try:
        lines = proc.read_text().splitlines()
    except OSError:
        return None
    group = next((root / line[3:].lstrip("/") for line in lines if line.startswith("0::")),
                 None)
    if group is None:
        return None
    found: list[int] = []
    for place in (group, *group.parents):
        try:
            quota = quota_cpus((place / "cpu.max").read_text())
        except OSError:
            quota = None
        if quota is not None:
            found.append(quota)
        if place == root:
            break
    return min(found) if found else None
