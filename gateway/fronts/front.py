"""A front process: ``python -m gateway.fronts.front FD`` (started by the owner only).

It listens on the gateway's port beside the other fronts (SO_REUSEPORT), authenticates and
checks requests (HMAC signatures too: the owner, which holds the nonces, uses each one up)
and hands each to the owner as one command (gateway.fronts.wire: sends, receives, browses,
transactions, batches, range reads and consumers, SRMP requests it parsed, and management
operations: gateway.web.calls). It stops on SIGTERM or
SIGINT after finishing its requests, and at once when the owner is gone (its end of the
channel closes).
"""

from __future__ import annotations

import asyncio
import logging
import os
import pickle
import signal
import socket
import ssl
import sys
import time
from collections.abc import Callable
from typing import Any

import uvloop
from aiohttp import web
from aiohttp.typedefs import Handler

from gateway import jsonio
from gateway.auth.authenticator import Authenticator
from gateway.auth.hmac_sig import SignedRequest
from gateway.auth.principal import Principal
from gateway.errors import GatewayError, ProblemError
from gateway.fronts import wire
from gateway.fronts.channel import AnswerLost, Channel, ChannelLost, Overloaded
from gateway.fronts.send_lane import SendLane
from gateway.fronts.shared_counts import SharedCounts
from gateway.fronts.supervisor import FrontStart
from gateway.inbound.parse_pool import parse_answer
from gateway.logs import configure_logging
from gateway.metrics import Metrics
from gateway.queues.local_names import local_host_names
from gateway.queues.plain_sends import only_its_record, stamp_and_encode
from gateway.settings import Settings
from gateway.web import rest_queues, rest_range, rest_tx
from gateway.web.app import ROUTE_TABLES
from gateway.web.appkeys import METRICS_KEY, SETTINGS_KEY, STATE_KEY
from gateway.web.auth_middleware import (
    THROTTLED,
    Gate,
    body_of,
    make_auth_gate,
    principal_of,
    require,
    require_admin,
    scoped_key,
)
from gateway.web.calls import OPERATOR_KEY, Call, Reply, operate
from gateway.web.expect import defer_continue
from gateway.web.http_server import (
    ProblemServer,
    ServingSite,
    app_runner,
    freeze_startup_objects,
)
from gateway.web.listener import bind, tls_context
from gateway.web.long_polls import LongPolls
from gateway.web.middlewares import make_middlewares
from gateway.web.partner_shares import PartnerShares, may_wait
from gateway.web.queue_access import authorize, authorize_early, split_tail
from gateway.web.rest_body import no_fields
from gateway.web.rest_codec import HeaderError, parse_send_headers
from gateway.web.rest_queues import browse_query, receive_query, sent_response
from gateway.web.slow_readers import write_within
from gateway.web.srmp_routes import PARSE_INLINE_BYTES_MAX, add_srmp_routes
from gateway.web.state import GatewayState

__all__ = ["main", "make_front_app", "serve"]

log = logging.getLogger("gateway.fronts")

_QUEUES = "/v1/queues/"
_LOG_RESOURCES = frozenset({"head", "range", "consumers"})
_PUSH_S = 1.0
# Makes the front's send lane (gateway.fronts.send_lane) on aiohttp's server.
_SEND_LANE: web.AppKey[Callable[[ProblemServer], SendLane]] = web.AppKey("send_lane")


