"""The send lane: a front's own connections for the request clients make most, a REST send
to one queue outside a transaction.

Why: aiohttp's server costs a front about 20 us of CPU a request in its request, response
and task objects: the most of a front's cost per send, which bounds the gateway. The lane
reads such a request from the connection's bytes (gateway.fronts.lane_http), checks it as
the gate and the send handler do (credential, permission, the caps in flight, the partner's
share, the send headers), hands the owner the same command the handler would (``PUT`` or
``SEND``) and writes the answer's bytes once the owner has stored the message: 201, or the
owner's refusal as problem+json.

A connection starts in the lane. The first request the lane does not take, for any reason
(another route, a send in a transaction, a header it does not read, a signature, a
partner with a rate limit, a credential or a header a check would refuse, a request not all
there within a second), goes to aiohttp's server with the connection and the bytes read so
far, and so does everything after it: the lane answers only what it has checked aiohttp's
handlers would answer the same, and aiohttp answers all the rest, refusals included.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import cast

from multidict import CIMultiDict

from gateway import jsonio
from gateway.auth.authenticator import Authenticator, AuthError, Credentials, RateLimited
from gateway.auth.hmac_sig import is_signed
from gateway.auth.principal import OPEN
from gateway.auth.tls import PeerSubjects
from gateway.errors import GatewayError, ProblemError
from gateway.fronts import wire
from gateway.fronts.channel import Channel, ChannelLost, Overloaded
from gateway.fronts.lane_http import (
    INCOMPLETE,
    PASS,
    Head,
    Incomplete,
    Pass,
    Read,
    answer_bytes,
    read_request,
)
from gateway.fronts.shared_counts import SharedCounts
from gateway.metrics import Metrics
from gateway.queues.plain_sends import only_its_record, stamp_and_encode
from gateway.settings import Settings
from gateway.web.auth_middleware import scoped_key_of
from gateway.web.http_server import ProblemServer, Refused
from gateway.web.middlewares import SINGLE_VALUED
from gateway.web.partner_shares import PartnerShares
from gateway.web.problem import problem_response
from gateway.web.rest_codec import HeaderError, parse_send_headers
from gateway.web.rest_queues import sent_headers
from mapping.names import QueueNameError, parse_queue_path

__all__ = ["LaneConnection", "SendLane"]

log = logging.getLogger("gateway.fronts")

_ROUTE = "/v1/queues/{path}/messages"  # the metrics' label, as the middleware's
_JSON = ("Content-Type", "application/json; charset=utf-8")
# Bytes a connection holds unread while its request is at the owner; beyond, it stops
# reading until the answer is written.
_BUFFER_MAX = 1 << 20
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

    def protocol(self) -> asyncio.Protocol:
        """A new connection's protocol (the loop's factory): in the lane, or closed at once
        over the cap on connections (as aiohttp's server does)."""
        if self._stopping or self._server.refuses():
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
        read = read_request(buffer, self._head_max, self._header_count_max)
        if isinstance(read, Read) and len(read.body) > self._body_max:
            return PASS  # aiohttp's handler answers 413
        return read

    def start(self, read: Read, connection: LaneConnection) -> bool:
        """Hand the request to the owner, its answer to ``connection`` once stored; False
        when aiohttp's handlers are to answer it (nothing was done)."""
        head = read.head
        try:
            admitted = self._admit(head, read.body, connection.transport)
        except Exception:  # noqa: BLE001 - a bug here: aiohttp's handlers answer
            log.exception("send lane: request passed on after an error")
            return False
        if admitted is None:
            return False
        command, held = admitted
        kind = wire.Kind.PUT if isinstance(command, wire.PutCommand) else wire.Kind.SEND
        try:
            request_id, answer = self._channel.start(kind, command)
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
        """The owner's command and the partner's place held, if the gate and the send
        handler would let the request through to the owner as a PUT."""
        headers: CIMultiDict[str] = CIMultiDict(head.headers)
        seen: set[str] = set()
        for name, _ in head.headers:
            lower = name.lower()
            if lower in SINGLE_VALUED or lower.startswith("mq-"):
                if lower in seen:
                    return None
                seen.add(lower)
        authorization = headers.get("Authorization", "")
        subject = self._subjects.of(transport) if self._subjects is not None else None
        principal = OPEN
        if authorization or subject is not None:
            if is_signed(authorization):
                return None
            try:
                found = self._authenticator.authenticate(
                    Credentials(authorization, subject, "POST", head.target, b"", ()),
                    now=time.time(), monotonic=time.monotonic())
            except (AuthError, RateLimited, GatewayError):  # refused: the gate says why
                return None
            if found is None:
                return None
            principal = found
        elif self._authenticator.required:
            return None
        if principal.name in self._limited and not (principal.admin or principal.open):
            return None  # the owner holds its rate bucket: aiohttp's handler asks it
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
        if (send.transaction not in (None, "single", "none")  # held in a transaction: 202
                or self._counts.total() >= self._requests_max):
            return None
        try:
            held = self._shares.admit(principal)
        except ProblemError:
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
            else:
                answer, replayed = wire.decode(payload)
                status = 201
                data = answer_bytes(201, "Created", [
                    *sent_headers(answer, replayed).items(), _JSON], jsonio.dumps(answer))
        except ChannelLost:  # the owner went away with it: in doubt, the connection is cut
            status = 503
        except Exception:  # noqa: BLE001 - as the middleware: logged, answered 500
            log.exception("unhandled error method=POST path=/v1/queues/%s/messages",
                          head.queue)
            data, status = _problem(ProblemError(500, "internal error; see the gateway log"),
                                    head)
        if connection.closed:
            status = 499  # the client went away, as the middleware counts it
        self._record(_ROUTE, "POST", status, time.perf_counter() - started)
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


def _problem(exc: ProblemError, head: Head) -> tuple[bytes, int]:
    """The answer the middleware makes of ``exc`` for this request."""
    response = problem_response(exc.status_hint, exc.detail, type_slug=exc.type_slug,
                                title=exc.title, instance=head.target,
                                headers=exc.headers, extra=exc.extra)
    body = response.body
    assert isinstance(body, bytes)
    return answer_bytes(response.status, response.reason, list(response.headers.items()),
                        body), response.status


class LaneConnection(asyncio.Protocol):
    """One client connection while it is in the lane: one request at the owner at a time,
    answered in order; the bytes after it wait in ``_buffer``."""

    def __init__(self, lane: SendLane) -> None:
        self._lane = lane
        self._transport: asyncio.Transport | None = None
        self._buffer = b""
        self._busy = False
        self._reading = True
        self._writing = True
        self._stop_when_answered = False
        self.closed = False
        self.transport: asyncio.BaseTransport | None = None  # (a TLS one's certificate)
        self._ticks = 0  # ticks since the last bytes came
        self._partial = 0  # ticks seen with a request not all there

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self.transport = transport
        self._lane.connections.add(self)

    def data_received(self, data: bytes) -> None:
        self._ticks = 0  # ticks since the last bytes came
        self._partial = 0  # ticks seen with a request not all there
        self._buffer = self._buffer + data if self._buffer else data
        if self._busy or not self._writing:
            if len(self._buffer) > _BUFFER_MAX and self._reading and self._transport:
                self._reading = False
                self._transport.pause_reading()
            return
        self._next()

    def eof_received(self) -> bool | None:
        """As aiohttp's connections: the connection closes (an answer not written yet is
        not written), aiohttp's having had the bytes read so far."""
        if self._buffer and not self._busy:
            return self._pass_on().eof_received()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._lane.connections.discard(self)

    def pause_writing(self) -> None:
        self._writing = False

    def resume_writing(self) -> None:
        self._writing = True
        if not self._busy and self._buffer:
            self._next()

    def _next(self) -> None:
        """Start the request at the head of the buffer, or leave the connection to aiohttp
        if the lane does not take it (one not all there waits: ``tick``)."""
        if self.closed or self._transport is None:
            return
        if self._lane.stopping:  # a request that came as the front stops: not begun
            self._transport.close()
            return
        buffer = self._buffer
        read = self._lane.read(buffer)
        if read is INCOMPLETE:  # the rest may come: ``tick`` passes it on if it does not
            return
        if not isinstance(read, Read) or not self._lane.start(read, self):
            self._pass_on()
            return
        self._busy = True
        self._partial = 0
        self._buffer = buffer[read.end:]

    def answered(self, data: bytes | None) -> None:
        """The answer's bytes, or None: the answer is in doubt, the connection is cut (the
        client cannot take a missing answer for a refusal)."""
        self._busy = False
        if self.closed or self._transport is None:
            return
        if data is None:
            self._transport.abort()
            return
        self._transport.write(data)
        if self._stop_when_answered:
            self._transport.close()
            return
        if not self._reading and len(self._buffer) <= _BUFFER_MAX:
            self._reading = True
            self._transport.resume_reading()
        if self._buffer and self._writing:
            self._next()

    def tick(self, keepalive_ticks: int) -> None:
        """Once a second: a request not all there goes to aiohttp (its body time-out then
        counts); an idle connection closes after ``server.keepalive_timeout``."""
        self._ticks += 1
        if self._busy or self.closed or self._transport is None:
            return
        if self._buffer:
            self._partial += 1
            if self._partial >= 2:  # not all there for a whole tick: however slowly it comes
                self._pass_on()
        elif self._ticks >= keepalive_ticks:
            self._transport.close()

    def stop(self) -> None:
        if self._busy:
            self._stop_when_answered = True
        elif self._transport is not None:
            self._transport.close()

    def _pass_on(self) -> asyncio.Protocol:
        """The connection and the bytes read so far, to aiohttp's server."""
        assert self._transport is not None
        transport, buffer = self._transport, self._buffer
        self._transport, self._buffer = None, b""
        protocol = self._lane.pass_on(self)
        transport.set_protocol(protocol)
        if not self._reading:
            transport.resume_reading()
        protocol.connection_made(transport)
        if buffer:
            protocol.data_received(buffer)
        return protocol
