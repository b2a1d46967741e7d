"""A job's session stops without waiting for PySpark's accumulator server: once the JVM is
connected to it (a Python data source's tasks do), its shutdown waits for the handler's next
poll, up to a second at the end of every run."""

from __future__ import annotations

import socket
import threading
from typing import Any

from pyspark.accumulators import _start_update_server

from gateway.spark.session import stop_session


class _Context:
    """What ``SparkContext.stop`` does with the server, as PySpark has it."""

    def __init__(self, server: Any) -> None:
        self._accumulatorServer = server
        self.jvm_stopped = False

    def stop(self) -> None:
        self.jvm_stopped = True
        if self._accumulatorServer is not None:
            self._accumulatorServer.shutdown()
            self._accumulatorServer = None


class _Session:
    def __init__(self, context: _Context) -> None:
        self.sparkContext = context

    def stop(self) -> None:
        self.sparkContext.stop()


def test_the_accumulator_server_stops_on_its_own_thread() -> None:
    server: Any = _start_update_server("token", False)
    host, port = server.server_address
    jvm = socket.create_connection((host, port))  # connected and silent, as the JVM is
    stopped = threading.Event()
    by: list[str] = []
    shutdown = server.shutdown

    def recorded_shutdown() -> None:
        by.append(threading.current_thread().name)
        shutdown()
        stopped.set()

    server.shutdown = recorded_shutdown
    context = _Context(server)
    try:
        stop_session(_Session(context))
        assert context.jvm_stopped, "the JVM is stopped first, as stop() does"
        assert stopped.wait(60), "the server shuts down all the same"
        assert by == ["accumulator-server-stop"], "not on the job's thread"
        assert server.socket.fileno() == -1, "its socket closed"
    finally:
        jvm.close()
