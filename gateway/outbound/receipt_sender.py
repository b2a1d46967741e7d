"""Posting receipts (single-part SRMP) to the URLs senders named: bounded, routed, retried,
logged.

Every post goes through the destination's receipt lane (gateway.outbound.receipt_lanes): routed as
links route messages (outbound redirection), with the lane's back-off, and visible in
``GET /v1/links``. ``deliver`` posts one receipt until it is answered or its caller gives up;
the outbox (delivery and commitment receipts, acknowledgements) gives up at the receipt's
time-to-reach-queue, stream receipts after ``attempts``: they are cumulative and a sender that
misses one resends a message, which makes the receiver acknowledge again
(gateway.srmp.eod). At most ``pending_max`` stream receipts are on their way at once;
beyond that new ones are dropped and counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable

import aiohttp
from yarl import URL

from gateway.logs import server_log
from gateway.metrics import Metrics
from gateway.outbound.receipt_gate import ReceiptGate
from gateway.outbound.receipt_lanes import ReceiptLane, ReceiptLanes
from gateway.srmp.build import build_request
from gateway.srmp.model import Envelope

__all__ = ["ReceiptSender", "SKIP_AUTO_HEADERS", "USER_AGENT"]

_CONCURRENCY = 16


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("entrepot")
    except PackageNotFoundError:
        return "0"


# SRMP posts carry the headers Windows sends (docs/srmp.md, "Transport and HTTP request") and
# no more: aiohttp's default Accept and Accept-Encoding (gzip) are left out; a User-Agent
# names the gateway.
SKIP_AUTO_HEADERS = ("Accept", "Accept-Encoding")
USER_AGENT = f"entrepot/{_version()}"


class ReceiptSender:
    def __init__(self, metrics: Metrics, lanes: ReceiptLanes, *, timeout_s: float,
                 attempts: int, pending_max: int, gate: ReceiptGate | None = None) -> None:
        self.metrics = metrics
        self.lanes = lanes
        self.gate = gate
        self.timeout_s = timeout_s
        self.attempts = attempts
        self.pending_max = pending_max
        self._tasks: set[asyncio.Task[None]] = set()
        # (URL, stream id) -> its stream receipt on its way: a newer one replaces it
        self._latest: dict[tuple[str, str], asyncio.Task[None]] = {}
        self._session: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(_CONCURRENCY)

    @property
    def pending(self) -> int:
        return len(self._tasks)

    def submit(self, url: str, envelope: Envelope, kind: str) -> bool:
        """Queue a receipt for ``url``; False (and counted) when too many are pending or the
        gate refuses the address. A stream receipt replaces the one of its stream still on
        its way (cumulative: the newer covers it; counted as ``superseded``)."""
        if not self.permit(url, kind):
            return False
        key = (url, envelope.stream_receipt.stream_id) if (
            envelope.stream_receipt is not None and envelope.commitment_receipt is None
        ) else None
        older = self._latest.get(key) if key is not None else None
        replacing = older is not None and not older.done()
        if len(self._tasks) - replacing >= self.pending_max:
            self.metrics.srmp_receipts.labels(kind, "dropped").inc()
            server_log.warning("receipt to %s dropped: %d receipts already pending", url,
                               len(self._tasks))
            return False
        if older is not None and replacing:
            older.cancel()
            self.metrics.srmp_receipts.labels(kind, "superseded").inc()
        task = asyncio.create_task(self._deliver(url, envelope, kind), name="receipt")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        if key is not None:
            self._latest[key] = task
            task.add_done_callback(lambda done: self._forget(key, done))
        return True

    def _forget(self, key: tuple[str, str], task: asyncio.Task[None]) -> None:
        if self._latest.get(key) is task:
            del self._latest[key]

    def permit(self, url: str, kind: str) -> bool:
        """Whether a ``kind`` receipt may go to ``url`` now (gateway.outbound.receipt_gate)."""
        return self.gate is None or self.gate.permit(url, kind)

    async def _deliver(self, url: str, envelope: Envelope, kind: str) -> None:
        status, problem, attempts = await self.deliver(
            url, envelope, give_up=lambda attempts: attempts >= self.attempts)
        if 200 <= status < 300:
            self.metrics.srmp_receipts.labels(kind, "sent").inc()
            return
        self.metrics.srmp_receipts.labels(kind, "failed").inc()
        if status == 0 or status >= 500:  # the destination fails: its lane warned already
            server_log.info("%s to %s not delivered after %d attempt(s): %s", kind, url,
                            attempts, problem)
        else:
            server_log.warning("%s to %s not delivered after %d attempt(s): %s", kind, url,
                               attempts, problem)

    async def deliver(self, url: str, envelope: Envelope, *,
                      give_up: Callable[[int], bool]) -> tuple[int, str, int]:
        """Post ``envelope`` for ``url`` through its lane until it is answered (2xx, 4xx; -1
        for a URL that is not http(s)) or ``give_up(attempts so far)`` says so; returns
        (the last status, its description, the attempts made)."""
        lane = self.lanes.lane_for(url)
        with lane.carrying():
            attempts = 0
            while True:
                status, problem = await self.attempt(lane, url, envelope)
                attempts += 1
                if status < 0 or 200 <= status < 500 or give_up(attempts):
                    return status, problem, attempts

    async def attempt(self, lane: ReceiptLane, url: str, envelope: Envelope
                      ) -> tuple[int, str]:
        """One post in ``lane``'s turn (after its back-off while it fails), routed."""
        async with lane.turn():
            target = self.lanes.route(url)
            lane.through = target
            status, problem = await self.post_once(target, url, envelope,
                                                   self.lanes.tls(url))
            lane.answered(status, problem)
            return status, problem

    async def post_once(self, target: str, url: str, envelope: Envelope,
                        tls: ssl.SSLContext | None = None) -> tuple[int, str]:
        """One attempt, posted to ``target`` (``url`` itself, or the gateway an outbound
        redirection goes through) with ``tls`` (a peer's context; None: the system's):
        (HTTP status, its description) or (0, the connection problem); -1 for a URL that is
        not http(s)."""
        try:
            parsed = URL(target)
            host = parsed.raw_host or ""
        except ValueError:
            host = ""
        if not host or parsed.scheme not in ("http", "https"):
            return -1, f"{target!r} is not an http(s) URL"
        authority = host if parsed.is_default_port() else f"{host}:{parsed.port}"
        request = build_request(envelope, None, host=authority, path=parsed.raw_path_qs)
        headers = {k: v for k, v in request.headers if k not in ("Host", "Content-Length")}
        headers["User-Agent"] = USER_AGENT
        via = "" if target == url else f" (through {target})"
        async with self._slots:
            try:
                session = self._client()
                async with session.post(parsed, data=request.body, headers=headers,
                                        allow_redirects=False,
                                        ssl=tls if tls is not None else True) as response:
                    await response.read()
                    return response.status, f"HTTP {response.status} from {target}"
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                return 0, f"{type(exc).__name__} posting to {url}{via}: {exc}"

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
