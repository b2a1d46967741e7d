"""``entrepot spark-ingest`` / ``spark-report``: the job in JSON Lines through the shared
session, and the command line refusing bad values with exit 2 (or 1 for a failed job)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gateway.spark.ingest import IngestJob, refuse_foreign_output, run_ingest
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
    # Read as Parquet, JSON part-files would be rows of nothing: refused naming the format.
    with pytest.raises(ValueError, match="holds json part-files, not parquet"):
        run_report(str(tmp_path / "table"), str(tmp_path / "wrong"), fmt="parquet",
                   master="local[1]")


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


def test_summary_counts_every_batch_and_report_latency_reaches_the_table(
        spark: Any, spark_gateway: GatewayProcess, tmp_path: Path) -> None:
    create_queue(spark_gateway.url, "countfeed")
    produce(spark_gateway.url, "countfeed", 0, 100, size=48)  # sent (and arrived) now
    time.sleep(1.5)  # a gap between arrival and ingestion (only a lower bound is checked)
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "2")
    try:
        summary = run_ingest(IngestJob(source=spark_gateway.url, queues=("countfeed",),
                                       output=str(tmp_path / "table"),
                                       checkpoint=str(tmp_path / "checkpoint"),
                                       master="local[1]", available_now=True,
                                       consumer="count", max_messages_per_batch=20))
    finally:
        spark.conf.unset("spark.sql.streaming.numRecentProgressUpdates")
    assert summary["rows"] == 100, "counted past Spark's recent progress"
    assert (summary["batch_count"], summary["batches"]) == (5, [0, 1, 2, 3, 4])
    report = run_report(str(tmp_path / "table"), str(tmp_path / "report"),
                        master="local[1]")
    assert report["rows"] == 100
    document = json.loads((tmp_path / "report" / "report.json").read_text())
    [latency] = document["latency_ms"]
    assert latency["messages"] == 100
    assert latency["p50"] >= 1500, "sent -> in the table includes the wait before ingestion"
    [gateway] = document["gateway_latency_ms"]  # the part up to the gateway, beside it
    assert gateway["messages"] == 100


def test_a_killed_batchs_part_file_is_set_aside(spark: Any, spark_gateway: GatewayProcess,
                                                tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    create_queue(spark_gateway.url, "orphanfeed")
    produce(spark_gateway.url, "orphanfeed", 0, 30, size=48)
    job = IngestJob(source=spark_gateway.url, queues=("orphanfeed",),
                    output=str(tmp_path / "table"), checkpoint=str(tmp_path / "checkpoint"),
                    master="local[1]", available_now=True, consumer="orphan")
    run_ingest(job)
    killed = tmp_path / "table" / "part-00000-0f0e0d0c-killed-c000.snappy.parquet"
    killed.write_bytes(b"")  # what a batch killed while writing leaves
    sidecar = killed.with_name(f".{killed.name}.crc")  # with Hadoop's checksum file
    sidecar.write_bytes(b"crc")
    produce(spark_gateway.url, "orphanfeed", 30, 30, size=48)
    summary = run_ingest(job)
    table = pq.read_table(tmp_path / "table")  # a reader that lists the directory itself
    assert sorted(table.column("seq").to_pylist()) == list(range(1, 61))
    assert not killed.exists() and (tmp_path / "table" / "_orphans" / killed.name).exists()
    assert not sidecar.exists() and (tmp_path / "table" / "_orphans" / sidecar.name).exists()
    assert (summary["rows"], summary["orphans_set_aside"]) == (30, 1)


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
    (["spark-ingest", "--source", "http://127.0.0.1:1", "--queue", "q", "--output", "o",
      "--checkpoint", "c", "--starting-offsets", "[1]"], 2, "'[1]': expected earliest"),
    (["spark-ingest", "--queue", "q"], 2, "--source"),
    (["spark-ingest", "--source", "http://127.0.0.1:1", "--queue", "q", "--output", "o",
      "--checkpoint", "c", "--token-file", "/nonexistent/key"], 2,
     "--token-file /nonexistent/key: No such file"),
    (["spark-report", "--input", "/nonexistent/table", "--output", "o"], 1,
     "no such table"),
])
def test_bad_command_lines(args: list[str], code: int, fragment: str) -> None:
    done = _cli(*args)
    assert done.returncode == code, done.stderr
    assert fragment in done.stderr


def test_a_job_whose_jvm_dies_says_so(spark_gateway: GatewayProcess, tmp_path: Path) -> None:
    """Spark's JVM killed under a running ``spark-ingest`` (as the OOM killer does): the
    command ends with exit 1 naming the JVM's end, not py4j's "Connection refused"."""
    create_queue(spark_gateway.url, "jvmfeed")
    job = subprocess.Popen(
        [sys.executable, "-m", "gateway", "spark-ingest", "--source", spark_gateway.url,
         "--queue", "jvmfeed", "--output", str(tmp_path / "table"), "--checkpoint",
         str(tmp_path / "checkpoint"), "--master", "local[1]", "--trigger", "1s",
         "--consumer", "jvmjob"], cwd=REPO_ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        consumers = f"{spark_gateway.url}/v1/queues/jvmfeed/consumers"
        while "jvmjob" not in json.dumps(call(consumers)):  # registered: the query runs
            assert job.poll() is None and time.monotonic() < deadline, job.stderr
            time.sleep(0.2)
        [jvm] = [pid for pid in _children(job.pid) if _comm(pid) == "java"]
        subprocess.run(["kill", "-9", str(jvm)], check=True)
        _, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            job.kill()
            job.communicate()
    assert job.returncode == 1, err
    assert ("Spark's JVM exited (killed by signal 9) while the job ran; it was killed by the "
            "kernel's out-of-memory killer" in err), err


def test_a_failed_job_says_why_on_one_short_line(spark_gateway: GatewayProcess,
                                                 tmp_path: Path) -> None:
    """Spark's message carries the source's error inside its own, with the traceback, the
    query and its state: the failure line is the source's error alone."""
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "spark-ingest", "--source", spark_gateway.url,
         "--queue", "nosuchq", "--output", str(tmp_path / "table"), "--checkpoint",
         str(tmp_path / "checkpoint"), "--master", "local[1]", "--available-now"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-3000:]
    [line] = [x for x in done.stderr.splitlines() if x.startswith("entrepot:")]
    assert line == (f"entrepot: spark-ingest failed: GatewayRequestError: GET "
                    f"{spark_gateway.url}/v1/queues/nosuchq/head: 404 no queue 'nosuchq'")


