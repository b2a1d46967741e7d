"""``entrepot spark-ingest`` / ``spark-report``: the job in JSON Lines through the shared
session, and the command line refusing bad values with exit 2 (or 1 for a failed job)."""

from __future__ import annotations

import base64
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gateway.spark.ingest import IngestJob, run_ingest
from gateway.spark.report import run_report
from tests.helpers import REPO_ROOT, GatewayProcess
from tests.spark.support import call, create_queue, produce


def test_ingest_json_lines_then_report(spark: Any, spark_gateway: GatewayProcess,
                                       tmp_path: Path) -> None:
    create_queue(spark_gateway.url, "jsonfeed")
    produce(spark_gateway.url, "jsonfeed", 0, 120, size=48)
    summary = run_ingest(IngestJob(source=spark_gateway.url, queues=("jsonfeed",),
                                   output=str(tmp_path / "table"),
                                   checkpoint=str(tmp_path / "checkpoint"), fmt="json",
                                   master="local[1]", available_now=True, consumer="j"))
    assert summary["rows"] == 120
    rows = spark.read.json(str(tmp_path / "table")).select("seq", "label").collect()
    assert sorted(r.seq for r in rows) == list(range(1, 121))
    assert not spark.sparkContext._jsc.sc().isStopped(), "a job leaves a running session be"
    report = run_report(str(tmp_path / "table"), str(tmp_path / "report"), fmt="json",
                        master="local[1]")
    assert report["rows"] == 120


def test_parquet_ingest_has_no_dictionaries_for_ids_and_bodies(
        spark: Any, spark_gateway: GatewayProcess, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    create_queue(spark_gateway.url, "pqfeed")
    same = base64.b64encode(b"the same body every time").decode()
    call(f"{spark_gateway.url}/v1/batch", "POST", {"messages": [  # a dictionary would pay
        {"queue": "pqfeed", "body_base64": same} for _ in range(200)]})
    summary = run_ingest(IngestJob(source=spark_gateway.url, queues=("pqfeed",),
                                   output=str(tmp_path / "table"),
                                   checkpoint=str(tmp_path / "checkpoint"),
                                   master="local[1]", available_now=True, consumer="pq"))
    assert summary["rows"] == 200
    assert spark.read.parquet(str(tmp_path / "table")).select("seq").distinct().count() == 200
    encodings: dict[str, set[str]] = {}
    for part in (tmp_path / "table").glob("part-*.parquet"):
        group = pq.ParquetFile(part).metadata.row_group(0)
        for index in range(group.num_columns):
            column = group.column(index)
            encodings.setdefault(column.path_in_schema, set()).update(column.encodings)
    assert not any("DICTIONARY" in e for e in encodings["body"] | encodings["id"])
    assert any("DICTIONARY" in e for e in encodings["queue"])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, code, fragment", [
    (["spark-ingest", "--source", "ftp://x", "--queue", "q", "--output", "o",
      "--checkpoint", "c"], 2, "--source 'ftp://x'"),
    (["spark-ingest", "--source", "http://127.0.0.1:1", "--queue", "q", "--output", "o",
      "--checkpoint", "c", "--trigger", "soon"], 2, "'soon'"),
    (["spark-ingest", "--source", "http://127.0.0.1:1", "--queue", "q", "--output", "o",
      "--checkpoint", "c", "--max-messages-per-batch", "0"], 2, "'0'"),
    (["spark-ingest", "--queue", "q"], 2, "--source"),
    (["spark-report", "--input", "/nonexistent/table", "--output", "o"], 1,
     "no such table"),
])
def test_bad_command_lines(args: list[str], code: int, fragment: str) -> None:
    done = _cli(*args)
    assert done.returncode == code, done.stderr
    assert fragment in done.stderr
