"""Producers and checks shared by the Spark tests (plain HTTP to a real gateway)."""

from __future__ import annotations

import base64
import json
import urllib.request
from typing import Any

__all__ = ["create_queue", "produce", "head", "payload", "call", "check_table"]


def call(url: str, method: str = "GET", doc: Any = None, timeout: float = 30.0) -> Any:
    data = json.dumps(doc).encode() if doc is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        body = response.read()
    return json.loads(body) if body else None


def create_queue(base: str, queue: str) -> None:
    call(f"{base}/v1/queues/{queue}", "PUT", {})


def payload(index: int, size: int = 1024) -> bytes:
    """A body that names its producer index (checked against the table) padded to size."""
    tag = f"msg-{index:012d}|".encode()
    return tag + bytes((index * 7 + i) % 251 for i in range(max(0, size - len(tag))))


def produce(base: str, queue: str, start: int, count: int, *, size: int = 1024,
            chunk: int = 1000, properties: dict[str, str] | None = None) -> None:
    """``count`` messages with producer indexes ``start..``, in atomic batches of ``chunk``."""
    for first in range(start, start + count, chunk):
        last = min(first + chunk, start + count)
        call(f"{base}/v1/batch", "POST", {"messages": [
            {"queue": queue, "body_base64": base64.b64encode(payload(i, size)).decode(),
             "properties": {"label": f"i{i}", **(properties or {})}}
            for i in range(first, last)]})


def head(base: str, queue: str) -> dict[str, Any]:
    result: dict[str, Any] = call(f"{base}/v1/queues/{queue}/head")
    return result


def check_table(spark: Any, table: str, sent: int, queue: str | None = None) -> None:
    """Read through Spark (``_spark_metadata`` decides which files count): sequences 1..sent
    each exactly once, every body the one its producer index says."""
    from pyspark.sql import functions as F

    df = spark.read.parquet(table)
    if queue is not None:
        df = df.where(F.col("queue") == queue)
    stats = df.agg(F.count("*").alias("n"), F.countDistinct("seq").alias("d"),
                   F.min("seq").alias("lo"), F.max("seq").alias("hi")).collect()[0]
    assert (stats.n, stats.d, stats.lo, stats.hi) == (sent, sent, 1, sent)
    wrong = df.where(F.substring(F.col("body").cast("string"), 5, 12).cast("long")
                     != F.col("seq") - 1).count()
    assert wrong == 0
