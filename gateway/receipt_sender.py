"""Posting receipts (single-part SRMP) to the URLs senders named: bounded, retried, logged.

Stream receipts are cumulative and a sender that misses one resends a message, which makes the
receiver acknowledge again (gateway.srmp.eod), so a receipt that cannot be delivered after
its attempts is dropped with a warning rather than kept for ever. At most ``pending_max``
receipts are on their way at once; beyond that new ones are dropped and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time

import aiohttp
from yarl import URL

from gateway.logs import server_log
from gateway.metrics import Metrics
from gateway.srmp.build import build_request
from gateway.srmp.model import Envelope

__all__ = ["ReceiptSender", "MessageIds"]

_CONCURRENCY = 16
_BACKOFF_MAX_S = 60.0


class MessageIds:
    """Ordinals for this gateway's own SRMP message ids (``uuid:N@QM GUID``): microseconds since
    1970, strictly increasing, so ids stay unique across restarts without a persisted counter
    (Windows drops a repeated id within 30 minutes as a duplicate)."""

    def __init__(self) -> None:
        self._last = 0

    def next(self) -> int:
        self._last = max(self._last + 1, time.time_ns() // 1000)
        return self._last


class ReceiptSender:
    def __init__(self, metrics: Metrics, *, timeout_s: float, attempts: int,
                 pending_max: int) -> None:
        self.metrics = metrics
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.pending_max = pending_max
        self._tasks: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(_CONCURRENCY)

    @property
    def pending(self) -> int:
        return len(self._tasks)

    def submit(self, url: str, envelope: Envelope, kind: str) -> bool:
        """Queue a receipt for ``url``; False (and counted) when too many are pending."""
        if len(self._tasks) >= self.pending_max:
            self.metrics.srmp_receipts.labels(kind, "dropped").inc()
            server_log.warning("receipt to %s dropped: %d receipts already pending", url,
                               len(self._tasks))
            return False
        task = asyncio.create_task(self._deliver(url, envelope, kind), name="receipt")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _deliver(self, url: str, envelope: Envelope, kind: str) -> None:
        try:
            target = URL(url)
            host = target.raw_host or ""
        except ValueError:
            host = ""
        if not host or target.scheme not in ("http", "https"):
            self.metrics.srmp_receipts.labels(kind, "failed").inc()
            server_log.warning("receipt not sent: %r is not an http(s) URL", url)
            return
        authority = host if target.is_default_port() else f"{host}:{target.port}"
        request = build_request(envelope, None, host=authority, path=target.raw_path_qs)
        headers = {k: v for k, v in request.headers if k not in ("Host", "Content-Length")}
        problem = ""
        for attempt in range(self.attempts):
            status = 0
            async with self._slots:
                try:
                    session = self._client()
                    async with session.post(target, data=request.body, headers=headers,
                                            allow_redirects=False) as response:
                        status = response.status
                        await response.read()
                except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                    problem = f"{type(exc).__name__}: {exc}"
            if 200 <= status < 300:
                self.metrics.srmp_receipts.labels(kind, "sent").inc()
                return
            if 400 <= status < 500:
                problem = f"HTTP {status}"
                break  # the receiver refuses it: retrying would not help
            if status:
                problem = f"HTTP {status}"
            delay = min(_BACKOFF_MAX_S, 0.25 * 2 ** attempt)
            await asyncio.sleep(delay * (0.5 + random.random() / 2))
        self.metrics.srmp_receipts.labels(kind, "failed").inc()
        server_log.warning("receipt to %s not delivered after %d attempt(s): %s", url,
                           attempt + 1, problem)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                connector=aiohttp.TCPConnector(limit=_CONCURRENCY, keepalive_timeout=300))
        return self._session

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
