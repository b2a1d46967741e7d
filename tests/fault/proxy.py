"""A loopback HTTP fault proxy: every request to it goes on to one upstream, except that,
at configurable rates and from a seed, it drops the request, drops the response (after the
upstream handled it), sends the request twice, or delays it (which reorders requests that
were in flight together).

    proxy = FaultProxy(upstream="http://127.0.0.1:8081", drop=0.05, drop_response=0.05,
                       duplicate=0.05, delay=0.1, seed=7)
    await proxy.start(port)   # serves http://127.0.0.1:<port>/...
    ...
    await proxy.stop()
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter

import aiohttp
from aiohttp import web

__all__ = ["FaultProxy"]

_HOP = ("host", "content-length", "transfer-encoding", "connection", "keep-alive", "date",
        "server")


class FaultProxy:
    def __init__(self, upstream: str, *, drop: float = 0.0, drop_response: float = 0.0,
                 duplicate: float = 0.0, delay: float = 0.0, delay_max_s: float = 0.05,
                 seed: int = 0) -> None:
        self.upstream = upstream.rstrip("/")
        self.drop = drop
        self.drop_response = drop_response
        self.duplicate = duplicate
        self.delay = delay
        self.delay_max_s = delay_max_s
        self.random = random.Random(seed)
        self.counts: Counter[str] = Counter()
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def start(self, port: int) -> None:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _forward(self, request: web.Request, body: bytes
                       ) -> tuple[int, bytes, dict[str, str]]:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        async with self._session.request(request.method, self.upstream + request.path_qs,
                                         data=body, headers=headers) as response:
            answer = {k: v for k, v in response.headers.items() if k.lower() not in _HOP}
            return response.status, await response.read(), answer

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        roll = self.random.random
        self.counts["requests"] += 1
        if roll() < self.delay:
            self.counts["delayed"] += 1
            await asyncio.sleep(roll() * self.delay_max_s)
        if roll() < self.drop:
            self.counts["dropped"] += 1
            return await self._cut(request)
        try:
            status, payload, headers = await self._forward(request, body)
            if roll() < self.duplicate:
                self.counts["duplicated"] += 1
                status, payload, headers = await self._forward(request, body)
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            self.counts["upstream_down"] += 1
            return web.Response(status=502)
        if roll() < self.drop_response:
            self.counts["responses_dropped"] += 1
            return await self._cut(request)
        return web.Response(status=status, body=payload, headers=headers)

    @staticmethod
    async def _cut(request: web.Request) -> web.StreamResponse:
        """Close the connection without an answer (the client sees a disconnect)."""
        if request.transport is not None:
            request.transport.close()
        return web.Response(status=599)  # never reaches the client: the connection is gone