def make_front_app(settings: Settings, metrics: Metrics, channel: Channel,
                   counts: SharedCounts) -> web.Application:
    """The front's application: the owner's routes (so that the metric labels are the
    same), with the front's handlers for those it makes commands of, and the others'
    own handlers (answered here, or by a management operation the owner runs) behind the
    front's authentication. ``counts``: every front's requests in flight, which
    ``server.concurrent_requests_max`` caps together."""
    server = settings.server
    shares = PartnerShares(server.concurrent_requests_max, processes=server.workers)
    # Partners with a rate limit: the owner holds their one bucket for every front.
    limited = frozenset(p.name for p in settings.partners if p.rate)

    async def before_body(request: web.Request) -> None:
        # As in one process: the partner's token first, then the queue's permission.
        await _throttle(request, channel, limited)
        await authorize_early(request)

    async def take_nonce(request: web.Request, signed: SignedRequest) -> None:
        # The owner holds every partner's nonces: a replay through another front is seen.
        await _ask(channel, wire.Kind.NONCE, wire.NonceCommand(
            signed.partner, signed.ts, signed.nonce, THROTTLED in request))

    authenticator = Authenticator(settings, rate_limits=False)
    gate = make_auth_gate(settings, authenticator, shares,
                          before_body=before_body, take_nonce=take_nonce)

    async def unmatched(request: web.Request) -> web.StreamResponse:
        # After authentication, as in one process: a stranger learns nothing of the routes.
        await _authenticate(request, gate, channel, limited)
        assert request.match_info.http_exception is not None
        raise request.match_info.http_exception

    identity = _Identity(channel)
    # Receives that may wait: the owner parks them (and caps them); here they are kept out of
    # the in-flight cap as they are there.
    polls = LongPolls(server.long_polls_max)
    app = web.Application(
        client_max_size=server.request_body_max,
        middlewares=make_middlewares(metrics, shared=counts, long_polls=polls,
                                     concurrent_requests_max=server.concurrent_requests_max,
                                     answer_timeout=server.body_timeout, shares=shares,
                                     unmatched=unmatched))
    app[SETTINGS_KEY] = settings
    app[METRICS_KEY] = metrics
    app[STATE_KEY] = GatewayState(local=local_host_names(server.names, server.host,
                                                         server.port,
                                                         settings.srmp.virtual_dirs))

    async def run_by_owner(call: Call) -> Reply:
        status, body, headers = await _ask(channel, wire.Kind.CALL, call)
        return Reply(status, body, headers)

    app[OPERATOR_KEY] = run_by_owner

    def send_lane(server: ProblemServer) -> SendLane:
        return SendLane(settings, authenticator=authenticator, channel=channel,
                        guid=identity.known, limited=limited, shares=shares,
                        counts=counts, metrics=metrics, server=server)

    app[_SEND_LANE] = send_lane

    async def queue_tree(request: web.Request) -> web.StreamResponse:
        found = _queue_path(request)
        name, rest = found if found is not None else split_tail(request.match_info["tail"])
        method = request.method
        if rest == ["messages"] and method == "POST":
            return await _send(request, name, gate, channel, limited, identity)
        if rest == ["messages"] and method in ("GET", "HEAD"):
            return await _browse(request, name, gate, channel, limited)
        if rest and rest[0] in _LOG_RESOURCES:
            return await _log(request, name, rest, gate, channel, limited)
        if rest != ["receive"] or method != "POST":
            await _authenticate(request, gate, channel, limited)
            authorize(request, name, rest)
            return await operate(request, "queue")
        if not may_wait(request):
            return await _receive(request, name, gate, channel, limited)
        polls.parked += 1
        counts.refresh()
        try:
            return await _receive(request, name, gate, channel, limited)
        finally:
            polls.parked -= 1
            counts.refresh()

    async def transaction(request: web.Request) -> web.StreamResponse:
        return await _transaction(request, gate, channel, limited)

    async def transactions(request: web.Request) -> web.StreamResponse:
        principal = await _authenticate(request, gate, channel, limited)
        if principal.open:
            require_admin(request)
        return jsonio.json_response(await _ask(channel, wire.Kind.TX_LIST,
                                               wire.principal_values(principal)))

    async def batch(request: web.Request) -> web.StreamResponse:
        return await _batch(request, gate, channel, limited)

    def authenticated(handler: Handler) -> Handler:
        async def checked(request: web.Request) -> web.StreamResponse:
            await _authenticate(request, gate, channel, limited)
            return await handler(request)
        return checked

    own: dict[object, Handler] = {rest_queues.queue_tree: queue_tree, rest_tx.begin: transaction,
                                  rest_tx.show: transaction, rest_tx.act: transaction,
                                  rest_tx.list_transactions: transactions, rest_tx.batch: batch}
    for table in ROUTE_TABLES:
        for route in table:
            assert isinstance(route, web.RouteDef)
            handler = own.get(route.handler) or authenticated(route.handler)
            web.RouteDef(route.method, route.path, handler,
                         {**route.kwargs, "expect_handler": defer_continue}
                         ).register(app.router)
    async def srmp(request: web.Request) -> web.StreamResponse:
        return await _srmp(request, gate, channel, limited)

    add_srmp_routes(app, settings.srmp.virtual_dirs, srmp)
    return app


