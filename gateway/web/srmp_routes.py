"""``POST /{virtual dir}/...``: the SRMP front door (docs/srmp.md, "Receiver pipeline and
status codes"; [MC-MQSRM] §3.1.5.1). Thin: parse (pure codec), resolve the destination, check
access, hand over to gateway.inbound.deliver. Everything after the parse takes the sender as a
``Sender`` (address, principal, content type), not the HTTP request: a store owner behind front
processes (gateway.fronts) gets SRMP requests parsed by a front, as a command.

The destination comes from the envelope's ``<to>``, never from the Request-URI (which Windows
may lower-case). Inbound redirection (mapping files) runs first, then the host check: a
``<to>`` naming another host is refused (400), as MSMQ does unless it is a transparent
store-and-forward server. Every refusal SRMP knows is 400, so a sender drops the message
instead of retrying it; the machine quota and a stopped store are 503 with Retry-After
(Windows retries any 5xx). A stored, duplicate or quota-dropped message is answered 200 with
an empty body, like IIS (V04).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, replace

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway.auth.networks import in_networks
from gateway.auth.principal import NOBODY, Principal
from gateway.errors import ProblemError
from gateway.inbound.deliver import Outcome, PlainDelivery, deliver, deliver_plain, plain_delivery
from gateway.inbound.forward import forward
from gateway.inbound.parse_pool import ParsePool, WorkerLost
from gateway.logs import server_log
from gateway.msmq.classes import MessageClass
from gateway.msmq.message import MessageProperties
from gateway.queues.destinations import resolve_local, split_destinations
from gateway.queues.errors import QueueError
from gateway.queues.local_names import LocalNames
from gateway.queues.manager import Queue
from gateway.srmp.codec import SrmpMessage, parse_request
from gateway.srmp.eod import VERDICT_HEADER
from gateway.srmp.errors import SrmpError
from gateway.srmp.model import Kind, Stream
from gateway.srmp.parsed import ParsedRequest
from gateway.srmp.signature import BadSignature, verify_signature
from gateway.web.appkeys import (
    METRICS_KEY,
    PARSE_POOL_KEY,
    SETTINGS_KEY,
    SIGNERS_KEY,
    STATE_KEY,
)
from gateway.web.auth_middleware import body_of, principal_of
from gateway.web.expect import defer_continue
from gateway.web.problem import as_problem
from gateway.web.reply_addresses import check_reply_addresses
from mapping.engine import route_inbound
from mapping.names import ORDER_QUEUE
from mapping.rules import RuleSet

__all__ = ["add_srmp_routes", "PARSE_INLINE_BYTES_MAX", "PlainSrmp", "Sender", "deliver_srmp",
           "split_query", "store_srmp_many", "take_srmp"]

PARSE_INLINE_BYTES_MAX = 64 * 1024  # larger requests are parsed off the event loop
_SRMP_STATUSES = (400, 403, 404, 409, 422)  # what SRMP has only one answer for: 400


def add_srmp_routes(app: web.Application, virtual_dirs: tuple[str, ...],
                    handler: Handler | None = None) -> None:
    """One route per virtual directory, matched case-insensitively (``/MSMQ/...`` too);
    ``handler`` instead of ``srmp_post`` in a front process (gateway.fronts)."""
    if handler is None:
        plain = PlainBatch(app)

        async def handler(request: web.Request) -> web.StreamResponse:
            return await srmp_post(request, plain)

    for vdir in virtual_dirs:
        pattern = "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else re.escape(c)
                          for c in vdir)
        app.router.add_post(f"/{{vdir:{pattern}}}{{tail:(/.*)?}}", handler,
                            name=f"srmp-{vdir}", expect_handler=defer_continue)


async def srmp_post(request: web.Request, plain: PlainBatch) -> web.Response:
    pool = request.app[PARSE_POOL_KEY]
    if pool is None:
        return await _srmp_post(request, plain)
    pool.requests += 1  # the load that decides where requests are parsed
    try:
        return await _srmp_post(request, plain)
    finally:
        pool.requests -= 1


@dataclass(frozen=True, slots=True)
class Sender:
    """Who sent an SRMP request: ``remote`` its address, ``principal`` from its client
    certificate (NOBODY without one), ``content_type`` the request's."""

    remote: str
    principal: Principal
    content_type: str