def _children(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:  # ended meanwhile
                continue
            if int(stat.rpartition(")")[2].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def _comm(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "comm").read_text().strip()
    except OSError:
        return ""


def test_bodies_of_megabytes_fit_a_small_driver(spark_gateway: GatewayProcess,
                                                tmp_path: Path) -> None:
    """60 bodies of 3.7 MB (220 MB, random: they do not compress) into Parquet with a 512 MiB
    driver on two cores, one task each: Parquet's size checks come often enough that no page
    or row group holds many of them."""
    import pyarrow.parquet as pq

    create_queue(spark_gateway.url, "bigfeed")
    digests = {}
    for seq in range(1, 61):
        body = os.urandom(3_700_000 + seq)
        digests[seq] = hashlib.sha256(body).hexdigest()
        request = urllib.request.Request(f"{spark_gateway.url}/v1/queues/bigfeed/messages",
                                         data=body, method="POST")
        with urllib.request.urlopen(request, timeout=60) as answer:
            assert answer.status == 201
    done = subprocess.run(
        [sys.executable, "-m", "gateway", "spark-ingest", "--source", spark_gateway.url,
         "--queue", "bigfeed", "--output", str(tmp_path / "table"), "--checkpoint",
         str(tmp_path / "checkpoint"), "--master", "local[2]", "--available-now",
         "--driver-memory", "512m", "--consumer", "big"],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    # One task per core by default (minPartitions: Spark's default parallelism), each
    # writing its part-file, so 512 MiB hold two tasks' pages at once.
    assert len(list((tmp_path / "table").glob("part-*.parquet"))) == 2
    table = pq.read_table(tmp_path / "table", columns=["seq", "body"])
    assert {seq: hashlib.sha256(body).hexdigest() for seq, body in zip(
        table.column("seq").to_pylist(), table.column("body").to_pylist())} == digests


def test_a_batch_budget_below_the_queues_is_refused_before_spark_starts(
        tmp_path: Path) -> None:
    done = _cli("spark-ingest", "--source", "http://127.0.0.1:1", "--queue", "a,b,c",
                "--output", str(tmp_path / "table"), "--checkpoint", str(tmp_path / "ck"),
                "--max-messages-per-batch", "2")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("entrepot: --max-messages-per-batch 2: at least one "
                                   "message per queue (3 queues)")
    assert list(tmp_path.iterdir()) == [], "nothing written"


def test_a_new_checkpoint_on_a_written_output_is_refused(tmp_path: Path) -> None:
    """A new checkpoint numbers its batches from 0 again, and Spark's file sink skips the
    numbers its output holds: the run's first batches would be dropped while the gateway
    frees their messages. spark-ingest refuses before Spark starts."""
    output, checkpoint = tmp_path / "table", tmp_path / "checkpoint"
    (output / "_spark_metadata").mkdir(parents=True)
    (output / "_spark_metadata" / "0").write_text("v1\n")
    args = ["spark-ingest", "--source", "http://127.0.0.1:1", "--queue", "q", "--output",
            str(output), "--checkpoint", str(checkpoint)]
    done = _cli(*args)
    assert done.returncode == 1, done.stderr
    assert f"output {output} holds batches another checkpoint wrote" in done.stderr
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text("v1\n")  # the checkpoint that wrote it
    refuse_foreign_output(IngestJob(source="http://x", queues=("q",), output=str(output),
                                    checkpoint=str(checkpoint)))


def test_sigterm_to_the_jobs_process_group_stops_it_cleanly(spark_gateway: GatewayProcess,
                                                            tmp_path: Path) -> None:
    """systemd's stop and ``timeout`` send SIGTERM to every process of the job, the JVM
    included: the job stops its query after the current batch and prints its summary (the
    JVM, which ignores it, is stopped by the job), as on SIGINT."""
    create_queue(spark_gateway.url, "termfeed")
    produce(spark_gateway.url, "termfeed", 0, 50, size=32)
    job = subprocess.Popen(
        [sys.executable, "-m", "gateway", "spark-ingest", "--source", spark_gateway.url,
         "--queue", "termfeed", "--output", str(tmp_path / "table"), "--checkpoint",
         str(tmp_path / "checkpoint"), "--master", "local[1]", "--trigger", "1s",
         "--consumer", "termjob"], cwd=REPO_ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        consumers = f"{spark_gateway.url}/v1/queues/termfeed/consumers/termjob"
        while _position(consumers) < 51:  # the first batch is committed: the query runs
            assert job.poll() is None and time.monotonic() < deadline, job.stderr
            time.sleep(0.2)
        os.killpg(job.pid, signal.SIGTERM)
        out, err = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.communicate()
    assert job.returncode == 0, err[-3000:]
    assert json.loads(out)["rows"] == 50


def _position(url: str) -> int:
    try:
        return int(call(url)["position"])
    except urllib.error.HTTPError:  # not registered yet
        return 0


def test_another_format_on_a_written_output_is_refused(tmp_path: Path) -> None:
    """A table is one format: JSON part-files among Parquet ones make it unreadable to
    either reader. spark-ingest refuses before Spark starts."""
    output, checkpoint = tmp_path / "table", tmp_path / "checkpoint"
    output.mkdir()
    (output / "part-00000-0f0e-c000.snappy.parquet").write_bytes(b"PAR1")
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text("v1\n")
    done = _cli("spark-ingest", "--source", "http://127.0.0.1:1", "--queue", "q", "--output",
                str(output), "--checkpoint", str(checkpoint), "--format", "json")
    assert done.returncode == 1, done.stderr
    assert f"output {output} holds parquet part-files, not json" in done.stderr
