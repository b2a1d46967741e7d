"""Ceiling servers: what bare aiohttp + uvloop does on this machine, measured in the same run.

    python -m bench.ceiling --mode nostore --port P
        answers 201 to every request without storing anything.
    python -m bench.ceiling --mode fsync --port P --dir D
        appends each body to a preallocated file and answers 201 only after the fdatasync that
        covers it; concurrent requests share one sync (group commit in one writer thread).
        ``GET /v1/queues/NAME`` answers ``{"messages": N}``, the bodies synced so far (what
        the bench compares with the 201s it counted).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
from pathlib import Path

import uvloop
from aiohttp import web

_PREALLOCATE_BYTES = 256 << 20


class GroupCommitFile:
    """One writer thread: take everything pending, pwritev it, fdatasync once, resolve all."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.posix_fallocate(self._fd, 0, _PREALLOCATE_BYTES)
        self._offset = 0
        self.appended = 0  # bodies synced, counted on the event loop's thread
        self._pending: list[tuple[bytes, asyncio.Future[None]]] = []
        self._cond = threading.Condition()
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    async def append(self, data: bytes) -> None:
        future: asyncio.Future[None] = self._loop.create_future()
        with self._cond:
            self._pending.append((data, future))
            self._cond.notify()
        await future
        self.appended += 1

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending:
                    self._cond.wait()
                batch, self._pending = self._pending, []
            buffers = [data for data, _ in batch]
            size = sum(len(b) for b in buffers)
            if self._offset + size > _PREALLOCATE_BYTES:
                self._offset = 0
            os.pwritev(self._fd, buffers, self._offset)
            self._offset += size
            os.fdatasync(self._fd)
            self._loop.call_soon_threadsafe(_resolve, [future for _, future in batch])


def _resolve(futures: list[asyncio.Future[None]]) -> None:
    for future in futures:
        if not future.done():
            future.set_result(None)


def make_app(mode: str, directory: Path | None) -> web.Application:
    app = web.Application(client_max_size=8 << 20)
    state: dict[str, GroupCommitFile] = {}

    async def nostore(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"id": 1}, status=201)

    async def fsync(request: web.Request) -> web.Response:
        body = await request.read()
        await state["file"].append(body)
        return web.json_response({"id": 1}, status=201)

    async def startup(app: web.Application) -> None:
        if mode == "fsync":
            assert directory is not None
            state["file"] = GroupCommitFile(directory / "ceiling.dat")

    async def ready(request: web.Request) -> web.Response:
        return web.json_response({"status": "ready"})

    async def count(request: web.Request) -> web.Response:
        return web.json_response({"messages": state["file"].appended})

    app.on_startup.append(startup)
    app.router.add_get("/readyz", ready)
    if mode == "fsync":
        app.router.add_get("/v1/queues/{name}", count)
    app.router.add_route("*", "/{tail:.*}", nostore if mode == "nostore" else fsync)
    return app


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ceiling")
    parser.add_argument("--mode", choices=("nostore", "fsync"), required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", type=Path)
    args = parser.parse_args()
    web.run_app(make_app(args.mode, args.dir), host="127.0.0.1", port=args.port,
                access_log=None, print=None, loop=uvloop.new_event_loop())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
