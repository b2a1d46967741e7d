"""The default number of front processes: the CPUs the affinity mask and the cgroup quota
leave (gateway.fronts.cpus)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gateway.fronts.cpus import quota_cpus, usable_cpus


@pytest.mark.parametrize(("line", "cpus"), [
    ("max 100000", None), ("200000 100000", 2), ("150000 100000", 2), ("50000 100000", 1),
    ("100000 100000\n", 1), ("", None), ("x 100000", None), ("0 100000", None),
    ("100000 0", None), ("1 2 3", None)])
def test_a_cpu_max_line_reads_as_the_cpus_it_allows(line: str, cpus: int | None) -> None:
    assert quota_cpus(line) == cpus


def _cgroup(tmp_path: Path, quotas: dict[str, str]) -> tuple[Path, Path]:
    """A cgroup v2 tree under tmp_path with ``cpu.max`` files at the given groups, and a
    /proc/self/cgroup that puts this process in ``a/b/c``."""
    root = tmp_path / "cgroup"
    (root / "a" / "b" / "c").mkdir(parents=True)
    for group, line in quotas.items():
        (root / group / "cpu.max").write_text(line + "\n")
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text("1:name=systemd:/\n0::/a/b/c\n")
    return proc, root


def test_without_a_quota_the_affinity_mask_counts(tmp_path: Path) -> None:
    proc, root = _cgroup(tmp_path, {"a/b/c": "max 100000", "a": "max 100000"})
    assert usable_cpus(proc, root) == len(os.sched_getaffinity(0))


def test_the_smallest_quota_above_the_process_counts(tmp_path: Path) -> None:
    proc, root = _cgroup(tmp_path, {"a/b/c": "max 100000", "a/b": "100000 100000",
                                    "a": "400000 100000"})
    assert usable_cpus(proc, root) == 1


def test_no_cgroup_v2_line_leaves_the_affinity_mask(tmp_path: Path) -> None:
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text("4:memory:/x\n")
    assert usable_cpus(proc, tmp_path) == len(os.sched_getaffinity(0))
    assert usable_cpus(tmp_path / "missing", tmp_path) == len(os.sched_getaffinity(0))
