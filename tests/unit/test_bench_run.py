"""``python -m bench`` end to end on a real gateway: wrk drives it, the queue holds what was
acknowledged, and the results file says how and where the run was made."""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO_ROOT


def test_a_quick_run_writes_its_results_file(tmp_path: Path) -> None:
    out = tmp_path / "results" / "quick.json"
    args = ["--quick", "--only", "rest-express", "--concurrency", "64", "--requests", "300",
            "--json", str(out)]
    done = subprocess.run([sys.executable, "-m", "bench", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    document = json.loads(out.read_text())
    assert document["command"] == "python -m bench " + " ".join(args)
    assert document["machine"]["nproc"] == os.cpu_count()
    assert document["machine"]["kernel"] == platform.release()
    assert document["machine"]["python"] == platform.python_version()
    assert document["machine"]["cpu_model"]
    assert document["wrk_version"].startswith("wrk ") and document["client"] == "wrk"
    when = datetime.datetime.fromisoformat(document["date"])
    assert abs((datetime.datetime.now(datetime.UTC) - when).total_seconds()) < 3600
    assert document["failed"] == []
    records = {r["scenario"]: r for r in document["records"]}
    assert set(records) == {"ceiling-nostore", "ceiling-fsync", "rest-express"}
    express = records["rest-express"]
    assert express["concurrency"] == 64 and express["client"] == "wrk"
    assert express["statuses"] == {"201": 300}
    assert express["acknowledged"] == express["stored"] == 300 + express["warmup"]
    assert express["check"] == "ok"
    assert express["ratio"] == round(express["msgs_per_s"] / express["ceiling_msgs_per_s"], 3)
    assert records["ceiling-fsync"]["check"] == "ok"
    assert "| `rest-express` | REST send, express |" in done.stdout  # its goal, judged