async def _srmp_post(request: web.Request, plain: PlainBatch) -> web.Response:
    raw = await body_of(request)
    content_type = request.headers.get("Content-Type", "")
    headers = await deliver_srmp(
        request.app, Sender(request.remote or "", principal_of(request), content_type),
        lambda: _parse(request.app[PARSE_POOL_KEY], content_type, raw), plain)
    return web.Response(status=200, headers=headers)


@dataclass(frozen=True, slots=True)
class PlainSrmp:
    """A request whose message needs nothing but its own record (``plain_delivery``), for
    ``store_srmp_many``; or one found a duplicate already (``delivery`` is the outcome)."""

    kind: str
    message_id: str
    delivery: PlainDelivery | Outcome


class PlainBatch:
    """One process's ``PlainSrmp`` messages of one pass of the loop, stored together
    (``store_srmp_many``), as a store owner stores its fronts' (gateway.fronts.commands):
    many SRMP requests in flight, one wait on the store for those of a pass."""

    def __init__(self, app: web.Application) -> None:
        self._app = app
        self._waiting: list[tuple[PlainSrmp, asyncio.Future[dict[str, str] | None]]] = []
        self._storing: set[asyncio.Task[None]] = set()

    async def store(self, taken: PlainSrmp) -> dict[str, str] | None:
        """``taken`` stored: the headers of its 200 answer.

        Raises: its refusal, as ``store_srmp_many`` gives it."""
        loop = asyncio.get_running_loop()
        if not self._waiting:
            loop.call_soon(self._start)
        future: asyncio.Future[dict[str, str] | None] = loop.create_future()
        self._waiting.append((taken, future))
        # Shielded: a client that hangs up does not take its message out of the batch.
        return await asyncio.shield(future)

    def _start(self) -> None:
        batch, self._waiting = self._waiting, []
        task = asyncio.get_running_loop().create_task(self._store(batch))
        self._storing.add(task)
        task.add_done_callback(self._storing.discard)

    async def _store(self, batch: list[tuple[PlainSrmp, asyncio.Future[dict[str, str] | None]]]
                     ) -> None:
        try:
            answers = await store_srmp_many(self._app, [taken for taken, _ in batch])
        except BaseException as exc:  # a bug or a cancellation: no request is left waiting
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            raise
        for (_, future), answer in zip(batch, answers):
            if future.done():
                continue
            if isinstance(answer, Exception):
                future.set_exception(answer)
            else:
                future.set_result(answer)


async def deliver_srmp(app: web.Application, sender: Sender,
                       parse: Callable[[], Awaitable[ParsedRequest]], plain: PlainBatch
                       ) -> dict[str, str] | None:
    """Take one SRMP request (``parse`` gives its parse): the headers of its 200 answer.
    A message that needs nothing but its own record is stored with the others of its pass
    (``plain``).

    Raises:
        ProblemError: every refusal, as SRMP answers it (``_as_srmp``).
    """
    try:
        parsed = await parse()
    except (SrmpError, ProblemError, QueueError) as exc:
        raise _rejected(app, "unknown", exc) from exc
    taken = take_srmp(app, sender, lambda: parsed)
    if not isinstance(taken, PlainSrmp):
        return await taken
    return await plain.store(taken)


