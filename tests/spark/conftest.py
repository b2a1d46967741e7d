"""One SparkSession and one gateway for all Spark tests (a JVM costs seconds to start)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import GatewayProcess


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from gateway.spark.session import spark_session

    session = spark_session("local[1]", "entrepot-tests", {
        "spark.sql.shuffle.partitions": "1",
        "spark.default.parallelism": "1",
        "spark.sql.streaming.stopTimeout": "10s",
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
    })
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    proc = GatewayProcess(tmp_path_factory.mktemp("spark-gw") / "data")
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()