def _queue_path(request: web.Request) -> tuple[str, list[str]] | None:
    """(queue, the rest of the path) of a request under ``/v1/queues/<q>/`` from its raw
    path: a plain path (nothing percent-encoded) with something under the queue, which is
    most sends (else None: the route's own decoding)."""
    path = request.raw_path.partition("?")[0]
    if not path.startswith(_QUEUES) or "%" in path:
        return None
    name, rest = split_tail(path[len(_QUEUES):])
    return (name, rest) if name and rest else None


class _Identity:
    """The queue manager's GUID, asked of the owner once (its store open): the messages a
    front stamps and encodes itself carry it."""

    def __init__(self, channel: Channel) -> None:
        self._channel = channel
        self.guid: str | None = None

    async def known(self) -> str | None:
        """The GUID; None while the owner's store is not open."""
        if self.guid is None:
            try:
                self.guid = str(await _ask(self._channel, wire.Kind.IDENTITY, None))
            except ProblemError:
                return None
        return self.guid


async def _send(request: web.Request, name: str, gate: Gate, channel: Channel,
                limited: frozenset[str], identity: _Identity) -> web.StreamResponse:
    await _authenticate(request, gate, channel, limited)
    require(request, "send", name)
    try:
        send = parse_send_headers(request.headers, now_ms=int(time.time() * 1000))
    except HeaderError as exc:
        raise ProblemError(400, str(exc), type_slug=exc.type_slug) from exc
    properties = send.properties
    # Reply addresses are checked against the owner's state: by the owner.
    replies = bool(properties.response_queue or properties.admin_queue)
    if send.transaction not in (None, "single", "none"):
        held = await _ask(channel, wire.Kind.TX_SEND, wire.TxSendCommand(
            send.transaction, name, await body_of(request), properties, principal_of(request)))
        return jsonio.json_response(held, status=202)
    key = scoped_key(request, send.idempotency_key)
    if (key is None and send.transaction != "single" and not replies
            and only_its_record(properties) and not properties.message_id):
        guid = identity.guid or await identity.known()  # asked once: no await after
        if guid is not None:  # the owner stores the record as it comes
            payload = stamp_and_encode(properties, await body_of(request), guid)
            answer, replayed = await _ask(channel, wire.Kind.PUT, wire.PutCommand(
                name, payload, properties.priority, properties.receive_by_ms,
                send.transaction))
            return sent_response(answer, replayed)
    command = wire.SendCommand(name, await body_of(request), properties, send.transaction, key,
                               principal_of(request) if replies else None)
    answer, replayed = await _ask(channel, wire.Kind.SEND, command)
    return sent_response(answer, replayed)


async def _receive(request: web.Request, name: str, gate: Gate, channel: Channel,
                   limited: frozenset[str]) -> web.StreamResponse:
    """A receive: checked here, run by the owner (``RECEIVE``); a client that hangs up
    while it waits cancels it there (``CANCEL``), so it takes nothing."""
    principal = await _authenticate(request, gate, channel, limited)
    require(request, "receive", name)
    asked = receive_query(request)
    messages = await _ask(channel, wire.Kind.RECEIVE, wire.ReceiveCommand(name, asked, principal))
    return jsonio.json_response({"messages": messages})


async def _browse(request: web.Request, name: str, gate: Gate, channel: Channel,
                  limited: frozenset[str]) -> web.StreamResponse:
    """A browse: checked here, read by the owner (``BROWSE``)."""
    await _authenticate(request, gate, channel, limited)
    require(request, "receive", name)
    page = await _ask(channel, wire.Kind.BROWSE, (name, browse_query(request)))
    return jsonio.json_response(page)