def take_srmp(app: web.Application, sender: Sender, parse: Callable[[], ParsedRequest]
              ) -> PlainSrmp | Coroutine[object, None, dict[str, str] | None]:
    """The checks of one SRMP request (``parse`` gives its parse), up to its store commit:
    a message for ``store_srmp_many`` (a store owner stores those of one pass together),
    or the coroutine that does the rest and gives the headers of the 200 answer.

    Raises:
        ProblemError: every refusal, as SRMP answers it (``_as_srmp``).
    """
    services = app[STATE_KEY].serving(5)
    kind = "unknown"
    try:
        parsed = parse()
        kind = parsed.kind
        queue = _destination(app, parsed.to)
    except (SrmpError, ProblemError, QueueError) as exc:
        raise _rejected(app, kind, exc) from exc
    if isinstance(queue, tuple) or kind in (Kind.STREAM_RECEIPT, Kind.FINAL_STREAM_RECEIPT):
        return _route(app, sender, parsed, queue)
    checked = _checked(app, sender, parsed, queue)
    if checked.stream is None:
        try:
            plain = plain_delivery(services.queue_manager, queue, checked.props, parsed.body,
                                   vouched=checked.vouched)
        except (ProblemError, QueueError) as exc:
            raise _rejected(app, kind, exc) from exc
        if plain is not None:
            return PlainSrmp(kind, parsed.message_id, plain)
    return _deliver(app, checked)


async def store_srmp_many(app: web.Application, taken: Sequence[PlainSrmp]
                          ) -> list[dict[str, str] | None | Exception]:
    """Store ``take_srmp``'s messages together: for each, in order, the headers of its 200
    answer, or its refusal as SRMP answers it (``_as_srmp``; a ``StoreError`` the queue
    domain does not name, which is a 500)."""
    deliveries = [item.delivery for item in taken if isinstance(item.delivery, PlainDelivery)]
    try:
        qm = app[STATE_KEY].serving(5).queue_manager
        made = iter(await deliver_plain(qm, deliveries) if deliveries else ())
    except (ProblemError, QueueError) as exc:  # the store takes no writes: none was stored
        return [_rejected(app, item.kind, exc) for item in taken]
    answers: list[dict[str, str] | None | Exception] = []
    for item in taken:
        outcome = item.delivery if isinstance(item.delivery, Outcome) else next(made)
        if isinstance(outcome, Outcome):
            answers.append(_delivered(app, item.kind, item.message_id, None, outcome))
        elif isinstance(outcome, QueueError):
            answers.append(_rejected(app, item.kind, outcome))
        else:
            app[METRICS_KEY].srmp_message(item.kind, "rejected")
            answers.append(outcome)
    return answers


@dataclass(frozen=True, slots=True)
class _Checked:
    """A message for a local queue, checked and its properties made: what ``deliver``
    takes."""

    kind: str
    queue: Queue
    props: MessageProperties
    parsed: ParsedRequest
    stream: Stream | None
    vouched: bool


async def _route(app: web.Application, sender: Sender, parsed: ParsedRequest,
                 queue: Queue | tuple[str, bool]) -> dict[str, str] | None:
    """A message forwarded to another host, or a stream receipt (delivered as a message
    when it is for none of our outgoing streams)."""
    metrics = app[METRICS_KEY]
    qm = app[STATE_KEY].serving(5).queue_manager
    kind = parsed.kind
    refusal = ""
    try:
        if isinstance(queue, tuple):
            stored = await _forward(app, sender, parsed, *queue)
            metrics.srmp_message(kind, "forwarded" if stored else "duplicate")
            return None
        # A receipt moves one of our outgoing streams on, whatever queue its <to> names:
        # it is taken only from a sender that may send order acknowledgements.
        refusal = _access(app, sender, qm.queue(ORDER_QUEUE))
        if refusal:
            refusal = f"stream receipt refused: {refusal}"
        elif await _receipt(app, parsed.message):
            metrics.srmp_message(kind, "stream_advanced")
            return None
    except (SrmpError, ProblemError, QueueError) as exc:
        raise _rejected(app, kind, exc) from exc
    return await _deliver(app, _checked(app, sender, parsed, queue, refusal))


