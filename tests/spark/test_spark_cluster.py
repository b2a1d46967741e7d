"""The ``spark-ingest`` job on a real Spark standalone cluster started from the pip package: a
master and one worker on 127.0.0.1, the micro-batches' tasks run by an executor in the worker's
own JVM. The test checks the cluster ran the job (the master lists the application as finished,
the executor's log holds its tasks), not only that the table is right. A small run is in
``make test``; the long one (more messages, more batches and tasks) in ``make test-slow``."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO_ROOT, GatewayProcess, free_port
from tests.spark.support import check_table, create_queue, head, produce

APP_NAME = "entrepot-ingest"  # the application name spark-ingest registers with the master
# Every JVM here (master, worker, driver, executor) starts with the quick JIT tier and the
# serial collector: seconds less of start-up each on a small machine, the same code path.
JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _spark_class() -> str:
    import pyspark

    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _master_state(ui: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as response:
        state: dict[str, Any] = json.loads(response.read())
    return state


def _wait_state(ui: int, what: str, ready: Callable[[dict[str, Any]], bool],
                procs: list[subprocess.Popen[bytes]], log: Path, timeout: float = 180
                ) -> dict[str, Any]:
    """The master's state once ``ready(state)`` holds; fails at once if a daemon exited."""
    deadline = time.monotonic() + timeout
    while True:
        for proc in procs:
            assert proc.poll() is None, f"{proc.args[1]} exited: {log.read_text()[-3000:]}"
        with contextlib.suppress(OSError):  # the master's web UI is not listening yet
            state = _master_state(ui)
            if ready(state):
                return state
        assert time.monotonic() < deadline, (
            f"{what} not seen in {timeout}s: {log.read_text()[-3000:]}")
        time.sleep(0.3)


@dataclass
class Cluster:
    """A running master and worker: the master's URL and web UI port, the worker's directory
    (one sub-directory per application, with its executors' logs), the daemons, their log,
    and the environment that points a driver at the cluster's defaults."""

    url: str
    ui: int
    work_dir: Path
    procs: list[subprocess.Popen[bytes]]
    log: Path
    env: dict[str, str]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    port, ui, worker_ui = free_port(), free_port(), free_port()
    conf = tmp_path / "conf"  # spark-submit's defaults, read by the driver's launcher
    conf.mkdir()
    (conf / "spark-defaults.conf").write_text(f"spark.driver.extraJavaOptions {JVM_OPTIONS}\n"
                                              f"spark.executor.extraJavaOptions {JVM_OPTIONS}\n")
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": str(tmp_path / "w"),
           "PYSPARK_PYTHON": sys.executable, "SPARK_CONF_DIR": str(conf),
           "SPARK_DAEMON_JAVA_OPTS": JVM_OPTIONS}
    log_path = tmp_path / "cluster.log"
    log = log_path.open("ab")
    procs = [subprocess.Popen([_spark_class(), "org.apache.spark.deploy.master.Master",
                               "--host", "127.0.0.1", "--port", str(port),
                               "--webui-port", str(ui)], stdout=log, stderr=log, env=env)]
    url = f"spark://127.0.0.1:{port}"
    try:
        _wait_state(ui, "the master ALIVE", lambda s: s.get("status") == "ALIVE", procs,
                    log_path)
        procs.append(subprocess.Popen([_spark_class(), "org.apache.spark.deploy.worker.Worker",
                                       url, "--host", "127.0.0.1", "--cores", "2", "--memory",
                                       "1g", "--webui-port", str(worker_ui)],
                                      stdout=log, stderr=log, env=env))
        _wait_state(ui, "a registered worker", lambda s: s["aliveworkers"] >= 1, procs,
                    log_path)
        yield Cluster(url, ui, tmp_path / "w", procs, log_path, env)
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        log.close()


@pytest.mark.parametrize("messages, per_batch, per_task, timeout", [
    pytest.param(400, 200, 100, 600, id="400", marks=pytest.mark.timeout(900)),
    pytest.param(100_000, 20_000, 5_000, 1800, id="100000",
                 marks=[pytest.mark.slow, pytest.mark.timeout(2400)]),
])
def test_spark_ingest_on_a_standalone_cluster(cluster: Cluster, spark: Any, tmp_path: Path,
                                              messages: int, per_batch: int, per_task: int,
                                              timeout: int) -> None:
    gw = GatewayProcess(tmp_path / "data")
    try:
        gw.wait_ready(60)
        create_queue(gw.url, "clusterfeed")
        produce(gw.url, "clusterfeed", 0, messages)
        args = [sys.executable, "-m", "gateway", "spark-ingest", "--source", gw.url,
                "--queue", "clusterfeed", "--output", str(tmp_path / "table"),
                "--checkpoint", str(tmp_path / "checkpoint"), "--available-now",
                "--master", cluster.url, "--max-messages-per-batch", str(per_batch),
                "--max-messages-per-partition", str(per_task)]
        done = subprocess.run(args, cwd=REPO_ROOT, capture_output=True, timeout=timeout,
                              env=cluster.env)
        assert done.returncode == 0, done.stderr.decode(errors="replace")[-3000:]
        summary = json.loads(done.stdout.decode().strip().splitlines()[-1])
        assert summary["rows"] == messages
        assert len(summary["batches"]) == messages // per_batch
        check_table(spark, str(tmp_path / "table"), messages)
        assert head(gw.url, "clusterfeed")["consumers"]["spark"] >= messages - per_batch + 1
    finally:
        gw.stop()
    # The job ran on the cluster: the master took it as an application and saw it finish,
    # and the executor the worker started for it ran the source's tasks.
    state = _wait_state(
        cluster.ui, f"{APP_NAME} among the master's completed applications",
        lambda s: any(app["name"] == APP_NAME for app in s["completedapps"]),
        cluster.procs, cluster.log)
    app = next(app for app in state["completedapps"] if app["name"] == APP_NAME)
    executor_logs = list((cluster.work_dir / app["id"]).glob("*/stderr"))
    assert executor_logs, f"no executor of {app['id']} under {cluster.work_dir}"
    finished = sum(path.read_text(errors="replace").count("Executor: Finished task")
                   for path in executor_logs)
    assert finished >= messages // per_task, (finished, executor_logs)
