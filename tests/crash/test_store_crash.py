"""SIGKILL a committing writer at random moments; after every restart nothing acknowledged is
lost, nothing removed comes back, and no transaction shows in part."""

from __future__ import annotations

import os
import random
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.crash.checker import Ledger, check
from tests.helpers import REPO_ROOT


def _one_cycle(root: Path, seed: int, rng: random.Random, ledger: Ledger) -> int:
    proc = subprocess.Popen([sys.executable, "-m", "tests.crash.store_child", str(root), str(seed)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO_ROOT)
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    buffer = b""
    ready_at: float | None = None
    kill_after = rng.uniform(0.02, 0.4)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if ready_at is not None and time.monotonic() - ready_at >= kill_after:
            break
        for _ in selector.select(timeout=0.01):
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"writer exited: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
            buffer += chunk
            if ready_at is None and b"READY\n" in buffer:
                ready_at = time.monotonic()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    buffer += proc.stdout.read()
    selector.close()
    proc.stdout.close()
    proc.stderr.close()  # type: ignore[union-attr]
    assert ready_at is not None, "writer never became ready"
    lines = buffer.decode(errors="replace").split("\n")
    with (root.parent / "ledger.log").open("a") as trail:  # kept for a post-mortem
        trail.write(f"# cycle {seed}\n" + "\n".join(lines[:-1]) + "\n")
    ledger.read(lines[:-1])  # the last piece has no newline: not acknowledged
    return check(root, ledger)


def _run(tmp_path: Path, cycles: int) -> None:
    rng = random.Random(int(os.environ.get("ENTREPOT_CRASH_SEED", "20261122")))
    ledger = Ledger()
    for cycle in range(cycles):
        try:
            _one_cycle(tmp_path / "data", cycle, rng, ledger)
        except AssertionError as exc:  # name what is needed to look at the failure again
            raise AssertionError(f"cycle {cycle} of {cycles} (data dir {tmp_path / 'data'}, "
                                 f"seed {os.environ.get('ENTREPOT_CRASH_SEED', '20261122')})"
                                 f": {exc}") from exc
    assert ledger.appended, "the writer acknowledged nothing: the test tested nothing"
    assert ledger.transactions


@pytest.mark.crash
@pytest.mark.timeout(600)
def test_kill_9_at_random_moments_30_cycles(tmp_path: Path) -> None:
    _run(tmp_path, 30)


@pytest.mark.crash
@pytest.mark.slow
@pytest.mark.timeout(7200)
def test_kill_9_at_random_moments_1000_cycles(tmp_path: Path) -> None:
    _run(tmp_path, 1000)