def _checked(app: web.Application, sender: Sender, parsed: ParsedRequest, queue: Queue,
             refusal: str = "") -> _Checked:
    """The access checks and the message's properties.

    Raises:
        ProblemError: the refusal (403 for a sender that may not send to the queue).
    """
    state = app[STATE_KEY]
    kind = parsed.kind
    refusal = refusal or _access(app, sender, queue)
    if refusal:  # 403, as srmp.md's table says: not one of the refusals SRMP makes 400
        app[METRICS_KEY].srmp_message(kind, "rejected")
        raise ProblemError(403, refusal, type_slug="MQ_ERROR_ACCESS_DENIED")
    try:
        authenticated = _authenticate(app, parsed, queue)
        props = _local_admin(parsed.properties(), state.local)
        check_reply_addresses(props, local=state.local, outbound=state.outbound,
                              may_send=lambda canonical: _may_send(app, sender, canonical),
                              principal=sender.principal, srmp=True)
    except (SrmpError, ProblemError, QueueError) as exc:
        raise _rejected(app, kind, exc) from exc
    query = split_query(parsed.to)[1]
    if query:  # kept with the message: the address it came to is the whole URL
        props = replace(props, extra={**props.extra, "srmp_query": query})
    if authenticated:
        props = replace(props, extra={**props.extra, "authenticated": "xmldsig"})
    return _Checked(kind, queue, props, parsed, parsed.stream if kind == Kind.USER else None,
                    sender.principal is not NOBODY or _trusted(app, sender))


async def _deliver(app: web.Application, checked: _Checked) -> dict[str, str] | None:
    services = app[STATE_KEY].serving(5)
    parsed = checked.parsed
    try:
        outcome = await deliver(services.queue_manager, services.sequencer, checked.queue,
                                checked.props, parsed.body, stream=checked.stream,
                                queue_url=parsed.to, vouched=checked.vouched)
    except (SrmpError, ProblemError, QueueError) as exc:
        raise _rejected(app, checked.kind, exc) from exc
    return _delivered(app, checked.kind, parsed.message_id, checked.stream, outcome)


def _delivered(app: web.Application, kind: str, message_id: str, stream: Stream | None,
               outcome: Outcome) -> dict[str, str] | None:
    """Count a message taken, and the headers of its 200 answer."""
    app[METRICS_KEY].srmp_message(kind, outcome.value)
    if outcome is not Outcome.STORED:
        server_log.debug("srmp %s %s: %s", kind, message_id, outcome.value)
    # An extension Windows ignores: an entrepot sender learns whether a stream message was
    # taken, so one that overtook a lost predecessor is sent again at once, not a round later.
    return {VERDICT_HEADER: outcome.value} if stream is not None else None


def _rejected(app: web.Application, kind: str, exc: SrmpError | ProblemError | QueueError
              ) -> ProblemError:
    """Count a request refused, and its refusal as SRMP answers it."""
    app[METRICS_KEY].srmp_message(kind, "rejected")
    return _as_srmp(exc)


def _as_srmp(exc: SrmpError | ProblemError | QueueError) -> ProblemError:
    """SRMP has one answer for every refusal, 400 (the sender drops the message); 5xx and
    413 stay what they are (the sender retries, or the request was too large)."""
    if isinstance(exc, SrmpError):
        return ProblemError(400, exc.reason, type_slug="MQ_ERROR_BAD_XML_FORMAT")
    if isinstance(exc, QueueError):
        exc = as_problem(exc)
    if exc.status_hint in _SRMP_STATUSES:
        exc.status_hint = 400
    return exc


