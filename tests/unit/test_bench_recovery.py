"""The recovery benchmark opens a store killed while appending, from a cold page cache."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from bench.store_recovery import drop_cache
from tests.helpers import REPO_ROOT


def _cached(path: Path) -> bool:
    """Whether the file's first page is in the page cache (a RWF_NOWAIT read would block)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.preadv(fd, [bytearray(4096)], 0, os.RWF_NOWAIT)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def test_drop_cache_leaves_no_page_of_any_file_in_the_cache(tmp_path: Path) -> None:
    paths = [tmp_path / "a.mq", tmp_path / "sub" / "b.idx"]
    paths[1].parent.mkdir()
    for path in paths:
        path.write_bytes(os.urandom(1 << 20))  # written, so cached (and dirty)
    assert all(_cached(p) for p in paths)
    assert drop_cache(tmp_path) == 2
    assert not any(_cached(p) for p in paths)


def _size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.mq")) if root.exists() else 0


def test_the_filler_is_killed_with_appends_going_on(tmp_path: Path) -> None:
    """It reports the target reached and keeps appending: the kill lands mid-write, and the
    store it leaves holds more than the target."""
    root = tmp_path / "data"
    me = [sys.executable, "-m", "bench.store_recovery", "--child"]
    with subprocess.Popen([*me, "fill", str(root), "256"], stdout=subprocess.PIPE,
                          cwd=REPO_ROOT) as filler:
        try:
            assert filler.stdout is not None
            assert filler.stdout.readline().strip() == b"FILLED"
            size_at_target = _size(root)
            deadline = time.monotonic() + 120
            while _size(root) <= size_at_target and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            filler.send_signal(signal.SIGKILL)
            filler.wait()
    opened = json.loads(subprocess.run([*me, "open", str(root)], check=True,
                                       capture_output=True, text=True, cwd=REPO_ROOT).stdout)
    assert opened["live"] > 256
    assert opened["files_dropped"] >= 1
