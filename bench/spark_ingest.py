"""``spark-ingest``: steady-state rows/s from entrepot into Parquet through the ``entrepot``
source on ``local[2]``, 1 KiB messages (goal >= 50,000 rows/s), through the same query
``entrepot spark-ingest`` starts (gateway.spark.ingest.start_query).

A real gateway is filled first (not timed). The streaming query then runs with availableNow
in batches of ``--batch`` messages; the steady rate is the rows of every batch after the
first (the first pays the Python worker start-up) over the time Spark spent on them. The
ceiling is the same query shape over the same rows already sitting in Parquet files (Spark's
file source into the same Parquet sink): what this Spark can write without entrepot.

    python -m bench.spark_ingest --requests 3000   # 400,000 messages in batches of 100,000
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import servers
from bench.forward import _json

_SIZE = 1024


def _fill(url: str, queue: str, count: int) -> None:
    body = base64.b64encode(os.urandom(_SIZE * 3 // 4))  # 1 KiB, barely compressible
    chunk = 1000
    _json(f"{url}/v1/queues/{queue}", "PUT", {})
    encoded = base64.b64encode(body).decode()
    for _ in range(0, count, chunk):
        _json(f"{url}/v1/batch", "POST", {"messages": [
            {"queue": queue, "body_base64": encoded} for _ in range(chunk)]})


def _steady(query: Any) -> tuple[int, float, list[tuple[int, int]]]:
    batches = [(int(p["numInputRows"]), int(p["durationMs"]["triggerExecution"]))
               for p in query.recentProgress if p["numInputRows"]]
    steady = batches[1:] or batches
    return sum(r for r, _ in steady), sum(ms for _, ms in steady) / 1000.0, batches


def _landing(directory: Path, count: int, per_file: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    body = os.urandom(_SIZE)
    directory.mkdir(parents=True)
    for first in range(0, count, per_file):
        rows = min(per_file, count - first)
        table = pa.table({"queue": ["bench"] * rows,
                          "seq": pa.array(range(first + 1, first + rows + 1), pa.int64()),
                          "body": pa.array([body] * rows, pa.binary())})
        pq.write_table(table, directory / f"{first:012d}.parquet")


def run(messages: int, batch: int) -> dict[str, object]:
    from gateway.spark.ingest import IngestJob, start_query
    from gateway.spark.session import spark_session

    spark = spark_session("local[2]", "entrepot-bench", {"spark.sql.shuffle.partitions": "2"})
    scratch = Path(tempfile.mkdtemp(prefix="spark-bench-", dir=servers._scratch()))
    try:
        with servers.gateway() as url:
            _fill(url, "bench", messages)
            started = time.monotonic()
            query = start_query(spark, IngestJob(
                source=url, queues=("bench",), output=str(scratch / "out"),
                checkpoint=str(scratch / "ck"), available_now=True,
                max_messages_per_batch=batch, max_messages_per_partition=batch // 4))
            query.awaitTermination()
            wall = time.monotonic() - started
            rows, seconds, batches = _steady(query)
        _landing(scratch / "landing", messages, batch // 4)
        ceiling_query = (spark.readStream.schema("queue STRING, seq BIGINT, body BINARY")
                         .option("maxFilesPerTrigger", "4").parquet(str(scratch / "landing"))
                         .writeStream.format("parquet").option("path", str(scratch / "out2"))
                         .option("checkpointLocation", str(scratch / "ck2"))
                         .trigger(availableNow=True).start())
        ceiling_query.awaitTermination()
        ceiling_rows, ceiling_seconds, _ = _steady(ceiling_query)
    finally:
        spark.stop()
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    rate = rows / seconds if seconds else 0.0
    ceiling = ceiling_rows / ceiling_seconds if ceiling_seconds else 0.0
    return {"scenario": "spark-ingest", "concurrency": 2, "msgs_per_s": round(rate),
            "p50_ms": 0.0, "p99_ms": 0.0, "ceiling": "spark-file-source",
            "ceiling_msgs_per_s": round(ceiling), "ceiling_p99_ms": 0.0,
            "ratio": round(rate / ceiling, 3) if ceiling else 0.0,
            "goal_rows_per_s": 50_000, "goal_ratio": round(rate / 50_000, 3),
            "messages": messages, "batches": batches, "wall_s": round(wall, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_ingest")
    parser.add_argument("--levels", default="2", help="ignored: always local[2]")
    parser.add_argument("--requests", type=int, default=3000,
                        help="scale: messages = 50 x this, at most 400,000")
    parser.add_argument("--batch", type=int, default=100_000,
                        help="rows per micro-batch (maxMessagesPerBatch), 4 partitions each")
    args = parser.parse_args()
    messages = max(min(args.requests * 50, 800_000), 4 * args.batch)
    json.dump([run(messages, args.batch)], sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