async def _log(request: web.Request, name: str, rest: list[str], gate: Gate,
               channel: Channel, limited: frozenset[str]) -> web.StreamResponse:
    """A queue's head, range or consumers: authorized here, answered by the owner (``LOG``);
    a range's records come piece by piece (``MORE``), each asked for once the one before is
    written, so a slow reader holds one piece here, not the answer."""
    principal = await _authenticate(request, gate, channel, limited)
    require(request, "receive", name)
    status, body, headers, piece, cursor = await _ask(channel, wire.Kind.LOG, wire.LogCommand(
        name, rest, request.method, list(request.query.items()),
        await rest_range.request_body(request), principal.consumer_owner))
    if piece is None:
        return rest_range.reply_response(rest_range.Reply(status, body, headers))
    response = web.StreamResponse(headers=headers)
    await response.prepare(request)
    try:
        while piece:
            await write_within(request, response, piece,
                               request.app[SETTINGS_KEY].server.body_timeout)
            piece = await _ask(channel, wire.Kind.MORE, cursor)
        cursor = 0  # the owner is done with it
        if piece is None:  # cut: no end marker, the connection closed (as one process)
            if request.transport is not None:
                request.transport.close()
            return response
        await response.write_eof()
    except ConnectionError:  # the reader hung up: its answer ends here, nothing failed
        log.info("range of %s not sent whole: the client closed the connection", name)
    finally:
        if cursor:
            channel.send(0, wire.Kind.DROP, cursor)
    return response


async def _batch(request: web.Request, gate: Gate, channel: Channel,
                 limited: frozenset[str]) -> web.StreamResponse:
    """A batch: checked here (its JSON, every item, the send permissions), stored by the
    owner as one ``BATCH`` command, which checks reply addresses against its state."""
    principal = await _authenticate(request, gate, channel, limited)
    raw = await body_of(request)
    items = rest_tx.batch_items(raw)
    for queue, _, props in items:
        require(request, "send", queue)
    replies = any(props.response_queue or props.admin_queue for _, _, props in items)
    key = rest_tx.batch_key(request)
    answer, replayed = await _ask(channel, wire.Kind.BATCH, wire.BatchCommand(
        [(queue, body, props) for queue, body, props in items], key,
        raw if key is not None else b"", principal if replies else None))
    return rest_tx.batch_response(answer, replayed)


async def _transaction(request: web.Request, gate: Gate, channel: Channel,
                       limited: frozenset[str]) -> web.StreamResponse:
    """Begin (``POST /v1/transactions``), show, prepare, commit or abort a transaction: run
    by the owner for the principal (``TX``)."""
    principal = await _authenticate(request, gate, channel, limited)
    if request.method == "POST":
        no_fields(await body_of(request))
    action = request.match_info.get("action") or (
        "begin" if request.method == "POST" else "show")
    status, answer = await _ask(channel, wire.Kind.TX, wire.TxCommand(
        action, request.match_info.get("id", ""), principal))
    return jsonio.json_response(answer, status=status)


async def _authenticate(request: web.Request, gate: Gate, channel: Channel,
                        limited: frozenset[str]) -> Principal:
    """The request's principal; a partner with a rate limit takes a token at the owner
    (before anything can refuse the request, as one process's gate does)."""
    await gate(request)
    await _throttle(request, channel, limited)  # a signed request's, known after its body
    return principal_of(request)


async def _throttle(request: web.Request, channel: Channel, limited: frozenset[str]) -> None:
    """A partner with a rate limit takes a token at the owner, once per request."""
    principal = principal_of(request)
    if (principal.name in limited and not (principal.admin or principal.open)
            and THROTTLED not in request):
        request[THROTTLED] = True
        await _ask(channel, wire.Kind.THROTTLE, principal.name)


async def _srmp(request: web.Request, gate: Gate, channel: Channel,
                limited: frozenset[str]) -> web.StreamResponse:
    """An SRMP request: authenticated and parsed here (the work one process gives its parse
    workers), delivered by the owner."""
    principal = await _authenticate(request, gate, channel, limited)
    raw = await body_of(request)
    content_type = request.headers.get("Content-Type", "")
    if len(raw) <= PARSE_INLINE_BYTES_MAX:
        parse_kind, parse = parse_answer(content_type, raw)
    else:  # off the loop, as one process parses a large request without parse workers
        parse_kind, parse = await asyncio.get_running_loop().run_in_executor(
            None, parse_answer, content_type, raw)
    headers = await _ask(channel, wire.Kind.SRMP, wire.SrmpCommand(
        request.remote or "", principal, content_type, raw, parse_kind, parse))
    return web.Response(status=200, headers=headers)


