"""The send lane: a front's own connections for the requests clients make most, a REST send
to one queue outside a transaction and an SRMP request.

Why: aiohttp's server costs a front about as much CPU per request in its request, response
and task objects as the rest of a send, and the fronts' cost per send bounds the gateway. The lane
reads such a request from the connection's bytes (gateway.fronts.lane_http), checks it as
the gate and the send handler do (credential, permission, the caps in flight, the partner's
share, the send headers), hands the owner the same command the handler would (``PUT`` or
``SEND``; ``SRMP`` with the request parsed here) and writes the answer's bytes once the
owner has stored the message: 201 (200 for SRMP), or the owner's refusal as problem+json.

A connection starts in the lane. The first request the lane does not take, for any reason
(another route, a send in a transaction, a header it does not read, a signature, a
partner with a rate limit, a credential or a header a check would refuse, bytes after the
request, a request not all there at the next tick), goes to aiohttp's server with the
connection and the bytes read so far, and so does everything after it: the lane answers
only what it has checked aiohttp's handlers would answer the same, and aiohttp answers all
the rest, refusals included.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from multidict import CIMultiDict

from gateway import jsonio
from gateway.auth.authenticator import Authenticator, AuthError, Credentials, RateLimited
from gateway.auth.hmac_sig import is_signed
from gateway.auth.networks import in_networks
from gateway.auth.principal import NOBODY, OPEN, Principal
from gateway.auth.tls import PeerSubjects, SubjectKey
from gateway.errors import GatewayError, ProblemError
from gateway.fronts import wire
from gateway.fronts.channel import Channel, ChannelLost, Overloaded
from gateway.fronts.lane_connection import LaneConnection
from gateway.fronts.lane_http import (
    PASS,
    Head,
    Incomplete,
    Pass,
    Read,
    answer_bytes,
    read_request,
)
from gateway.fronts.shared_counts import SharedCounts
from gateway.inbound.parse_pool import parse_answer
from gateway.metrics import Metrics
from gateway.queues.plain_sends import only_its_record, stamp_and_encode
from gateway.settings import Settings
from gateway.web.auth_middleware import scoped_key_of
from gateway.web.http_server import ProblemServer, Refused
from gateway.web.middlewares import single_valued
from gateway.web.partner_shares import PartnerShares
from gateway.web.problem import problem_response
from gateway.web.rest_codec import HeaderError, parse_send_headers
from gateway.web.rest_queues import sent_headers
from gateway.web.srmp_routes import PARSE_INLINE_BYTES_MAX
from mapping.names import QueueNameError, parse_queue_path

__all__ = ["SendLane"]

log = logging.getLogger("gateway.fronts")

_ROUTE = "/v1/queues/{path}/messages"  # the metrics' label, as the middleware's
_JSON = ("Content-Type", "application/json; charset=utf-8")
_TICK_S = 1.0  # how often idle connections and requests not all there are looked at


class SendLane:
    """The lane of one front: its connections, and what every request of them is checked
    against. ``server``: aiohttp's, where connections go (its cap on connections counts the
    lane's too)."""

    def __init__(self, settings: Settings, *, authenticator: Authenticator,
                 channel: Channel, guid: Callable[[], Awaitable[str | None]],
                 limited: frozenset[str],
                 shares: PartnerShares, counts: SharedCounts, metrics: Metrics,
                 server: ProblemServer) -> None:
        self._server = server
        server.others = lambda: len(self.connections)
        limits = settings.server
        # A client certificate is asked for only with a CA to verify it (gateway.auth.tls).
        self._subjects = PeerSubjects() if limits.tls_cert and limits.tls_client_ca else None
        self._srmp_dirs = {vdir.lower(): vdir for vdir in settings.srmp.virtual_dirs}
        self._allow_networks = settings.srmp.allow_networks
        self._authenticator = authenticator
        self._channel = channel
        self._ask_guid = guid
        self._guid: str | None = None
        self._asking: asyncio.Task[None] | None = None
        self._limited = limited
        self._shares = shares
        self._counts = counts
        self._record = metrics.http.record
        self._requests_max = limits.concurrent_requests_max
        self._head_max = limits.header_bytes_max
        self._header_count_max = limits.header_count_max
        self._body_max = limits.request_body_max
        self.keepalive_ticks = max(1, round(limits.keepalive_timeout / _TICK_S))
        self.connections: set[LaneConnection] = set()
        self.in_flight = 0
        self.passed = 0  # connections given to aiohttp
        self._stopping = False
        self._ticker: asyncio.Task[None] | None = None
        counts.watch(lambda: self.in_flight)
        aiohttps = metrics.in_flight_now  # the middleware's count: the gauge shows both
        metrics.in_flight_now = lambda: aiohttps() + self.in_flight

    def connection(self) -> asyncio.Protocol:
        """A new connection's protocol, once the cap on connections has let it in
        (gateway.web.http_server.ServingSite): in the lane, or closed at once after a stop."""
        if self._stopping:
            return Refused()
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().create_task(self._tick())
        return LaneConnection(self)

    def pass_on(self, connection: LaneConnection) -> asyncio.Protocol:
        """aiohttp's protocol for a connection leaving the lane."""
        self.connections.discard(connection)
        self.passed += 1
        return self._server.handler()

    def read(self, buffer: bytes) -> Read | Pass | Incomplete:
        """The first request of ``buffer``: one the lane reads whole, not all there, or
        aiohttp's."""
        read = read_request(buffer, self._head_max, self._header_count_max, self._srmp_dirs)
        if isinstance(read, Read) and len(read.body) > self._body_max:
            return PASS  # aiohttp's handler answers 413
        return read

    def start(self, read: Read, connection: LaneConnection) -> bool:
        """Hand the request to the owner, its answer to ``connection`` once stored; False
        when aiohttp's handlers are to answer it (nothing was done)."""
        head = read.head
        try:
            admitted = (self._admit_srmp if head.srmp else self._admit)(
                head, read.body, connection.transport)
        except Exception:  # noqa: BLE001 - a bug here: aiohttp's handlers answer
            log.exception("send lane: request passed on after an error")
            return False
        if admitted is None:
            return False
        command, held = admitted
        kind = (wire.Kind.PUT if isinstance(command, wire.PutCommand) else
                wire.Kind.SRMP if isinstance(command, wire.SrmpCommand) else wire.Kind.SEND)
        try:
            _, answer = self._channel.start(kind, command)
        except (ChannelLost, Overloaded):  # aiohttp's handler answers it 503
            if held is not None:
                self._shares.give_back(held)
            return False
        self.in_flight += 1
        self._counts.refresh()
        started = time.perf_counter()
        answer.add_done_callback(
            lambda done: self._answered(done, connection, head, held, started))
        return True

    def _admit(self, head: Head, body: bytes, transport: asyncio.BaseTransport | None
               ) -> tuple[wire.PutCommand | wire.SendCommand, str | None] | None:
        """The owner's command (``PUT`` or ``SEND``) and the partner's place held, if the
        gate and the send handler would let the request through to the owner."""
        if not _single_valued_once(head):
            return None
        headers: CIMultiDict[str] = CIMultiDict(head.headers)
        authorization = headers.get("Authorization", "")
        subject = self._subjects.of(transport) if self._subjects is not None else None
        principal = OPEN
        if authorization or subject is not None:
            if is_signed(authorization):
                return None
            taken, found = self._credential(authorization, subject, head.target)
            if not taken or found is None:
                return None
            principal = found
        elif self._authenticator.required:
            return None
        try:
            canonical = parse_queue_path(head.queue).canonical
        except QueueNameError:
            return None
        if not principal.may("send", canonical):
            return None
        try:
            send = parse_send_headers(headers, now_ms=int(time.time() * 1000))
        except HeaderError:
            return None
        if send.transaction not in (None, "single", "none"):  # held in a transaction: 202
            return None
        taken, held = self._place(principal)
        if not taken:
            return None
        # From here as the send handler (gateway.fronts.front._send) does.
        properties = send.properties
        replies = bool(properties.response_queue or properties.admin_queue)
        key = scoped_key_of(principal, send.idempotency_key)
        if (key is None and send.transaction != "single" and not replies
                and only_its_record(properties) and not properties.message_id):
            if self._guid is not None:  # the owner stores the record as it comes
                payload = stamp_and_encode(properties, body, self._guid)
                return wire.PutCommand(head.queue, payload, properties.priority,
                                       properties.receive_by_ms, send.transaction), held
            self._learn_guid()  # meanwhile the owner stamps it
        return wire.SendCommand(head.queue, body, properties, send.transaction, key,
                                principal if replies else None), held

    def _admit_srmp(self, head: Head, body: bytes, transport: asyncio.BaseTransport | None
                    ) -> tuple[wire.SrmpCommand, str | None] | None:
        """The owner's command and the sender's place held, if the gate and the SRMP handler
        (gateway.fronts.front._srmp) would let the request through to the owner: the
        sender is the partner of its client certificate, or nobody (no Authorization is
        read on SRMP routes)."""
        if not _single_valued_once(head) or transport is None:
            return None
        subject = self._subjects.of(transport) if self._subjects is not None else None
        principal = NOBODY
        if subject is not None:
            taken, found = self._credential("", subject, head.target)
            if not taken:
                return None
            principal = found or NOBODY
        if len(body) > PARSE_INLINE_BYTES_MAX:
            return None
        peer = transport.get_extra_info("peername")  # as aiohttp's request.remote
        remote = "" if peer is None else str(peer[0] if isinstance(peer, (list, tuple))
                                             else peer)
        trusted = (remote if principal is NOBODY and in_networks(remote, self._allow_networks)
                   else "")
        taken, held = self._place(principal, trusted)
        if not taken:
            return None
        content_type = CIMultiDict(head.headers).get("Content-Type", "")
        parse_kind, parse = parse_answer(content_type, body)
        return wire.SrmpCommand(remote, principal, content_type, body, parse_kind,
                                parse), held

    def _place(self, principal: Principal, trusted: str = "") -> tuple[bool, str | None]:
        """(whether the request may go on, the partner's place in flight if it took one):
        not over the cap in flight or the partner's share (``trusted``: as
        ``PartnerShares.admit``), and not a partner with a rate limit (the owner holds its
        bucket: aiohttp's handler asks it)."""
        if ((principal.name in self._limited and not (principal.admin or principal.open))
                or self._counts.total() >= self._requests_max):
            return False, None
        try:
            return True, self._shares.admit(principal, trusted)
        except ProblemError:
            return False, None

    def _credential(self, authorization: str, subject: SubjectKey | None, target: str
                    ) -> tuple[bool, Principal | None]:
        """(whether the gate would take the credential, its principal if any)."""
        try:
            return True, self._authenticator.authenticate(
                Credentials(authorization, subject, "POST", target, b"", ()),
                now=time.time(), monotonic=time.monotonic())
        except (AuthError, RateLimited, GatewayError):  # refused: the gate says why
            return False, None

    def _learn_guid(self) -> None:
        """Ask the owner for the queue manager's GUID, once at a time."""
        if self._asking is None or self._asking.done():
            self._asking = asyncio.get_running_loop().create_task(self._ask())

    async def _ask(self) -> None:
        self._guid = await self._ask_guid()

    def _answered(self, done: asyncio.Future[tuple[int, bytes]], connection: LaneConnection,
                  head: Head, held: str | None, started: float) -> None:
        self.in_flight -= 1
        self._counts.refresh()
        if held is not None:
            self._shares.give_back(held)
        status = 500
        data: bytes | None = None
        try:
            kind, payload = done.result()
            if kind == wire.Kind.PROBLEM:
                data, status = _problem(wire.problem_answer(payload).error(), head)
            elif head.srmp:
                status = 200
                data = _as_bytes(web.Response(status=200, headers=wire.decode(payload)))
            else:
                answer, replayed = wire.decode(payload)
                status = 201
                data = answer_bytes(201, "Created", [
                    *sent_headers(answer, replayed).items(), _JSON], jsonio.dumps(answer))
        except ChannelLost:  # the owner went away with it: in doubt, the connection is cut
            status = 503
        except Exception:  # noqa: BLE001 - as the middleware: logged, answered 500
            log.exception("unhandled error method=POST path=%s", head.target)
            data, status = _problem(ProblemError(500, "internal error; see the gateway log"),
                                    head)
        if connection.closed:
            status = 499  # the client went away, as the middleware counts it
        route = f"/{head.srmp}/{{path}}" if head.srmp else _ROUTE
        self._record(route, "POST", status, time.perf_counter() - started)
        connection.answered(data)

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(_TICK_S)
            for connection in list(self.connections):
                connection.tick(self.keepalive_ticks)

    def stop(self) -> None:
        """Close the idle connections; the others close once answered."""
        self._stopping = True
        if self._ticker is not None:
            self._ticker.cancel()
        for connection in list(self.connections):
            connection.stop()

    async def stopped(self, timeout_s: float) -> None:
        """Wait until no request of the lane is at the owner (at most ``timeout_s``)."""
        deadline = time.monotonic() + timeout_s
        while self.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    @property
    def stopping(self) -> bool:
        return self._stopping


def _single_valued_once(head: Head) -> bool:
    """Whether each single-valued header comes once at most (the middleware's 400)."""
    seen: set[str] = set()
    for name, _ in head.headers:
        lower = name.lower()
        if single_valued(lower):
            if lower in seen:
                return False
            seen.add(lower)
    return True


def _problem(exc: ProblemError, head: Head) -> tuple[bytes, int]:
    """The answer the middleware makes of ``exc`` for this request."""
    response = problem_response(exc.status_hint, exc.detail, type_slug=exc.type_slug,
                                title=exc.title, instance=head.target,
                                headers=exc.headers, extra=exc.extra)
    return _as_bytes(response), response.status


def _as_bytes(response: web.Response) -> bytes:
    """``response`` as aiohttp writes it."""
    body = response.body or b""
    assert isinstance(body, bytes)
    return answer_bytes(response.status, response.reason, list(response.headers.items()),
                        body)
