"""Receipt lanes: what the links are for messages, for the receipts the gateway posts (stream
receipts, delivery and commitment receipts, acknowledgements to remote admin queues).

Receipts keep their own envelopes and need no order, so they do not go through outgoing
queues; but they take the links' path. Per destination (its origin, ``scheme://host[:port]``)
a lane:
- routes each post as a link does (``Links.route``: the ``through`` gateway of an outbound
  redirection gets the request, the envelope's ``<to>`` still names the destination), with
  the TLS of the destination's ``[[peers]]`` entry when it has one;
- has one back-off (gateway.outbound.backoff): while the destination fails, one receipt at a time
  tries, after the back-off, and the others wait their turn instead of each hammering it;
- shows in ``GET /v1/links`` (``"kind": "receipts"``), the link metrics and the status page
  with its backlog (receipts being posted or waiting for their turn), sent, retries, last
  error and state, and can be paused and resumed with the link actions;
- logs a WARNING when it starts failing (then at most every ``gateway.outbound.backoff.REMIND_S``).

At most ``lanes_max`` lanes are kept; the least recently used idle one makes room for a new
destination (addresses come from senders, within the outbound allow-list).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import ssl
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Iterator

from gateway.auth.outbound import url_prefix
from gateway.metrics import Metrics
from gateway.outbound.backoff import Failures
from gateway.queues.events import Tally

__all__ = ["ReceiptLane", "ReceiptLanes", "LANE_ID_PREFIX"]

LANE_ID_PREFIX = "receipts-"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(url: str) -> str | None:
    """``scheme://host[:port]`` of an http(s) URL (default port left out); None otherwise."""
    parts = url_prefix(url)
    if parts is None:
        return None
    host = f"[{parts.host}]" if ":" in parts.host else parts.host
    port = "" if _DEFAULT_PORTS[parts.scheme] == parts.port else f":{parts.port}"
    return f"{parts.scheme}://{host}{port}"


class ReceiptLane:
    """The receipts on their way to one destination."""

    def __init__(self, destination: str, cap_s: float, counts: Tally | None = None) -> None:
        self.destination = destination
        # Retries since start for the metrics (gateway.queues.events): the destination's
        # own label is taken now if there is room.
        self._counts = counts if counts is not None else Tally()
        self._counts.label(destination)
        self.id = LANE_ID_PREFIX + hashlib.sha256(destination.encode()).hexdigest()[:24]
        self.failures = Failures(f"receipts to {destination}", cap_s)
        self.state = "active"
        self.last_error = ""
        self.through = ""  # the URL of the last post (a relay, or the destination's own)
        self.paused = False
        self.sent = 0
        self.retries = 0
        self._resume = asyncio.Event()
        self._resume.set()
        self._retry_at = 0.0
        self._probe = asyncio.Lock()  # while failing: one attempt at a time
        self._tickets = itertools.count()
        self._since: dict[int, float] = {}  # receipt on its way -> when it entered the lane

    @property
    def backlog(self) -> int:
        return len(self._since)

    @contextlib.contextmanager
    def carrying(self) -> Iterator[None]:
        """One receipt on its way through this lane (counted in ``backlog``)."""
        ticket = next(self._tickets)
        self._since[ticket] = time.monotonic()
        try:
            yield
        finally:
            del self._since[ticket]

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """Wait until this lane may post: not paused, and, while its destination fails,
        the back-off passed and no other receipt trying."""
        await self._resume.wait()
        if not self.failures.in_a_row:
            yield
            return
        async with self._probe:
            delay = self._retry_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await self._resume.wait()
            yield

    def answered(self, status: int, problem: str) -> None:
        """The outcome of one post: a status (0: no answer) and its description."""
        if 200 <= status < 300:
            self.sent += 1
        if 200 <= status < 500:
            self.failures.succeeded()
            self.state = "active"
            # A delivered receipt ends what went wrong before: no error is shown as current
            # on a lane that works (the log keeps it).
            self.last_error = problem if status >= 300 else ""
            return
        if status < 0:  # not an http(s) URL: nothing to retry
            self.last_error = problem
            return
        self.retries += 1
        self._counts.count(self.destination, "retries")
        self.last_error = problem
        self.state = "waiting to connect" if status == 0 else "inactive"
        self._retry_at = time.monotonic() + self.failures.failed(problem)

    def pause(self) -> None:
        self.paused = True
        self._resume.clear()

    def resume(self) -> None:
        self.paused = False
        self._resume.set()

    def summary(self) -> dict[str, object]:
        """The same fields as a link's (gateway.outbound.link.Link.summary), and ``through``."""
        oldest = min(self._since.values(), default=None)
        return {"id": self.id, "kind": "receipts", "destination": self.destination,
                "through": self.through, "state": "paused" if self.paused else self.state,
                "backlog": self.backlog, "unacked": 0,
                "oldest_age_s": round(time.monotonic() - oldest, 3) if oldest else 0.0,
                "last_error": self.last_error, "stream": None, "sent": self.sent,
                "retries": self.retries}


class ReceiptLanes:
    def __init__(self, route: Callable[[str], str], metrics: Metrics, *, cap_s: float,
                 tls: Callable[[str], ssl.SSLContext | None] = lambda _: None,
                 lanes_max: int = 1024, paused: bool = False,
                 counts: Tally | None = None) -> None:
        self._route = route
        self.counts = counts if counts is not None else Tally()  # retries, for the metrics
        self._tls = tls
        self.metrics = metrics
        self.cap_s = cap_s
        self.lanes_max = lanes_max
        self._lanes: OrderedDict[str, ReceiptLane] = OrderedDict()
        self.paused = paused  # new lanes start paused (links.start_paused)

    def route(self, url: str) -> str:
        """The URL to post a receipt for ``url`` to (outbound redirection, as links do)."""
        return self._route(url)

    def tls(self, url: str) -> ssl.SSLContext | None:
        """The ``[[peers]]`` TLS context for ``url`` (None: the system's verification)."""
        return self._tls(url)

    def lane_for(self, url: str) -> ReceiptLane:
        """The lane of ``url``'s destination (made on first use). A URL that is not
        http(s) gets a lane of its own name, so its failure shows too."""
        key = origin_of(url) or url[:200]
        lane = self._lanes.get(key)
        if lane is not None:
            self._lanes.move_to_end(key)
            return lane
        lane = self._lanes[key] = ReceiptLane(key, self.cap_s, self.counts)
        if self.paused:
            lane.pause()
        if len(self._lanes) > self.lanes_max:
            # A lane paused by hand is kept (it would come back active); under
            # links.start_paused every new lane is paused anyway, so idle ones may go.
            idle = next((k for k, v in self._lanes.items()
                         if not v.backlog and (self.paused or not v.paused)
                         and v is not lane), None)
            if idle is not None:
                del self._lanes[idle]
        return lane

    def find(self, lane_id: str) -> ReceiptLane:
        """Raises: KeyError for an unknown id."""
        found = next((lane for lane in self._lanes.values() if lane.id == lane_id), None)
        if found is None:
            raise KeyError(lane_id)
        return found

    def summaries(self) -> list[dict[str, object]]:
        out = []
        for key in sorted(self._lanes):
            lane = self._lanes[key]
            out.append(lane.summary())
        return out