async def _parse(pool: ParsePool | None, content_type: str, raw: bytes) -> ParsedRequest:
    """In a worker process when there are workers and the loop is busy, or the request is
    large (see gateway.inbound.parse_pool); else on the loop.

    Raises: SrmpError (400); ProblemError 503 when the worker died before answering."""
    if pool is not None and (pool.busy() or len(raw) > PARSE_INLINE_BYTES_MAX):
        try:
            return await pool.parse(content_type, raw)
        except (WorkerLost, OSError) as exc:
            raise ProblemError(503, f"request not parsed: {exc}", type_slug="parse-worker-lost",
                               headers={"Retry-After": "1"}) from exc
    if len(raw) <= PARSE_INLINE_BYTES_MAX:
        message = parse_request(content_type, raw)
    else:
        message = await asyncio.get_running_loop().run_in_executor(None, parse_request,
                                                                   content_type, raw)
    return ParsedRequest.of(message, raw, now_ms=int(time.time() * 1000))


def split_query(url: str) -> tuple[str, str]:
    """(``url`` without its query, the query) — ("", "") parts when there is none."""
    head, _, query = url.partition("?")
    return head, query


def _destination(app: web.Application, to: str) -> Queue | tuple[str, bool]:
    """The local queue ``<to>`` names after inbound redirection, or (the URL of another host
    to forward the message to, whether a redirection changed it): when a redirection leads
    there, or with ``srmp.forward`` (a transparent store-and-forward server).

    Raises:
        ProblemError: multicast, foreign host (not forwarded), unknown queue.
    """
    state = app[STATE_KEY]
    if not to.lower().startswith(("http://", "https://")):
        raise ProblemError(400, f"<to> {to[:200]!r} is not an http(s) queue URL (multicast "
                           "and other transports are not served here)",
                           type_slug="MQ_ERROR_ILLEGAL_FORMATNAME")
    rules = state.mapping.rules if state.mapping is not None else None
    redirected = _ROUTES.redirected(rules, to)
    # The queue is the URL's path; a query (V09's receipt URL "...receipts?SenderStream=XRntV")
    # stays with the message (srmp_query), and goes on with a forwarded one.
    redirected, query = split_query(redirected)
    paths, urls = split_destinations(redirected, state.local)
    if urls:
        readdressed = redirected != "DIRECT=" + to
        if not (readdressed or app[SETTINGS_KEY].srmp.forward):
            raise ProblemError(400, f"<to> {to!r} names another host: this gateway forwards "
                               "only what its inbound redirections send on (or with "
                               "srmp.forward); if that host is this gateway, add the name to "
                               "server.names", type_slug="no-route")
        return urls[0] + (f"?{query}" if query else ""), readdressed
    return state.serving().queue_manager.queue(paths[0])


class _InboundRoutes:
    """``<to>`` -> the format name inbound redirection makes of it, kept per rule set:
    senders repeat a few addresses, and ``route_inbound`` normalises the address and matches
    it against every rule, on every SRMP request otherwise."""

    def __init__(self, size_max: int = 4096) -> None:
        self._rules: RuleSet | None = None
        self._found: dict[str, str] = {}
        self._size_max = size_max  # addresses come from the internet: bounded

    def redirected(self, rules: RuleSet | None, to: str) -> str:
        if rules is not self._rules:
            self._rules, self._found = rules, {}
        text = self._found.get(to)
        if text is None:
            text = self._redirect(rules, to)
            if len(self._found) >= self._size_max:
                self._found.clear()
            self._found[to] = text
        return text

    @staticmethod
    def _redirect(rules: RuleSet | None, to: str) -> str:
        # The rules see the URL as it came: a logical address need not be a queue URL (V09's
        # receipt address ends in "receipts?SenderStream=XRntV").
        found = route_inbound(rules, to) if rules is not None else None
        if found is None:
            return "DIRECT=" + to
        return ("DIRECT=" + found.target if "://" in found.target
                else "DIRECT=OS:.\\" + found.target.replace("/", "\\"))


_ROUTES = _InboundRoutes()


async def _forward(app: web.Application, sender: Sender, parsed: ParsedRequest, url: str,
                   readdressed: bool) -> bool:
    """Store and forward to another host (trusted senders only)."""
    services = app[STATE_KEY].serving()
    if sender.principal is NOBODY and not _trusted(app, sender):
        raise ProblemError(403, f"{sender.remote} may not forward through this gateway",
                           type_slug="MQ_ERROR_ACCESS_DENIED")
    return await forward(services.queue_manager, services.links, url, parsed.properties(),
                         parsed.body,
                         content_type=sender.content_type or "text/xml",
                         readdressed=readdressed)


