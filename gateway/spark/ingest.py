"""``entrepot spark-ingest``: a streaming query from the ``entrepot`` source into Parquet (or
JSON Lines) files with a checkpoint — exactly once, because Spark's file sink commits each
micro-batch through ``_spark_metadata`` and the source's ranges replay byte for byte.

Read the output through Spark (``spark.read.parquet(OUTPUT)``): a killed batch can leave
part-files that ``_spark_metadata`` does not list, and globbing would count them.
"""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass
from types import FrameType
from typing import Any

__all__ = ["IngestJob", "run_ingest", "start_query", "PARQUET_OPTIONS"]

log = logging.getLogger("entrepot.spark")

# Columns almost every row of which differs: a dictionary page would only be built to be
# dropped (bodies, ids, times). Without those attempts the Parquet sink writes 100,000-row
# batches in ~1.4 s instead of ~1.7 s here (bench/spark_ingest.py); label, class, queue and
# content type keep their dictionaries.
PARQUET_OPTIONS = {f"parquet.enable.dictionary#{column}": "false" for column in (
    "id", "body", "seq", "sent_at", "arrived_at", "correlation_id")}


@dataclass(frozen=True, slots=True)
class IngestJob:
    source: str
    queues: tuple[str, ...]
    output: str
    checkpoint: str
    fmt: str = "parquet"
    master: str = "local[*]"
    available_now: bool = False
    trigger_s: float = 10.0
    consumer: str = "spark"
    token: str = ""
    cafile: str = ""
    starting_offsets: str = "earliest"
    max_messages_per_batch: int = 0
    max_messages_per_partition: int = 20_000
    driver_memory: str = ""


def run_ingest(job: IngestJob) -> dict[str, Any]:
    """Run the query until it ends (``available_now``) or until SIGTERM/SIGINT; returns a
    summary (rows, batches). Raises what the query failed with."""
    from gateway.spark.session import owned_session

    extra = {"spark.driver.memory": job.driver_memory} if job.driver_memory else {}
    if job.master.startswith("local"):
        extra.setdefault("spark.sql.shuffle.partitions", "2")
    with owned_session(job.master, "entrepot-ingest", extra) as spark:
        return _run(spark, job)


def start_query(spark: Any, job: IngestJob) -> Any:
    """The streaming query of ``job``, started."""
    reader = (spark.readStream.format("entrepot").option("url", job.source)
              .option("queues", ",".join(job.queues)).option("consumer", job.consumer)
              .option("startingOffsets", job.starting_offsets)
              .option("maxMessagesPerPartition", str(job.max_messages_per_partition)))
    if job.token:
        reader = reader.option("token", job.token)
    if job.cafile:
        reader = reader.option("cafile", job.cafile)
    if job.max_messages_per_batch:
        reader = reader.option("maxMessagesPerBatch", str(job.max_messages_per_batch))
    writer = (reader.load().writeStream.format(job.fmt).option("path", job.output)
              .option("checkpointLocation", job.checkpoint))
    if job.fmt == "parquet":
        writer = writer.options(**PARQUET_OPTIONS)
    if job.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{job.trigger_s:g} seconds")
    return writer.start()


def _run(spark: Any, job: IngestJob) -> dict[str, Any]:
    query = start_query(spark, job)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("signal %d: stopping the query after its current batch", signum)
        stop.set()

    if not job.available_now:
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    try:
        if job.available_now:
            query.awaitTermination()
        else:
            while query.isActive and not stop.is_set():
                query.awaitTermination(0.5)
            if query.isActive:
                query.stop()
        failure = query.exception()
        if failure is not None:
            raise RuntimeError(str(failure))
        progress = [p for p in query.recentProgress if p["numInputRows"]]
        return {"rows": sum(int(p["numInputRows"]) for p in progress),
                "batches": [int(p["batchId"]) for p in progress],
                "output": job.output, "checkpoint": job.checkpoint}
    finally:
        if query.isActive:
            query.stop()
