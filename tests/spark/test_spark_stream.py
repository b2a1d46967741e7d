"""The ``entrepot`` source in real Spark (one shared local[1] session): streaming exactly once
across runs, admission control under availableNow, a trimmed range failing the query with
the range named, the batch read, and the report job over the ingested table."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from gateway.spark.report import run_report
from tests.helpers import GatewayProcess
from tests.spark.support import call, check_table, create_queue, head, payload, produce


def _ingest(spark: Any, gw: GatewayProcess, queues: str, out: Path, **options: str) -> Any:
    reader = spark.readStream.format("entrepot").option("url", gw.url).option("queues", queues)
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (reader.load().writeStream.format("parquet").option("path", str(out / "table"))
             .option("checkpointLocation", str(out / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return query


def test_two_runs_exactly_once_in_bounded_batches(spark: Any, spark_gateway: GatewayProcess,
                                                  tmp_path: Path) -> None:
    q = "stream1"
    create_queue(spark_gateway.url, q)
    produce(spark_gateway.url, q, 0, 500)
    first = _ingest(spark, spark_gateway, q, tmp_path, maxMessagesPerBatch="200",
                    consumer="s1")
    assert [p["numInputRows"] for p in first.recentProgress if p["numInputRows"]] == [
        200, 200, 100], "admission control holds under availableNow"
    produce(spark_gateway.url, q, 500, 300)
    _ingest(spark, spark_gateway, q, tmp_path, maxMessagesPerBatch="200", consumer="s1")
    check_table(spark, str(tmp_path / "table"), 800, q)
    # The consumer follows Spark's commits to the end of the last batch.
    assert head(spark_gateway.url, q)["consumers"]["s1"] == 801
    assert head(spark_gateway.url, q)["first"] == head(spark_gateway.url, q)["consumers"]["s1"]


def test_a_trimmed_range_fails_the_query_naming_it(spark: Any, spark_gateway: GatewayProcess,
                                                   tmp_path: Path) -> None:
    q = "stream2"
    create_queue(spark_gateway.url, q)
    produce(spark_gateway.url, q, 0, 50)
    _ingest(spark, spark_gateway, q, tmp_path, consumer="s2")
    produce(spark_gateway.url, q, 50, 50)
    call(f"{spark_gateway.url}/v1/queues/{q}/purge", "POST")  # an operator drops 1..100
    with pytest.raises(StreamingQueryException) as failure:
        _ingest(spark, spark_gateway, q, tmp_path, consumer="s2")
    assert "[51, 101) are gone" in str(failure.value)


def test_batch_read_and_report(spark: Any, spark_gateway: GatewayProcess,
                               tmp_path: Path) -> None:
    q = "stream3"
    create_queue(spark_gateway.url, q)
    produce(spark_gateway.url, q, 0, 40, size=32,
            properties={"sent_time": "2026-11-20T10:00:00Z"})
    df = spark.read.format("entrepot").option("url", spark_gateway.url).option(
        "queues", q).load()
    rows = df.orderBy("seq").collect()
    assert [r.seq for r in rows] == list(range(1, 41)) and rows[3].body == payload(3, 32)
    assert head(spark_gateway.url, q)["consumers"] == {}, "a batch read registers nobody"
    _ingest(spark, spark_gateway, q, tmp_path, consumer="s3")
    summary = run_report(str(tmp_path / "table"), str(tmp_path / "report"), master="local[1]")
    assert summary["rows"] == 40
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert sum(v["messages"] for v in report["volume"]) == 40
    [latency] = report["latency_ms"]
    assert latency["queue"] == q and latency["p50"] > 86_400_000, "sent two days earlier"
    with (tmp_path / "report" / "volume.csv").open() as handle:
        assert next(csv.DictReader(handle))["queue"] == q
    assert (tmp_path / "report" / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
