"""``entrepot spark-ingest``: a streaming query from the ``entrepot`` source into Parquet (or
JSON Lines) files with a checkpoint — exactly once, because Spark's file sink commits each
micro-batch through ``_spark_metadata`` and the source's ranges replay byte for byte.

Read the output through Spark (``spark.read.parquet(OUTPUT)``): Spark's file sink writes
part-files straight into the output, so a batch being written, or one killed mid-write (a
0-byte or truncated part-file), is in the directory without being in ``_spark_metadata``. A
job sets such orphans aside under ``_orphans/`` when it starts (tools that read the directory
themselves, as pyarrow does, skip names starting with ``_``).

The summary counts rows through a query listener: ``recentProgress`` keeps only the last
``spark.sql.streaming.numRecentProgressUpdates`` (100) batches.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

__all__ = ["ForeignOutput", "IngestJob", "run_ingest", "start_query", "refuse_foreign_output",
           "set_aside_orphans", "table_formats", "PARQUET_OPTIONS"]

log = logging.getLogger("entrepot.spark")

# Columns almost every row of which differs: a dictionary page would only be built to be
# dropped (bodies, ids, times). Without those attempts the Parquet sink writes 100,000-row
# batches in ~1.4 s instead of ~1.7 s here (bench/spark_ingest.py); label, class, queue and
# content type keep their dictionaries.
PARQUET_OPTIONS = {f"parquet.enable.dictionary#{column}": "false" for column in (
    "id", "body", "seq", "sent_at", "arrived_at", "correlation_id")}
# Parquet measures a page and a row group only every so many rows, at least 100 by default,
# guessing the next check from the rows' average size: 100 bodies of 4 MiB made a 400 MB
# page, compressed into another copy, and two tasks ran a 1 GiB driver out of heap. With a
# check every other row at least, a page or row group overshoots by two bodies at most;
# small rows still get sparse checks (the guess is unchanged).
PARQUET_OPTIONS |= {"parquet.page.size.row.check.min": "2",
                    "parquet.block.size.row.check.min": "2"}


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
    # A task's range: as wide as one range read may be, since every task costs a start; a
    # batch is still cut into at least min_partitions (0: Spark's default parallelism).
    max_messages_per_partition: int = 100_000
    min_partitions: int = 0
    driver_memory: str = ""


def run_ingest(job: IngestJob) -> dict[str, Any]:
    """Run the query until it ends (``available_now``) or until SIGTERM/SIGINT; returns a
    summary (rows, batches). Raises what the query failed with."""
    from gateway.spark.session import owned_session

    refuse_foreign_output(job)
    extra = {"spark.driver.memory": job.driver_memory} if job.driver_memory else {}
    if job.master.startswith("local"):
        extra.setdefault("spark.sql.shuffle.partitions", "2")
    with owned_session(job.master, "entrepot-ingest", extra, installed_sources=False) as spark:
        return _run(spark, job)


def start_query(spark: Any, job: IngestJob) -> Any:
    """The streaming query of ``job``, started. The source's schema is given, not asked for:
    asking starts a Python worker on the driver only to learn what is known here (about
    1.5 s of a run's start on a 2-core machine)."""
    from gateway.spark.source import source_schema

    reader = (spark.readStream.format("entrepot").schema(source_schema())
              .option("url", job.source)
              .option("queues", ",".join(job.queues)).option("consumer", job.consumer)
              .option("startingOffsets", job.starting_offsets)
              .option("maxMessagesPerPartition", str(job.max_messages_per_partition))
              .option("minPartitions", str(job.min_partitions
                                           or spark.sparkContext.defaultParallelism)))
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


_BATCH_IDS_KEPT = 10_000  # batch ids listed in a summary; "batch_count" counts them all
_TERMINATION_WAIT_S = 60.0  # for the listener's last events after the query ended


class _Progress:
    """Rows and batches of one query, from Spark's listener bus (a running sum: nothing
    grows with the run but the last ``_BATCH_IDS_KEPT`` batch ids)."""

    def __init__(self) -> None:
        from pyspark.sql.streaming.listener import StreamingQueryListener

        progress = self

        class Listener(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                return None

            def onQueryProgress(self, event: Any) -> None:
                progress.add(str(event.progress.id), int(event.progress.batchId),
                             int(event.progress.numInputRows))

            def onQueryIdle(self, event: Any) -> None:
                return None

            def onQueryTerminated(self, event: Any) -> None:
                progress.ended(str(event.id))

        self.listener = Listener()
        self.query_id = ""
        self.rows = 0
        self.batch_count = 0
        self.batches: deque[int] = deque(maxlen=_BATCH_IDS_KEPT)
        self._early: list[tuple[str, int, int]] = []  # before the query's id is known
        self._lock = threading.Lock()
        self._terminated = threading.Event()
        self._ended_ids: set[str] = set()

    def follow(self, query_id: str) -> None:
        with self._lock:
            self.query_id = query_id
            early, self._early = self._early, []
            if query_id in self._ended_ids:
                self._terminated.set()
        for event in early:
            self.add(*event)

    def add(self, query_id: str, batch_id: int, rows: int) -> None:
        with self._lock:
            if not self.query_id:
                if len(self._early) < _BATCH_IDS_KEPT:
                    self._early.append((query_id, batch_id, rows))
                return
            if query_id != self.query_id or not rows:
                return
            self.rows += rows
            self.batch_count += 1
            self.batches.append(batch_id)

    def ended(self, query_id: str) -> None:
        with self._lock:
            if query_id == self.query_id:
                self._terminated.set()
            elif not self.query_id and len(self._ended_ids) < 64:
                self._ended_ids.add(query_id)

    def wait_for_the_end(self) -> bool:
        """True once the listener saw the query end, so every progress event is counted."""
        return self._terminated.wait(_TERMINATION_WAIT_S)


class ForeignOutput(ValueError):
    """The output holds batches another checkpoint wrote."""


def refuse_foreign_output(job: IngestJob) -> None:
    """Raise ForeignOutput when the output holds part-files of another format, or when a
    checkpoint that has read nothing yet meets an output that holds committed batches
    (local paths): Spark's file sink skips a batch whose number its output log already has,
    so this query's first batches would be dropped while the gateway's consumer moves past
    them and retention frees their messages unread."""
    output = Path(job.output.removeprefix("file://"))
    checkpoint = Path(job.checkpoint.removeprefix("file://"))
    if "://" in str(output) or "://" in str(checkpoint):
        return
    log_dir = output / "_spark_metadata"
    written = log_dir.is_dir() and any(p.name.split(".")[0].isdigit()
                                       for p in log_dir.iterdir())
    offsets = checkpoint / "offsets"
    read = offsets.is_dir() and any(p.name.isdigit() for p in offsets.iterdir())
    others = sorted(table_formats(str(output)) - {job.fmt})
    if others:  # one table, one format: a reader of either would fail on the other's files
        raise ForeignOutput(f"output {job.output} holds {', '.join(others)} part-files, not "
                            f"{job.fmt}: write {job.fmt} to another output")
    if written and not read:
        raise ForeignOutput(f"output {job.output} holds batches another checkpoint wrote, and "
                            f"checkpoint {job.checkpoint} has read nothing: Spark would skip "
                            "this run's first batches (their numbers are taken) while their "
                            "messages leave the gateway; give a new run a new output too, or "
                            "go on with the checkpoint that wrote it")


def table_formats(path: str) -> set[str]:
    """The formats of the part-files a local table directory holds (none for a remote
    one)."""
    if "://" in path.removeprefix("file://"):
        return set()
    return {f for p in Path(path.removeprefix("file://")).glob("part-*")
            if (f := _format_of(p.name))}


def _format_of(name: str) -> str | None:
    """The format a Spark part-file's name says (``part-...c000.snappy.parquet``,
    ``part-...c000.json`` or ``.json.gz``), None when it says neither."""
    suffixes = name.split(".")[1:]
    return next((f for f in ("parquet", "json") if f in suffixes), None)


def set_aside_orphans(spark: Any, job: IngestJob) -> int:
    """Move the output's part-files that ``_spark_metadata`` does not list (what killed
    batches left) into ``_orphans/``; returns how many. Local outputs only."""
    output = job.output.removeprefix("file://")
    root = Path(output)
    if "://" in output or not (root / "_spark_metadata").is_dir():
        return 0
    listed = spark.read.format(job.fmt).schema("seq BIGINT").load(str(root)).inputFiles()
    committed = {os.path.basename(path) for path in listed}
    orphans = [p for p in root.iterdir()
               if p.is_file() and p.name.startswith("part-") and p.name not in committed]
    if orphans:
        (root / "_orphans").mkdir(exist_ok=True)
        for path in orphans:
            os.replace(path, root / "_orphans" / path.name)
            # Hadoop's checksum of the file, beside it as ".<name>.crc": it goes with it.
            sidecar = root / f".{path.name}.crc"
            if sidecar.exists():
                os.replace(sidecar, root / "_orphans" / sidecar.name)
        log.warning("%s: set %d part-files of killed batches aside in _orphans/ (not in "
                    "_spark_metadata)", job.output, len(orphans))
    return len(orphans)


def _run(spark: Any, job: IngestJob) -> dict[str, Any]:
    orphans = set_aside_orphans(spark, job)
    progress = _Progress()
    spark.streams.addListener(progress.listener)
    try:
        return _run_query(spark, job, progress, orphans)
    finally:
        spark.streams.removeListener(progress.listener)


def _run_query(spark: Any, job: IngestJob, progress: _Progress, orphans: int
               ) -> dict[str, Any]:
    query = start_query(spark, job)
    progress.follow(str(query.id))
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
        if not progress.wait_for_the_end():
            log.warning("the query's last progress events did not arrive within %.0f s: the "
                        "counts may be short", _TERMINATION_WAIT_S)
        return {"rows": progress.rows, "batches": list(progress.batches),
                "batch_count": progress.batch_count, "orphans_set_aside": orphans,
                "output": job.output, "checkpoint": job.checkpoint}
    finally:
        if query.isActive:
            query.stop()