async def _ask(channel: Channel, kind: int, value: object) -> Any:
    """The owner's answer to one command.

    Raises:
        ProblemError: the owner's refusal, or 503 when the command could not be sent.
        AnswerLost: the owner went away while the command waited (an AnswerInDoubt)."""
    try:
        answered, payload = await channel.call(kind, value)
    except AnswerLost:
        raise
    except (ChannelLost, Overloaded) as exc:
        raise ProblemError(503, str(exc), type_slug="not-ready",
                           headers={"Retry-After": "1"}) from exc
    if answered == wire.Kind.PROBLEM:
        raise wire.problem_answer(payload).error()
    return wire.decode(payload)


async def _run(start: FrontStart, channel_fd: int) -> int:
    settings = start.settings
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    metrics = Metrics()

    server: ProblemServer | None = None  # aiohttp's, once the runner is set up

    def counts() -> tuple[object, ...]:
        connections, refused = ((server.open_count(), server.refused)
                                if server is not None else (0, 0))
        return (*metrics.http.snapshot(), metrics.in_flight_now(), connections, refused)

    def answer(channel: Channel, request_id: int, kind: int, payload: bytes) -> None:
        if kind == wire.Kind.STATS:  # the owner serves /metrics
            channel.send(request_id, wire.Kind.OK, counts())

    _, channel = await loop.create_unix_connection(
        lambda: Channel(on_request=answer, on_lost=stop.set,
                        in_flight_max=settings.server.concurrent_requests_max
                        + settings.server.long_polls_max),
        sock=socket.socket(fileno=channel_fd))
    context: ssl.SSLContext | None = tls_context(settings)
    sock = bind(settings.server.host, settings.server.port, reuse_port=True)
    app = make_front_app(settings, metrics, channel, SharedCounts(
        start.counts_fd, settings.server.workers, start.index))
    runner = app_runner(app, settings, handler_cancellation=True,
                        sharing=settings.server.workers)
    await runner.setup()
    assert isinstance(runner.server, ProblemServer)
    server = runner.server
    lane = await serve(app, runner, sock, context)
    log.debug("front %d: startup objects frozen count=%d", start.index,
              freeze_startup_objects())
    channel.send(0, wire.Kind.HELLO, os.getpid())
    pushing = asyncio.create_task(_push_counts(channel, counts))
    await stop.wait()
    pushing.cancel()
    if channel.lost:
        log.error("front %d: the owner process is gone; stopping", start.index)
        return 1  # nothing here is worth a graceful stop: no request can be answered
    if lane is None:
        await runner.cleanup()
    else:  # both within the grace: the lane's sends at the owner, aiohttp's requests
        lane.stop()
        await asyncio.gather(lane.stopped(settings.server.shutdown_grace), runner.cleanup())
    channel.send(0, wire.Kind.COUNTS, counts())  # the last requests, counted
    await asyncio.sleep(0)  # the frame leaves on this pass, before the close
    channel.close()
    return 0


async def serve(app: web.Application, runner: web.AppRunner, sock: socket.socket,
                context: ssl.SSLContext | None) -> SendLane | None:
    """Serve the front's ``app`` (its ``runner`` set up) on ``sock``, over TLS with
    ``context``: its connections start in the send lane, but with the access log (the lane
    writes no access log line); the lane, if any."""
    timeout = app[SETTINGS_KEY].server.tls_handshake_timeout
    if app[SETTINGS_KEY].log.access:
        await ServingSite(runner, sock, ssl_context=context, handshake_timeout=timeout).start()
        return None
    assert isinstance(runner.server, ProblemServer)
    lane = app[_SEND_LANE](runner.server)
    await ServingSite(runner, sock, ssl_context=context, handshake_timeout=timeout,
                      make=lane.connection).start()
    return lane


async def _push_counts(channel: Channel, counts: Callable[[], object]) -> None:
    """The front's counts to the owner every ``_PUSH_S`` seconds, unasked, so that a front
    killed (SIGKILL) loses only the requests of its last second from /metrics."""
    while not channel.lost:
        await asyncio.sleep(_PUSH_S)
        channel.send(0, wire.Kind.COUNTS, counts())


def main(argv: list[str]) -> int:
    channel_fd = int(argv[1])
    start: FrontStart = pickle.loads(sys.stdin.buffer.read())
    settings = start.settings
    configure_logging(fmt=settings.log.format, level=settings.log.level)
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(_run(start, channel_fd))
    except GatewayError as exc:
        log.error("front %d cannot start: %s", start.index, exc)
        return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
