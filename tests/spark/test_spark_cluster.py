"""The same ``spark-ingest`` job on a real Spark standalone cluster started from the pip
package: a master and one worker on 127.0.0.1, executors in their own JVMs (slow: make
test-slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F

from tests.helpers import REPO_ROOT, GatewayProcess, free_port
from tests.spark.support import create_queue, head, produce

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if json.loads(response.read()).get("status") == "ALIVE":
                    return
        except OSError:
            time.sleep(0.3)
    raise AssertionError(f"{url} did not come up in {timeout}s")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    port, ui, worker_ui = free_port(), free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(tmp_path / "w"),
           "PYSPARK_PYTHON": sys.executable}
    log = (tmp_path / "cluster.log").open("ab")
    master = subprocess.Popen([_spark_class(), "org.apache.spark.deploy.master.Master",
                               "--host", "127.0.0.1", "--port", str(port),
                               "--webui-port", str(ui)], stdout=log, stderr=log, env=env)
    url = f"spark://127.0.0.1:{port}"
    worker = None
    try:
        _wait_http(f"http://127.0.0.1:{ui}/json/", 60)
        worker = subprocess.Popen([_spark_class(), "org.apache.spark.deploy.worker.Worker",
                                   url, "--host", "127.0.0.1", "--cores", "2", "--memory",
                                   "1g", "--webui-port", str(worker_ui)],
                                  stdout=log, stderr=log, env=env)
        deadline = time.monotonic() + 60
        while json.loads(urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/",
                                                timeout=2).read())["aliveworkers"] < 1:
            assert time.monotonic() < deadline, "the worker never registered"
            time.sleep(0.5)
        yield url
    finally:
        for proc in (worker, master):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
        log.close()


def test_spark_ingest_on_a_standalone_cluster(cluster: str, spark: Any,
                                              tmp_path: Path) -> None:
    gw = GatewayProcess(tmp_path / "data")
    try:
        gw.wait_ready()
        create_queue(gw.url, "clusterfeed")
        produce(gw.url, "clusterfeed", 0, 3000)
        args = [sys.executable, "-m", "gateway", "spark-ingest", "--source", gw.url,
                "--queue", "clusterfeed", "--output", str(tmp_path / "table"),
                "--checkpoint", str(tmp_path / "checkpoint"), "--available-now",
                "--master", cluster, "--max-messages-per-batch", "1000"]
        done = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, timeout=300,
                              env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"})
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
        assert b'"rows": 3000' in done.stdout
        df = spark.read.parquet(str(tmp_path / "table"))
        stats = df.agg(F.count("*").alias("n"), F.countDistinct("seq").alias("d")).collect()[0]
        assert (stats.n, stats.d) == (3000, 3000)
        assert head(gw.url, "clusterfeed")["consumers"]["spark"] >= 2001
    finally:
        gw.stop()
