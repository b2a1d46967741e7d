"""``python -m bench.report FILE`` prints the tables of docs/performance.md from a results
file: every figure in them comes from the file."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO_ROOT
from tests.unit.test_bench_goals import RECORDS


def _document(records: list[dict[str, object]]) -> dict[str, object]:
    return {"date": "2031-02-03T04:05:06+00:00", "command": "python -m bench --quick --json x",
            "machine": {"nproc": 7, "cpu_model": "Test CPU 9000", "kernel": "9.9.9-test",
                        "python": "3.99.1", "machine": "x86_64"},
            "wrk_version": "wrk 4.1.0-test", "client": "wrk", "quick": True,
            "contend_cores": 0.0, "elapsed_s": 321, "failed": [], "records": records}


def _report(tmp_path: Path, document: dict[str, object]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(document))
    return subprocess.run([sys.executable, "-m", "bench.report", str(path)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)


def _cells(out: str, scenario: str, concurrency: str) -> list[str]:
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == f"`{scenario}`" and cells[1] == concurrency:
            return cells
    raise AssertionError(f"no row for {scenario} at {concurrency}:\n{out}")


def test_the_table_is_built_from_the_files_values(tmp_path: Path) -> None:
    express = {"scenario": "rest-express", "concurrency": 64, "msgs_per_s": 12345.6,
               "p50_ms": 1.234, "p99_ms": 9.876, "ceiling": "nostore",
               "ceiling_msgs_per_s": 23456.7, "ratio": 0.526, "acknowledged": 20500,
               "stored": 20500, "check": "ok"}
    records = [express if r["scenario"] == "rest-express" else r for r in RECORDS]
    done = _report(tmp_path, _document(records))
    assert done.returncode == 0, done.stderr
    assert _cells(done.stdout, "rest-express", "64") == [
        "`rest-express`", "64", "12,346/s", "nostore 23,457/s", "0.53", "1.23", "9.88",
        "20,500", "20,500"]
    assert _cells(done.stdout, "memory", "-")[2] == "150 B/message"
    assert _cells(done.stdout, "recovery", "-")[2] == "3.20 s/GiB"
    for fact in ("2031-02-03", "7 x Test CPU 9000", "9.9.9-test", "Python 3.99.1",
                 "wrk 4.1.0-test", "`python -m bench --quick --json x`", "321 s"):
        assert fact in done.stdout
    # The goals table of the same run follows, from the same values.
    assert "| `rest-express` | REST send, express | >= 0.7 of nostore | 64 | 0.53 (12,346 vs " \
        "23,457/s) | **no** |" in done.stdout

    express["msgs_per_s"], express["stored"] = 11111.0, 20499
    express["check"] = "FAILED: stored 20499 != acknowledged 20500"
    changed = _report(tmp_path, _document(records))
    cells = _cells(changed.stdout, "rest-express", "64")
    assert cells[2] == "11,111/s" and cells[8] == "**20,499 (FAILED)**"


def test_a_file_missing_a_goals_record_is_refused(tmp_path: Path) -> None:
    records = [r for r in RECORDS if r["scenario"] != "rest-receive"]
    done = _report(tmp_path, _document(records + [
        {"scenario": "rest-receive", "concurrency": 16, "msgs_per_s": 1.0, "ratio": 0.1,
         "ceiling": "nostore", "ceiling_msgs_per_s": 10.0, "p50_ms": 1.0, "p99_ms": 1.0}]))
    assert done.returncode == 1
    assert "no record: rest-receive at C = 64" in done.stderr


def test_several_files_each_keep_their_run_line_and_a_later_record_stands(
        tmp_path: Path) -> None:
    first = tmp_path / "quick.json"
    first.write_text(json.dumps(_document(RECORDS)))
    spark = {"scenario": "spark-ingest", "concurrency": 2, "msgs_per_s": 3_000, "ratio": 0.5,
             "ceiling": "spark-file-source", "ceiling_msgs_per_s": 6_000, "wall_s": 66.0,
             "ceiling_wall_s": 33.0, "p50_ms": 0.0, "p99_ms": 0.0}
    second = tmp_path / "spark.json"
    second.write_text(json.dumps({**_document([spark]), "command": "python -m bench spark"}))
    done = subprocess.run([sys.executable, "-m", "bench.report", str(first), str(second)],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "`python -m bench --quick --json x`" in done.stdout
    assert "`python -m bench spark`" in done.stdout
    goal = [line for line in done.stdout.splitlines() if line.startswith("| `spark-ingest` |")
            and "wall clock" in line]
    assert goal == ["| `spark-ingest` | Spark ingest to Parquet, wall clock, 200,000 varied "
                    "rows | >= 0.8 of Spark's file source | 2 | 0.50 (66.0 s vs 33.0 s; 3,000 "
                    "rows/s) | **no** |"], done.stdout


def test_the_published_tables_are_those_the_committed_results_give() -> None:
    """docs/performance.md's generated part is what bench.report prints from the committed
    results files it names: no figure is typed by hand, and none goes stale silently."""
    page = (REPO_ROOT / "docs" / "performance.md").read_text()
    begin = re.search(r"<!-- BEGIN GENERATED: bench/results — written by `python -m "
                      r"bench\.report ([^`]+)`;\n[^\n]*-->\n", page)
    assert begin, "docs/performance.md has no generated part naming its command"
    end = page.index("<!-- END GENERATED: bench/results -->", begin.end())
    files = begin.group(1).split()
    assert all((REPO_ROOT / f).is_file() for f in files), files
    done = subprocess.run([sys.executable, "-m", "bench.report", *files], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert page[begin.end():end].strip() == done.stdout.strip()
