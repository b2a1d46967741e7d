"""``python -m bench --contend CORES``: the noisy neighbour takes the CPU it is asked for while
the run lasts and is gone after it; a share the machine cannot give is refused up front."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.contend import contention, split
from tests.helpers import REPO_ROOT


def test_split_spreads_cores_over_as_few_processes_as_can_carry_them() -> None:
    assert split(0) == []
    assert split(0.3) == [0.3]
    assert split(1.0) == [1.0]
    if (os.cpu_count() or 1) >= 2:
        assert split(1.2) == [0.6, 0.6]


@pytest.mark.parametrize("cores", [-0.1, float("nan"), (os.cpu_count() or 1) + 0.5])
def test_split_refuses_what_the_machine_cannot_give(cores: float) -> None:
    with pytest.raises(ValueError, match="--contend"):
        split(cores)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_neighbour_takes_cpu_while_running_and_is_gone_after() -> None:
    started = time.monotonic()
    with contention(0.5) as pids:
        assert len(pids) == 1
        # Far more than an idle process takes (it gets there however loaded the machine;
        # the wait is an upper bound only), and at most what the wall clock allows.
        used = _cpu_seconds(pids[0])
        while used <= 0.1 and time.monotonic() - started < 60:
            time.sleep(0.05)
            used = _cpu_seconds(pids[0])
        assert 0.1 < used <= time.monotonic() - started, used
    assert not Path(f"/proc/{pids[0]}").exists()  # stopped and reaped


def test_bench_refuses_a_bad_share_naming_it() -> None:
    out = subprocess.run([sys.executable, "-m", "bench", "--contend", "-1"], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "--contend -1.0" in out.stderr


def test_the_neighbour_ends_when_its_run_is_killed() -> None:
    """A run killed with SIGKILL (no finally) leaves no busy process behind for long."""
    code = ("import os, sys, time\n"
            "from bench.contend import contention\n"
            "with contention(0.2) as pids:\n"
            "    print(pids[0], flush=True)\n"
            "    time.sleep(0.3)\n"
            "    os.kill(os.getpid(), 9)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == -9
    pid = int(out.stdout.split()[0])
    try:
        deadline = time.monotonic() + 30  # an upper bound only
        while _running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _running(pid), "the neighbour outlived its run"
    finally:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    """Alive and not a zombie (an exited orphan waits for whoever reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
