"""The owner starts its fronts, restarts one that dies, and stops them before itself.

Each front is ``python -m gateway.fronts.front FD``: FD is its end of a socket pair (the
command channel), and its standard input brings the settings. A front that exits while the
owner runs is started again after a pause that doubles up to ``_RESTART_MAX_S`` (back to
the least once it has served); one that cannot start ``_START_FAILURES_MAX`` times in a row
stops the gateway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass

from gateway.fronts import wire
from gateway.fronts.channel import Channel, ChannelLost, Overloaded
from gateway.fronts.commands import Commands
from gateway.fronts.front_stats import FrontStats
from gateway.fronts.shared_counts import SharedCounts
from gateway.http_stats import Snapshot, since
from gateway.metrics import Metrics
from gateway.settings import Settings

__all__ = ["Fronts", "FrontStart"]

log = logging.getLogger("gateway.fronts")

_RESTART_MIN_S = 0.1
_RESTART_MAX_S = 5.0
_START_FAILURES_MAX = 5


@dataclass(frozen=True, slots=True)
class FrontStart:
    """What a front reads from its standard input."""

    settings: Settings
    index: int
    counts_fd: int  # gateway.fronts.shared_counts


class Fronts:
    def __init__(self, settings: Settings, commands: Commands,
                 on_all_serving: Callable[[], None], metrics: Metrics,
                 on_give_up: Callable[[], None]) -> None:
        """``on_give_up``: a front could not start ``_START_FAILURES_MAX`` times in a row
        (its TLS files became unreadable, say): the gateway stops rather than serve on
        fewer fronts while saying nothing but warnings."""
        self.count = settings.server.workers
        self._settings = settings
        self._commands = commands
        self._on_all_serving = on_all_serving
        self._on_give_up = on_give_up
        self._serving: dict[int, int] = {}  # front index -> pid, once it said HELLO
        self._processes: dict[int, asyncio.subprocess.Process] = {}
        self._channels: dict[int, Channel] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False
        # Each front's HTTP counts as last taken into the owner's metrics, and its requests
        # in flight then (the owner's gauge is their sum).
        self._metrics = metrics
        self.counts = SharedCounts.create(self.count)
        self._counted: dict[int, Snapshot] = {}
        self._in_flight: dict[int, int] = {}
        metrics.http_in_flight.set_function(lambda: sum(self._in_flight.values()))
        # Each front's connections open, and its refusals since it started, as last told.
        self._connections: dict[int, int] = {}
        self._refused: dict[int, int] = {}
        metrics.http_connections.set_function(lambda: sum(self._connections.values()))
        metrics.registry.register(FrontStats(lambda: dict(self._serving)))

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._keep(index), name=f"front-{index}")
                       for index in range(self.count)]

    def serving(self) -> bool:
        """Every front has said it listens."""
        return len(self._serving) == self.count

    async def _keep(self, index: int) -> None:
        pause = _RESTART_MIN_S
        failed = 0  # starts in a row that ended before the front served
        while True:
            code = await self._run(index)
            served = self._serving.pop(index, None) is not None
            if self._stopping:
                return
            if served:
                pause, failed = _RESTART_MIN_S, 0
            else:
                failed += 1
                if failed >= _START_FAILURES_MAX:
                    log.error("front %d could not start %d times in a row (%s): stopping the "
                              "gateway", index, failed, _exit_text(code))
                    self._on_give_up()
                    return
            log.warning("front %d exited (%s): starting it again in %.1f s", index,
                        _exit_text(code), pause)
            await asyncio.sleep(pause)
            pause = min(pause * 2, _RESTART_MAX_S)

    async def _run(self, index: int) -> int:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "gateway.fronts.front", str(theirs.fileno()),
                stdin=asyncio.subprocess.PIPE, pass_fds=(theirs.fileno(), self.counts.fd))
        finally:
            theirs.close()
        self._processes[index] = process
        assert process.stdin is not None
        process.stdin.write(pickle.dumps(FrontStart(self._settings, index,
                                                    self.counts.fd), 5))
        with contextlib.suppress(ConnectionError):
            await process.stdin.drain()
        process.stdin.close()

        def on_request(channel: Channel, request_id: int, kind: int, payload: bytes) -> None:
            if kind == wire.Kind.HELLO:
                self._counted[index] = ({}, {})  # a new process counts from 0
                self._refused[index] = 0
                self._serving[index] = wire.decode(payload)
                log.info("front %d serving pid=%d", index, self._serving[index])
                if self.serving():
                    self._on_all_serving()
            elif kind == wire.Kind.COUNTS:
                self._absorb(index, payload)
            else:
                self._commands.on_request(channel, request_id, kind, payload)

        loop = asyncio.get_running_loop()
        _, channel = await loop.create_unix_connection(
            lambda: Channel(on_request=on_request), sock=ours)
        self._channels[index] = channel
        try:
            return await process.wait()
        finally:
            channel.close()
            self._channels.pop(index, None)
            self._in_flight.pop(index, None)
            self._connections.pop(index, None)
            self.counts.clear(index)

    async def take_counts(self) -> None:
        """Bring every serving front's HTTP counts into the owner's metrics (before
        /metrics renders them); a front that does not answer within a second is left out
        this time."""
        async def take(index: int, channel: Channel) -> None:
            try:
                async with asyncio.timeout(1.0):
                    kind, payload = await channel.call(wire.Kind.STATS, None)
            except (TimeoutError, ChannelLost, Overloaded):
                return
            if kind == wire.Kind.OK:
                self._absorb(index, payload)

        await asyncio.gather(*(take(i, c) for i, c in list(self._channels.items())
                               if i in self._serving))

    def _absorb(self, index: int, payload: bytes) -> None:
        """Count what front ``index`` counted since it last told (its counts are totals
        since it started, asked at scrape time or pushed every second: a front killed
        loses only what it counted since its last push)."""
        requests, latency, in_flight, connections, refused = wire.decode(payload)
        if index not in self._counted:
            return  # before its HELLO, or after it exited
        now = (requests, latency)
        new = since(now, self._counted[index])
        if new[0]:
            log.debug("front %d counted %d requests in all", index, sum(requests.values()))
        self._metrics.http.add(*new)
        self._counted[index] = now
        self._in_flight[index] = in_flight
        self._connections[index] = connections
        if refused > self._refused.get(index, 0):
            self._metrics.http_connections_refused.inc(refused - self._refused.get(index, 0))
        self._refused[index] = refused

    async def stop(self, grace_s: float) -> None:
        """SIGTERM every front (each finishes its requests within ``grace_s``), then kill
        those still running."""
        self._stopping = True
        for process in self._processes.values():
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        waits = [p.wait() for p in self._processes.values()]
        try:
            async with asyncio.timeout(grace_s + 5):
                await asyncio.gather(*waits)
        except TimeoutError:
            for process in self._processes.values():
                if process.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        process.kill()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def _exit_text(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit code {code}"
