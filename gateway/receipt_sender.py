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

import aiohttp
from yarl import URL

from gateway.logs import server_log
from gateway.metrics import Metrics
from gateway.receipt_gate import ReceiptGate
from gateway.srmp.build import build_request
from gateway.srmp.model import Envelope

__all__ = ["ReceiptSender", "backoff_s", "SKIP_AUTO_HEADERS", "USER_AGENT"]

_CONCURRENCY = 16
_BACKOFF_MAX_S = 60.0


def backoff_s(attempt: int, cap_s: float = _BACKOFF_MAX_S) -> float:
    """Exponential back-off with jitter: 0.25 s doubling, at most ``cap_s``."""
    return min(cap_s, 0.25 * 2.0 ** min(attempt, 30)) * (0.5 + random.random() / 2)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("entrepot")
    except PackageNotFoundError:
        return "0"


# SRMP posts carry the headers Windows sends (srmp.md §1.1) and no more: aiohttp's default
# Accept and Accept-Encoding (gzip) are left out; a User-Agent names the gateway.
SKIP_AUTO_HEADERS = ("Accept", "Accept-Encoding")
USER_AGENT = f"entrepot/{_version()}"


class ReceiptSender:
    def __init__(self, metrics: Metrics, *, timeout_s: float, attempts: int,
                 pending_max: int, gate: ReceiptGate | None = None) -> None:
        self.metrics = metrics
        self.gate = gate
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
        """Queue a receipt for ``url``; False (and counted) when too many are pending or the
        gate refuses the address."""
        if not self.permit(url, kind):
            return False
        if len(self._tasks) >= self.pending_max:
            self.metrics.srmp_receipts.labels(kind, "dropped").inc()
            server_log.warning("receipt to %s dropped: %d receipts already pending", url,
                               len(self._tasks))
            return False
        task = asyncio.create_task(self._deliver(url, envelope, kind), name="receipt")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    def permit(self, url: str, kind: str) -> bool:
        """Whether a ``kind`` receipt may go to ``url`` now (gateway.receipt_gate)."""
        return self.gate is None or self.gate.permit(url, kind)

    async def _deliver(self, url: str, envelope: Envelope, kind: str) -> None:
        problem = ""
        for attempt in range(self.attempts):
            status, problem = await self.post_once(url, envelope)
            if 200 <= status < 300:
                self.metrics.srmp_receipts.labels(kind, "sent").inc()
                return
            if status < 0 or 400 <= status < 500:
                break  # not a URL, or the receiver refuses it: retrying would not help
            await asyncio.sleep(backoff_s(attempt))
        self.metrics.srmp_receipts.labels(kind, "failed").inc()
        server_log.warning("receipt to %s not delivered after %d attempt(s): %s", url,
                           attempt + 1, problem)

    async def post_once(self, url: str, envelope: Envelope) -> tuple[int, str]:
        """One attempt: (HTTP status, "") or (0, the connection problem); -1 for a URL that
        is not http(s)."""
        try:
            target = URL(url)
            host = target.raw_host or ""
        except ValueError:
            host = ""
        if not host or target.scheme not in ("http", "https"):
            return -1, f"{url!r} is not an http(s) URL"
        authority = host if target.is_default_port() else f"{host}:{target.port}"
        request = build_request(envelope, None, host=authority, path=target.raw_path_qs)
        headers = {k: v for k, v in request.headers if k not in ("Host", "Content-Length")}
        headers["User-Agent"] = USER_AGENT
        async with self._slots:
            try:
                session = self._client()
                async with session.post(target, data=request.body, headers=headers,
                                        allow_redirects=False) as response:
                    await response.read()
                    return response.status, f"HTTP {response.status}"
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                return 0, f"{type(exc).__name__}: {exc}"

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                skip_auto_headers=SKIP_AUTO_HEADERS,
                connector=aiohttp.TCPConnector(limit=_CONCURRENCY, keepalive_timeout=300))
        return self._session

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._session is not None:
            await self._session.close()
