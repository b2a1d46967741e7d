"""One way to start Spark for entrepot's jobs and tests, with the settings that matter.

Workers must run this interpreter (``PYSPARK_PYTHON``: pyarrow and the ``gateway`` package
live in its environment) and import pyspark from its installed package (``WORKER_SITE``:
``spark.executorEnv.PYTHONPATH``, unless ``extra`` sets it); a local master stays on loopback;
the UI and progress bar are off unless asked. The source is registered explicitly:
registration is per session.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["spark_session", "owned_session", "stop_session", "is_local", "jvm_exit_code",
           "JvmExited", "WORKER_SITE"]

# On the path of every Python process Spark starts for the session (its ``sitecustomize``
# makes them import pyspark from the installed package: gateway/spark/worker_site).
WORKER_SITE = Path(__file__).resolve().parent / "worker_site"
_WORKER_PATH = "spark.executorEnv.PYTHONPATH"


def is_local(master: str) -> bool:
    return master.startswith("local")


def spark_session(master: str = "local[*]", app_name: str = "entrepot",
                  extra: Mapping[str, str] | None = None, *, source: bool = True,
                  installed_sources: bool = True) -> Any:
    """A SparkSession (reused when one is running) with the ``entrepot`` source registered
    (``source=False``: a plain session with the same settings, as a job without entrepot).
    ``installed_sources=False``: a JVM started here does not look for the Python data
    sources installed as ``pyspark_*`` packages, which Spark does at the first registration
    by starting a Python process and waiting for it (about 0.3 s of a job's start on two
    cores); entrepot's own jobs need none of them."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if is_local(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from gateway.spark.source import EntrepotDataSource

    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC"))
    if is_local(master):
        builder = (builder.config("spark.driver.host", "127.0.0.1")
                   .config("spark.driver.bindAddress", "127.0.0.1"))
    settings = {_WORKER_PATH: str(WORKER_SITE), **(extra or {})}
    for key, value in settings.items():
        builder = builder.config(key, value)
    with _jvm_env(settings[_WORKER_PATH] == str(WORKER_SITE), installed_sources):
        session = builder.getOrCreate()
    session.sparkContext.setLogLevel(os.environ.get("ENTREPOT_SPARK_LOG_LEVEL", "WARN"))
    if source:
        session.dataSource.register(EntrepotDataSource)
    return session


# The JVM looks for installed Python data sources only when its PYSPARK_DRIVER_PYTHON (else
# PYSPARK_PYTHON) names a command (`command -v`); it uses that variable for nothing else in
# a session started from Python (workers run the interpreter each function names).
_NO_LOOKUP = "entrepot-looks-for-no-installed-data-source"


@contextmanager
def _jvm_env(worker_site: bool, installed_sources: bool) -> Iterator[None]:
    """The environment of a JVM started meanwhile (the driver's own is left as it was).

    WORKER_SITE first on its ``PYTHONPATH``: the lookup of installed data sources runs in a
    Python process the JVM starts with its own environment rather than
    ``spark.executorEnv``, and must import the installed pyspark too instead of Spark's zip.
    ``installed_sources=False``: no lookup (``_NO_LOOKUP``)."""
    changes: dict[str, str] = {}
    if worker_site:
        changes["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(WORKER_SITE), os.environ.get("PYTHONPATH")) if p)
    if not installed_sources:
        changes["PYSPARK_DRIVER_PYTHON"] = _NO_LOOKUP
    before = {name: os.environ.get(name) for name in changes}
    os.environ.update(changes)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def owned_session(master: str, app_name: str, extra: Mapping[str, str] | None = None, *,
                  source: bool = True, installed_sources: bool = True) -> Iterator[Any]:
    """``spark_session`` for a job: stopped at the end only when the job started it (a
    notebook's or a test's running session is left running)."""
    from pyspark.sql import SparkSession

    running = SparkSession.getActiveSession()
    with _term_to_python_only():
        session = spark_session(master, app_name, extra, source=source,
                                installed_sources=installed_sources)
    try:
        yield session
    except Exception as exc:
        code = jvm_exit_code(session, wait_s=_JVM_EXIT_WAIT_S if _lost_jvm(exc) else 0.0)
        if code is not None:  # py4j's "Connection refused" says nothing of why
            raise JvmExited(f"Spark's JVM exited ({_exit_text(code)}) while the job ran; "
                            f"{_why_exited(code)}") from exc
        raise
    finally:
        # A dead JVM cannot be asked to stop: only py4j's error would come.
        if running is None and jvm_exit_code(session) is None:
            stop_session(session)


def stop_session(session: Any) -> None:
    """``session.stop()`` without waiting for PySpark's accumulator server, which ends only
    when its handler's next poll sees the flag: up to a second once a Python data source's
    tasks have connected the JVM to it (about 0.6 s of every ``spark-ingest`` run). The JVM
    is stopped first, as ``stop()`` does, so no update can come; the server then shuts down
    on a thread of its own (a daemon: a process that exits meanwhile loses nothing)."""
    context = session.sparkContext
    server = getattr(context, "_accumulatorServer", None)
    if server is None or not isinstance(getattr(server, "server_address", None), tuple):
        session.stop()  # none, or a Unix socket whose file the shutdown removes: wait
        return
    context._accumulatorServer = None
    try:
        session.stop()
    finally:
        server.server_shutdown = True  # the handler's loop ends at its next poll
        threading.Thread(target=server.shutdown, name="accumulator-server-stop",
                         daemon=True).start()


@contextmanager
def _term_to_python_only() -> Iterator[None]:
    """SIGTERM ignored while the JVM starts, which keeps it ignored (as PySpark has it keep
    SIGINT ignored): a SIGTERM to the job's whole process group or cgroup (``timeout``,
    systemd's stop) then reaches only this process, which stops the query cleanly and then
    the JVM; a JVM left alone ends when this process's end closes its stdin."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


class JvmExited(RuntimeError):
    """The session's JVM ended under the job (killed, out of memory, crashed)."""


def jvm_exit_code(session: Any, wait_s: float = 0.0) -> int | None:
    """The exit code of the JVM that PySpark started for ``session``, None while it runs
    (or when it was not started by this process: a cluster's driver runs elsewhere).
    ``wait_s``: how long to wait for its end (its socket closes before its exit is seen)."""
    process = getattr(session.sparkContext._gateway, "proc", None)
    if process is None:
        return None
    try:
        return int(process.wait(timeout=wait_s))
    except subprocess.TimeoutExpired:
        return None


# How long a job whose connection to the JVM broke waits to see the JVM's end.
_JVM_EXIT_WAIT_S = 10.0


def _lost_jvm(exc: BaseException | None) -> bool:
    """Whether ``exc`` or what it came from is a connection to the JVM that broke."""
    from py4j.protocol import Py4JNetworkError

    while exc is not None:
        if isinstance(exc, (ConnectionError, Py4JNetworkError)):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _why_exited(code: int) -> str:
    """Where to look: a signal 9 comes from outside (the kernel's out-of-memory killer or
    another process); the JVM's own messages say the rest."""
    hint = ("its own messages are above (if they name an OutOfMemoryError, raise "
            "--driver-memory)")
    if code == -signal.SIGKILL:
        return ("it was killed by the kernel's out-of-memory killer (see dmesg: then raise the "
                "memory or lower --driver-memory) or by another process; " + hint)
    return hint


def _exit_text(code: int) -> str:
    return f"killed by signal {-code}" if code < 0 else f"exit code {code}"
