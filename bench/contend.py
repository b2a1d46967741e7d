"""A noisy neighbour for ``python -m bench --contend CORES``: processes that keep the CPU busy
for a fixed share of every 10 ms, for the whole run.

Why: a small VM's speed drifts in phases, and the scenarios that need both cores (SRMP:
gateway, parse worker and load generator) lose more of their ratio in the slow phases than
the ceilings do. A neighbour of known size makes such a phase on purpose, so whether a goal holds
on a busier machine can be measured again by anyone, instead of waited for.

    python -m bench.contend --share 0.3     # one process, busy 3 ms of every 10 ms
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

PERIOD_S = 0.010
_REPO_ROOT = Path(__file__).resolve().parent.parent


def split(cores: float) -> list[float]:
    """The neighbour's processes, each as its busy share of one core: ``cores`` spread evenly
    over as few processes as can carry it (one process can take at most one core)."""
    if not 0 <= cores <= (os.cpu_count() or 1) or math.isnan(cores):
        raise ValueError(f"--contend {cores}: takes 0 to {os.cpu_count() or 1} cores")
    count = math.ceil(cores)
    if count == 0:
        return []
    return [cores / count] * count


def spin(share: float, period_s: float = PERIOD_S) -> None:
    """Busy ``share`` of every period, asleep the rest; runs until killed, or until the run
    that started it is gone (a benchmark killed with SIGKILL leaves no busy orphan behind)."""
    busy = share * period_s
    parent = os.getppid()
    while os.getppid() == parent:
        started = time.perf_counter()
        while time.perf_counter() - started < busy:
            pass  # spinning on purpose: taking the CPU is this process's whole job
        time.sleep(max(0.0, period_s - (time.perf_counter() - started)))


@contextlib.contextmanager
def contention(cores: float) -> Iterator[list[int]]:
    """The neighbour running for the block; yields its processes' pids (none for 0 cores).

    Raises: ValueError for a share the machine cannot give (see ``split``)."""
    shares = split(cores)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for share in shares:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "bench.contend", "--share", str(share)],
                cwd=_REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        yield [proc.pid for proc in procs]
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.contend")
    parser.add_argument("--share", type=float, required=True,
                        help="busy share of one core, 0 to 1")
    args = parser.parse_args()
    if not 0 < args.share <= 1:
        parser.error(f"--share {args.share}: must be more than 0 and at most 1")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    spin(args.share)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