async def _receipt(app: web.Application, message: SrmpMessage) -> bool:
    """A stream receipt for one of our outgoing streams moves it on (not stored)."""
    links = app[STATE_KEY].serving().links
    envelope = message.envelope
    receipt = envelope.stream_receipt
    if receipt is None:
        return False
    final = None
    if envelope.commitment_receipt is not None:
        final = (envelope.commitment_receipt.decision == "positive",
                 envelope.msmq.message_class if envelope.msmq is not None else 0)
    return await links.on_stream_receipt(receipt.stream_id, receipt.last_ordinal, final)


def _authenticate(app: web.Application, parsed: ParsedRequest, queue: Queue) -> bool:
    """True when the message carries a signature that verifies with its sender's configured
    certificate. A signature that fails is refused wherever the message goes (it was
    tampered with, or signed by someone else); an authenticated queue takes verified
    messages only (docs/srmp.md, "Signatures").

    Raises:
        ProblemError: 400 MQMSG_CLASS_NACK_BAD_SIGNATURE.
    """
    if not parsed.signed and not queue.settings.authenticate:
        return False  # the common case: the whole envelope is not needed
    message = parsed.message
    env = message.envelope
    signers = app[SIGNERS_KEY]
    source = env.msmq.source_qm if env.msmq is not None else ""
    key = signers.get(source)
    verified = False
    try:
        if env.signature is not None and key is not None:
            verify_signature(env.signature, body=message.body, extension=message.extension,
                             key=key)
            verified = True
        elif queue.settings.authenticate:
            raise BadSignature("the queue takes only signed messages from known senders, and "
                               + ("no certificate is configured for source "
                                  f"{source or '(none)'}" if env.signature is not None
                                  else "this message is not signed"))
    except BadSignature as exc:
        nack = MessageClass.NACK_BAD_SIGNATURE.msmq_name
        raise ProblemError(400, exc.reason, type_slug=nack, extra={"class": nack}) from exc
    return verified


def _local_admin(props: MessageProperties, local: LocalNames) -> MessageProperties:
    """A receipt URL on this gateway names a local queue: acknowledgements go straight in."""
    if not props.admin_queue.startswith("DIRECT="):
        return props
    try:
        path = resolve_local(props.admin_queue, local)[0]
    except QueueError:
        return props  # a remote admin queue: its acknowledgements travel by link
    return replace(props, admin_queue=path)


def _access(app: web.Application, sender: Sender, queue: Queue) -> str:
    """Why the sender may not send to ``queue`` ("" when it may): a partner known by its
    client certificate by its allow list; anyone else by source network, or to an anonymous
    queue (MSMQ lets "Everyone" send over HTTP; here that is the queue's explicit choice)."""
    principal = sender.principal
    if principal is not NOBODY:
        if principal.may("send", queue.path.canonical):
            return ""
        return f"partner {principal.name!r} may not send to {queue.path.display!r}"
    if queue.settings.anonymous or _trusted(app, sender):
        return ""
    return (f"{sender.remote} may not send to {queue.path.display!r}: the sender presented no "
            "partner certificate, is not in srmp.allow_networks, and the queue is not anonymous")


def _may_send(app: web.Application, sender: Sender, canonical: str) -> str:
    """``_access`` for a queue named as an admin or response queue ("" for one that does not
    exist: nothing is delivered there)."""
    queue = app[STATE_KEY].serving().queue_manager.lookup(canonical)
    return "" if queue is None else _access(app, sender, queue)


def _trusted(app: web.Application, sender: Sender) -> bool:
    return in_networks(sender.remote, app[SETTINGS_KEY].srmp.allow_networks)
