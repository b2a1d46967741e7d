"""The query's registered consumer follows Spark's commits: once an ``availableNow`` run
ends, the consumer is at the end of its last batch (lag 0) and retention has freed what the
table holds — with 1, 2 and 3 batches, on a rerun with nothing new, and after a crash between
Spark's commit of a batch and the gateway's (the source runner killed with SIGKILL)."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle
from pyspark.errors import StreamingQueryException
from pyspark.sql.streaming.datasource import ReadLimit

from gateway.spark.offsets import by_queue
from gateway.spark.source import EntrepotDataSource, EntrepotStreamReader, SourceOptions
from tests.helpers import GatewayProcess
from tests.spark.support import call, check_table, create_queue, head, produce

SENT = 300


def _ingest(spark: Any, gw: GatewayProcess, queue: str, out: Path, fmt: str = "entrepot",
            **options: str) -> Any:
    reader = spark.readStream.format(fmt).option("url", gw.url).option("queues", queue)
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (reader.load().writeStream.format("parquet").option("path", str(out / "table"))
             .option("checkpointLocation", str(out / "checkpoint"))
             .trigger(availableNow=True).start())
    try:
        query.awaitTermination()
    finally:
        query.stop()
    return query


def _consumer(gw: GatewayProcess, queue: str, name: str) -> dict[str, Any]:
    [entry] = [c for c in call(f"{gw.url}/v1/queues/{queue}/consumers")["consumers"]
               if c["name"] == name]
    return dict(entry)


def _retention_freed(gw: GatewayProcess, queue: str) -> dict[str, Any]:
    """The queue's head once retention has removed every message (the trim runs after the
    commit's answer); the floor is durable before that answer."""
    deadline = time.monotonic() + 60
    state = head(gw.url, queue)
    while state["messages"] and time.monotonic() < deadline:
        time.sleep(0.05)
        state = head(gw.url, queue)
    return state


@pytest.mark.parametrize("batches", [1, 2, 3])
def test_after_an_available_now_run_the_consumer_has_no_lag(
        spark: Any, spark_gateway: GatewayProcess, tmp_path: Path, batches: int) -> None:
    queue, name = f"lag{batches}", f"lag{batches}"
    create_queue(spark_gateway.url, queue)
    produce(spark_gateway.url, queue, 0, SENT, size=64)
    query = _ingest(spark, spark_gateway, queue, tmp_path, consumer=name,
                    maxMessagesPerBatch=str(SENT // batches))
    assert len([p for p in query.recentProgress if p["numInputRows"]]) == batches
    assert _consumer(spark_gateway, queue, name) == {"name": name, "position": SENT + 1,
                                                     "lag": 0}
    state = _retention_freed(spark_gateway, queue)
    assert (state["first"], state["next"], state["messages"]) == (SENT + 1, SENT + 1, 0)
    check_table(spark, str(tmp_path / "table"), SENT, queue)
    if batches == 1:  # a rerun with nothing new reads nothing and keeps the lag at 0
        rerun = _ingest(spark, spark_gateway, queue, tmp_path, consumer=name)
        assert not [p for p in rerun.recentProgress if p["numInputRows"]]
        assert _consumer(spark_gateway, queue, name)["lag"] == 0


class _DiesAfterSparksCommit(EntrepotStreamReader):
    """Killed (SIGKILL, as a crashed driver) when Spark asks for the batch after a committed
    one: Spark's commit log has the batch, the gateway's consumer has not moved."""

    def latestOffset(self, start: Mapping[str, int], limit: ReadLimit) -> dict[str, int]:
        if any(position > 1 for position in by_queue(start).values()):
            os.kill(os.getpid(), signal.SIGKILL)
        return super().latestOffset(start, limit)


class _DyingSource(EntrepotDataSource):
    @classmethod
    def name(cls) -> str:
        return "entrepot_dying"

    def streamReader(self, schema: Any) -> EntrepotStreamReader:
        return _DiesAfterSparksCommit(SourceOptions.parse(self.options))


def test_a_crash_between_sparks_commit_and_the_gateways_is_caught_up(
        spark: Any, spark_gateway: GatewayProcess, tmp_path: Path) -> None:
    queue = name = "lagcrash"
    create_queue(spark_gateway.url, queue)
    produce(spark_gateway.url, queue, 0, SENT, size=64)
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers need no tests/
    spark.dataSource.register(_DyingSource)
    with pytest.raises(StreamingQueryException):
        _ingest(spark, spark_gateway, queue, tmp_path, fmt="entrepot_dying", consumer=name,
                maxMessagesPerBatch="100")
    assert sorted(p.name for p in (tmp_path / "checkpoint" / "commits").iterdir()
                  if p.name.isdigit()) == ["0"], "Spark committed batch 0"
    assert _consumer(spark_gateway, queue, name)["position"] == 1, "the gateway did not"
    # Restarted on the same checkpoint: the first call moves the consumer past batch 0, the
    # run ends with it at the end.
    _ingest(spark, spark_gateway, queue, tmp_path, consumer=name, maxMessagesPerBatch="100")
    assert _consumer(spark_gateway, queue, name) == {"name": name, "position": SENT + 1,
                                                     "lag": 0}
    assert _retention_freed(spark_gateway, queue)["messages"] == 0
    check_table(spark, str(tmp_path / "table"), SENT, queue)
