"""``entrepot spark-report``: a PySpark batch job over the table ``spark-ingest`` wrote.

Volume per queue and hour (by arrival), end-to-end latency percentiles per queue — from
sending to the row being in the table (the time its part-file was written, Spark's
``_metadata.file_modification_time``), with the part up to the gateway beside it — and
counts per message class other than normal (what dead-letter queues hold: the class says
why). The aggregates run in Spark; the results are small, so the
files are written here: ``report.json``, ``volume.csv``, ``latency.csv``,
``dead_letters.csv`` and ``report.png``.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

from gateway.spark.ingest import table_formats

__all__ = ["run_report"]

_PERCENTILES = (0.5, 0.9, 0.99)
# Everything but the body: the report never needs it, and JSON Lines keep it as base64 text.
_READ_SCHEMA = ("queue STRING, seq BIGINT, id STRING, label STRING, priority INT, class STRING, "
                "correlation_id STRING, sent_at TIMESTAMP, arrived_at TIMESTAMP, "
                "content_type STRING")


def run_report(input_path: str, output_path: str, *, fmt: str = "parquet",
               master: str = "local[*]") -> dict[str, Any]:
    """Compute the report, write its files, and return its JSON document."""
    if not Path(input_path).exists() and "://" not in input_path:
        raise FileNotFoundError(f"--input {input_path}: no such table")
    found = table_formats(input_path)
    if found and fmt not in found:  # read as another format, the rows would be empty shells
        raise ValueError(f"--input {input_path} holds {', '.join(sorted(found))} part-files, "
                         f"not {fmt}: give --format {sorted(found)[0]}")
    from pyspark.sql import functions as F

    from gateway.spark.session import owned_session

    extra = {"spark.sql.shuffle.partitions": "2"} if master.startswith("local") else None
    with owned_session(master, "entrepot-report", extra, source=False,
                       installed_sources=False) as spark:
        reader = spark.read
        df = (reader.parquet(input_path) if fmt == "parquet"
              else reader.schema(_READ_SCHEMA).json(input_path))
        df = df.select("queue", "class", "sent_at", "arrived_at",
                       F.col("_metadata.file_modification_time").alias("in_table_at"))
        volume = [r.asDict() for r in (
            df.groupBy("queue", F.date_trunc("hour", "arrived_at").alias("hour"))
            .count().orderBy("queue", "hour").collect())]
        latency = _percentiles(F, df, "in_table_at")
        gateway_latency = _percentiles(F, df, "arrived_at")
        dead = [r.asDict() for r in (
            df.where(F.col("class") != "MQMSG_CLASS_NORMAL").groupBy("queue", "class")
            .count().orderBy("queue", "class").collect())]
        total = df.count()
    report = _document(total, volume, latency, gateway_latency, dead)
    _write(Path(output_path), report)
    return {"rows": total, "output": output_path,
            "files": sorted(os.listdir(output_path))}


def _percentiles(F: Any, df: Any, until: str) -> list[dict[str, Any]]:
    """Per queue: messages, the ``_PERCENTILES`` and the maximum of sent_at -> ``until``."""
    latency_ms = (F.unix_micros(until) - F.unix_micros("sent_at")) / 1000.0
    timed = df.where(F.col("sent_at").isNotNull() & F.col(until).isNotNull())
    return [r.asDict() for r in (
        timed.groupBy("queue").agg(
            F.count("*").alias("messages"),
            F.percentile_approx(latency_ms, list(_PERCENTILES), 10_000).alias("p"),
            F.max(latency_ms).alias("max_ms"))
        .orderBy("queue").collect())]


def _latency_rows(latency: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"queue": row["queue"], "messages": row["messages"],
             **{f"p{int(q * 100)}": round(float(p), 3)
                for q, p in zip(_PERCENTILES, row["p"] or [])},
             "max": round(float(row["max_ms"] or 0.0), 3)} for row in latency]


def _document(total: int, volume: list[dict[str, Any]], latency: list[dict[str, Any]],
              gateway_latency: list[dict[str, Any]], dead: list[dict[str, Any]]
              ) -> dict[str, Any]:
    return {
        "rows": total,
        "volume": [{"queue": v["queue"], "hour": v["hour"].strftime("%Y-%m-%dT%H:00:00Z")
                    if v["hour"] is not None else None, "messages": v["count"]}
                   for v in volume],
        "latency_ms": _latency_rows(latency),  # sent -> in the table
        "gateway_latency_ms": _latency_rows(gateway_latency),  # sent -> at the gateway
        "dead_letters": [{"queue": d["queue"], "class": d["class"], "messages": d["count"]}
                         for d in dead],
    }


def _write(out: Path, report: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    _csv(out / "volume.csv", ["queue", "hour", "messages"], report["volume"])
    _csv(out / "latency.csv", ["queue", "messages", "p50", "p90", "p99", "max"],
         report["latency_ms"])
    _csv(out / "dead_letters.csv", ["queue", "class", "messages"], report["dead_letters"])
    _chart(out / "report.png", report)


def _csv(path: Path, fields: list[str], rows: list[dict[str, Any]]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def _chart(path: Path, report: dict[str, Any]) -> None:
    """Messages per hour and queue (left) and latency percentiles per queue (right)."""
    import matplotlib

    matplotlib.use("Agg")  # no display: files only
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    hours = sorted({v["hour"] for v in report["volume"] if v["hour"]})
    queues = sorted({v["queue"] for v in report["volume"]})
    bottom = [0] * len(hours)
    for queue in queues:
        counts = {v["hour"]: v["messages"] for v in report["volume"] if v["queue"] == queue}
        heights = [counts.get(h, 0) for h in hours]
        left.bar([h[5:13].replace("T", " ") + "h" for h in hours], heights, bottom=bottom,
                 label=queue)
        bottom = [b + h for b, h in zip(bottom, heights)]
    left.set_title("messages per hour (arrival, UTC)")
    left.set_ylabel("messages")
    if queues:
        left.legend(fontsize="small")
    left.tick_params(axis="x", labelrotation=45)
    rows = report["latency_ms"]
    width = 0.25
    for index, key in enumerate(("p50", "p90", "p99")):
        right.bar([i + (index - 1) * width for i in range(len(rows))],
                  [row.get(key, 0) for row in rows], width, label=key)
    right.set_xticks(range(len(rows)), [row["queue"] for row in rows])
    right.set_title("latency sent -> in the table (ms)")
    right.set_ylabel("ms")
    right.legend(fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
