"""``entrepot serve``: bind, serve, stop gracefully on SIGTERM/SIGINT.

Order of start-up, so that a bad start fails fast with exit 2 and no traceback:
settings (already parsed) → data directory probe → bind the port → start the app (the store is
opened and recovered in the background; /readyz says when it is done).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import resource
import signal
import socket
import ssl
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import uvloop

from gateway.cli.sdnotify import Notifier
from gateway.errors import StartupError
from gateway.fronts.commands import Commands
from gateway.fronts.cpus import usable_cpus
from gateway.fronts.supervisor import Fronts
from gateway.logs import server_log
from gateway.settings import Settings
from gateway.srmp import envelope as srmp_envelope
from gateway.web.app import make_app
from gateway.web.appkeys import METRICS_KEY, STATE_KEY
from gateway.web.http_server import (
    ProblemServer,
    ServingSite,
    app_runner,
    freeze_startup_objects,
    raise_file_limit,
)
from gateway.web.listener import bind, tls_context
from gateway.web.state import GatewayState
from store.datadir import probe_data_dir
from store.errors import StoreError

__all__ = ["serve"]

def serve(settings: Settings, *, config_source: str) -> int:
    """Run the gateway until SIGTERM or SIGINT; return the process exit code.

    Raises:
        StartupError: the data directory is unusable or the port cannot be bound.
    """
    try:
        probe_data_dir(Path(settings.store.data_dir))
    except StoreError as exc:
        raise StartupError(f"data directory {settings.store.data_dir}: {exc}") from exc
    if not settings.server.workers:
        settings = replace(settings, server=replace(settings.server, workers=usable_cpus()))
    context = tls_context(settings)
    if settings.server.workers > 1:
        sock, settings = _reserve(settings)
    else:
        sock = bind(settings.server.host, settings.server.port)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_serve(settings, sock, context, config_source=config_source))


def _warn_if_few_files(settings: Settings, *, connections: int) -> None:
    """Warn when the open-file limit, less the ``connections`` this process may hold, may not
    cover the store at its quotas: it keeps about three descriptors a data segment (the
    file, its mapping's own copy, the segment's ``l`` file), and a write that needs one more
    than the process has is refused 503 until one is free."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return
    store = settings.store
    segments = -(-(store.machine_quota + store.machine_journal_quota) // store.segment_size)
    needed = _FILES_PER_SEGMENT * segments + _FILES_BESIDE_SEGMENTS
    if soft - connections < needed:
        server_log.warning(
            "open-file limit %d leaves %d descriptors beside connections, and the store may "
            "need %d at its quotas (about %d a %d-byte segment for store.machine_quota + "
            "store.machine_journal_quota, and %d for its other files and the process's): "
            "raise the limit (LimitNOFILE) or store.segment_size", soft, soft - connections,
            needed, _FILES_PER_SEGMENT, store.segment_size, _FILES_BESIDE_SEGMENTS)


_FILES_PER_SEGMENT = 3
_FILES_BESIDE_SEGMENTS = 64  # the QMLog, state files, sockets, the log, spare segments


def _reserve(settings: Settings) -> tuple[socket.socket, Settings]:
    """The port for the fronts: free (a plain bind would fail if anything held it), then
    held bound but not listening by the owner, with SO_REUSEPORT so that the fronts can
    listen on it; port 0 becomes the port the system chose, for every front.

    Raises: StartupError when it is in use or cannot be bound."""
    host = settings.server.host
    bind(host, settings.server.port, listen=False).close()
    sock = bind(host, settings.server.port, reuse_port=True, listen=False)
    port = sock.getsockname()[1]
    listen = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return sock, replace(settings, server=replace(settings.server, listen=listen))


async def _serve(settings: Settings, sock: socket.socket, context: ssl.SSLContext | None, *,
                 config_source: str) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    owner = settings.server.workers > 1
    app = make_app(settings, behind_fronts=owner)
    loop.add_signal_handler(signal.SIGHUP, app[STATE_KEY].reload_mapping.set)
    raise_file_limit()  # (the store's descriptors, with or without connections here)
    runner = app_runner(app, settings, serving=not owner)
    _warn_if_few_files(settings, connections=runner.connections_max)
    await runner.setup()
    fronts: Fronts | None = None
    gave_up = asyncio.Event()  # a front could not be started again: exit 1

    def give_up() -> None:
        gave_up.set()
        stop.set()
    if owner:  # the app serves no HTTP itself: its fronts send it commands
        state = app[STATE_KEY]
        state.fronts_started = False
        commands = Commands(app)
        fronts = Fronts(settings, commands,
                        on_all_serving=lambda: setattr(state, "fronts_started", True),
                        metrics=app[METRICS_KEY], on_give_up=give_up)
        state.before_scrape = fronts.take_counts
        fronts.start()
    else:
        server = runner.server
        assert isinstance(server, ProblemServer)
        metrics = app[METRICS_KEY]
        server.on_refused = metrics.http_connections_refused.inc
        metrics.http_connections.set_function(server.open_count)
        await ServingSite(runner, sock, ssl_context=context,
                          handshake_timeout=settings.server.tls_handshake_timeout).start()
    marker = _write_marker(settings, tls=context is not None)
    if settings.server.host not in ("127.0.0.1", "::1", "localhost"):
        _warn_if_open(settings)
    server_log.info(
        "entrepot serving listen=%s workers=%d data_dir=%s config=%s srmp_parser=%s",
        settings.server.listen,
        settings.server.workers,
        Path(settings.store.data_dir).resolve(),
        config_source,
        # mypyc-compiled (setup.py), or the same source interpreted (a slower parse).
        "interpreted" if str(srmp_envelope.__file__).endswith(".py") else "compiled",
    )
    notifier = Notifier()
    state = app[STATE_KEY]
    tasks = [asyncio.create_task(_announce_ready(
                 notifier, state, stop, fronts.serving if fronts is not None else None)),
             asyncio.create_task(_tune_collector(state, stop)),
             asyncio.create_task(notifier.watchdog(
                 lambda: state.failure is None and (state.store is None
                                                    or state.store.failed is None)))]
    await stop.wait()
    notifier.send("STOPPING=1", "STATUS=stopping")
    server_log.info("stopping: no new connections, grace=%ss", settings.server.shutdown_grace)
    if state.services is not None:
        state.services.queue_manager.end_waits()  # before anything waits on them
    for task in tasks:
        task.cancel()
    marker.unlink(missing_ok=True)
    if fronts is not None:
        await fronts.stop(settings.server.shutdown_grace)
        await commands.drain()
    await runner.cleanup()
    if owner:
        sock.close()
    notifier.close()
    server_log.info("stopped")
    return 1 if gave_up.is_set() else 0


async def _announce_ready(notifier: Notifier, state: GatewayState, stop: asyncio.Event,
                          fronts_serving: Callable[[], bool] | None) -> None:
    """READY=1 once recovery is done and every front listens (systemd holds dependants until
    then); a store that cannot open is reported as the status instead."""
    if not notifier.enabled:
        return
    notifier.send("STATUS=recovering the store")
    while not stop.is_set():
        if state.ready and (fronts_serving is None or fronts_serving()):
            notifier.send("READY=1", "STATUS=serving")
            return
        if state.failure is not None:
            notifier.send(f"STATUS=failed: {state.failure}")
            return
        await asyncio.sleep(0.05)


async def _tune_collector(state: GatewayState, stop: asyncio.Event) -> None:
    """Once the gateway is ready (the recovered store among the startup objects), freeze
    what is alive out of the cyclic collector's reach (``freeze_startup_objects``)."""
    while not stop.is_set() and not state.ready:
        if state.failure is not None:
            return
        await asyncio.sleep(0.05)
    server_log.info("startup objects frozen out of the cyclic collector count=%d",
                    freeze_startup_objects())


def _warn_if_open(settings: Settings) -> None:
    """An open gateway (no credentials) on an address other hosts reach: say what is open."""
    if settings.auth.admin_key_sha256 or settings.partners:
        return
    try:
        loopback = ipaddress.ip_address(settings.server.host).is_loopback
    except ValueError:
        loopback = settings.server.host.lower() == "localhost"
    if not loopback:
        server_log.warning("listening on %s with no credentials configured: anyone who can "
                           "reach it may send to and receive from every queue (management "
                           "routes, /ui and /metrics answer loopback clients only); set "
                           "auth.admin_key_sha256 and [[partners]]", settings.server.listen)


def _write_marker(settings: Settings, *, tls: bool) -> Path:
    """``<data dir>/gateway.json``: how offline commands find the gateway that holds the
    directory (``entrepot backup`` asks it to take the backup)."""
    host = settings.server.host
    shown = f"[{host}]" if ":" in host else host
    if host in ("0.0.0.0", "::"):
        shown = "127.0.0.1" if host == "0.0.0.0" else "[::1]"
    marker = Path(settings.store.data_dir) / "gateway.json"
    scheme = "https" if tls else "http"
    try:
        marker.write_text(json.dumps({"url": f"{scheme}://{shown}:{settings.server.port}",
                                      "pid": os.getpid()}))
    except OSError as exc:  # a full disk: serve what the store holds all the same
        marker.unlink(missing_ok=True)
        server_log.warning("%s not written (%s): entrepot backup will not find this gateway",
                           marker, exc.strerror or exc)
    return marker
