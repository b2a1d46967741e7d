"""Cross-cutting request handling: error → problem+json, metrics, the concurrency cap.

This is the one place that turns exceptions into HTTP answers; handlers only raise.
Health, readiness and metrics are never refused by the cap (an orchestrator must see a busy
gateway as alive) and do not count against it, nor do parked long polls: they have their own
cap (gateway.web.long_polls).
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from typing import Protocol

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from gateway.errors import AnswerInDoubt, ProblemError
from gateway.logs import server_log
from gateway.metrics import Metrics
from gateway.queues.errors import QueueError
from gateway.web.auth_middleware import PROBES, Gate
from gateway.web.body_coding import CODINGS
from gateway.web.escapes import check_path
from gateway.web.long_polls import LongPolls
from gateway.web.partner_shares import PartnerShares
from gateway.web.problem import as_problem, http_problem, problem_response
from gateway.web.slow_readers import WHOLE_ANSWER_MIN, finish_within

__all__ = ["InFlight", "make_middlewares", "NEVER_REFUSED", "single_valued"]


class InFlight(Protocol):
    """Requests in flight counted across processes (gateway.fronts.shared_counts)."""

    def watch(self, count: Callable[[], int]) -> None:
        """This process's count, read by ``refresh``."""

    def refresh(self) -> None: ...

    def total(self) -> int: ...

NEVER_REFUSED = frozenset({"/healthz", "/readyz", "/metrics"})


# Every route label is a path of the OpenAPI document (gateway.web.openapi), or UNMATCHED for
# a request the API does not serve; the label values are fixed whatever clients send.
UNMATCHED = "unmatched"
# The queue tree is one aiohttp route (gateway.web.rest_queues): its label is the template of
# the operation, so that sends, receives (long polls among them), browses and purges are told
# apart.
_QUEUE_TREE = "/v1/queues/{tail}"
_QUEUE_LEAVES = frozenset({"messages", "receive", "purge", "requeue", "head", "range",
                           "consumers"})
# Routes whose last segment is an action (gateway.web.rest_tx, rest_links): one template per
# action the API knows, so that commit, abort and prepare latencies are told apart.
_ACTIONS = {"/v1/transactions/{id}/{action}": frozenset({"prepare", "commit", "abort"}),
            "/v1/links/{id}/{action}": frozenset({"pause", "resume"})}
_SRMP_ROUTE = "srmp-"  # gateway.web.srmp_routes names its route per virtual directory


def _route_label(request: web.Request) -> str:
    resource = request.match_info.route.resource
    if resource is None:
        return UNMATCHED
    canonical = resource.canonical
    if canonical == _QUEUE_TREE:
        return _queue_route(request.match_info.get("tail", ""))
    actions = _ACTIONS.get(canonical)
    if actions is not None:
        action = request.match_info.get("action", "")
        return canonical.replace("{action}", action) if action in actions else UNMATCHED
    name = resource.name
    if name is not None and name.startswith(_SRMP_ROUTE):  # the configured directory
        return f"/{name[len(_SRMP_ROUTE):]}/{{path}}"
    return canonical


@functools.lru_cache(maxsize=256)  # a few queues take most requests; bounded
def _queue_route(tail: str) -> str:
    segments = tail.split("/")
    rest = segments[2:] if segments[0].lower() == "private$" and len(segments) > 1 else (
        segments[1:])
    if not rest:
        return "/v1/queues/{path}"
    if len(rest) == 1 and rest[0] in _QUEUE_LEAVES:
        return "/v1/queues/{path}/" + rest[0]
    if len(rest) == 2 and rest[0] == "messages":
        return "/v1/queues/{path}/messages/{id}"
    if len(rest) == 3 and rest[0] == "messages" and rest[2] == "requeue":
        return "/v1/queues/{path}/messages/{id}/requeue"
    if len(rest) == 2 and rest[0] == "consumers":
        return "/v1/queues/{path}/consumers/{name}"
    if len(rest) == 3 and rest[0] == "consumers" and rest[2] == "commit":
        return "/v1/queues/{path}/consumers/{name}/commit"
    return UNMATCHED


def make_middlewares(metrics: Metrics, *, concurrent_requests_max: int,
                     gate: Gate | None = None,
                     unmatched: Handler | None = None,
                     long_polls: LongPolls | None = None,
                     shared: InFlight | None = None,
                     answer_timeout: float | None = None,
                     shares: PartnerShares | None = None) -> list[Middleware]:
    """Build the middleware chain, outermost first; ``gate`` (authentication, body limits)
    is awaited before every handler, inside the error mapping. ``shared``:
    the cap is on the sum of every front's requests in flight (gateway.fronts).
    ``answer_timeout``: a large answer is written here, within it (gateway.web.slow_readers),
    so that its request keeps its place until the client has it. ``shares``: the partners'
    shares the gate takes places in; each is given back here once its request is answered.
    ``unmatched``: what answers a path no route serves, or a method its route does not allow
    (a front's: after its authentication), after the headers' check; else aiohttp's 404 or
    405.

    One layer does the cap, the metrics and the error mapping: every layer is two more calls
    per request in aiohttp, and this runs for every message sent. The cap is a plain count
    (a request over it is answered 503 at once, never queued, so no semaphore is needed),
    and requests are counted as plain numbers (gateway.http_stats).
    """
    in_flight = 0  # parked long polls included: the gauge shows every request being handled
    exempt = 0  # of which health, readiness and metrics: never refused, never counted against
    polls = long_polls if long_polls is not None else LongPolls(1)
    metrics.in_flight_now = lambda: in_flight
    metrics.http_in_flight.set_function(metrics.in_flight_now)
    record = metrics.http.record
    if shared is not None:
        shared.watch(lambda: in_flight - polls.parked - exempt)

    @web.middleware
    async def observe(request: web.Request, handler: Handler) -> web.StreamResponse:
        nonlocal in_flight, exempt
        never_refused = request.path in NEVER_REFUSED
        busy = in_flight - polls.parked - exempt if shared is None else shared.total()
        if busy >= concurrent_requests_max and not never_refused:
            response: web.StreamResponse = problem_response(
                503,
                f"more than {concurrent_requests_max} requests in flight",
                type_slug="overloaded",
                headers={"Retry-After": "1"},
            )
            _count(request, response.status, 0.0)
            return response
        started = time.perf_counter()
        in_flight += 1
        exempt += never_refused
        if shared is not None:
            shared.refresh()
        status = 500
        try:
            response = await _answer(request, handler if unmatched is None
                                     or request.match_info.http_exception is None
                                     else unmatched, gate)
            status = response.status
            if (answer_timeout is not None and isinstance(response, web.Response)
                    and (response.content_length or 0) >= WHOLE_ANSWER_MIN):
                await finish_within(request, response, answer_timeout)
            return response
        except asyncio.CancelledError:
            # The client went away and aiohttp cancelled its handler: counted as nginx
            # counts it (499, client closed request), not as the gateway's error.
            status = 499
            raise
        finally:
            in_flight -= 1
            exempt -= never_refused
            if shares is not None:
                shares.release(request)
            if shared is not None:
                shared.refresh()
            _count(request, status, time.perf_counter() - started)

    def _count(request: web.Request, status: int, seconds: float) -> None:
        record(_route_label(request), request.method, status, seconds)

    return [observe]


# Headers that carry one value: given twice, which one counts would be a guess (and a check
# and a use reading different ones a way round it), so the request is refused. ``Mq-*``
# headers are all single-valued too.
SINGLE_VALUED = frozenset({"authorization", "content-type", "idempotency-key"})


def single_valued(lower: str) -> bool:
    """Whether a header (its name in lower case) may come once only (400 twice)."""
    return lower in SINGLE_VALUED or lower.startswith("mq-")


def _check_headers(request: web.Request) -> None:
    """Raises: ProblemError 400 for a request target with a fragment, naming the first
    header whose value is not UTF-8 text, or a single-valued header given more than once;
    415 for a body's Content-Encoding that is not decoded (``_check_coding``). The probes
    read no header: they answer whatever headers they get.

    aiohttp keeps bytes that are not UTF-8 as lone surrogates, which no store, log line,
    answer or command (gateway.fronts) can carry. Checked before anything else,
    on every route, so that one process and several answer alike."""
    if request.path in PROBES:
        return
    if "#" in request.raw_path:
        # aiohttp keeps it in path_qs (what a signature covers) but not in the path the
        # routes match: a signature would cover a target other than the one served.
        raise ProblemError(400, "the request target has a fragment (#...), which HTTP does "
                           "not send (RFC 9112 3.2): write a '#' in a name as %23",
                           type_slug="bad-request")
    _check_coding(request)
    seen: set[str] | None = None
    for name, value in request.headers.items():
        if not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError:
                raise ProblemError(400, f"{name}: not UTF-8 text",
                                   type_slug="bad-header") from None
        lower = name.lower()
        if single_valued(lower):
            if seen is None:
                seen = {lower}
            elif lower in seen:
                raise ProblemError(400, f"{name}: given more than once; it takes one value",
                                   type_slug="bad-header")
            else:
                seen.add(lower)


def _check_coding(request: web.Request) -> None:
    """Raises: ProblemError 415 naming a ``Content-Encoding`` the body cannot be decoded
    from."""
    coding = request.headers.get("Content-Encoding")
    if coding is not None and request.can_read_body and (
            coding.strip().lower() not in CODINGS):  # (another would be stored encoded)
        raise ProblemError(415, f"Content-Encoding: {coding!r} is not taken (gzip, deflate "
                           "or none)", type_slug="unsupported-encoding")


async def _closing(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """``response`` sent, then the connection closed: aiohttp would otherwise read the rest
    of a body that cannot be read (its chunks do not parse), and log that failure as an
    unhandled exception, for every such request."""
    response.force_close()
    await response.prepare(request)
    await response.write_eof()
    request.protocol.force_close()
    return response


async def _answer(request: web.Request, handler: Handler,
                  gate: Gate | None) -> web.StreamResponse:
    # An absolute-form target without a path ("GET http://host") has the path "/"
    # (RFC 9110 4.2.3); aiohttp leaves it empty.
    instance = request.path or "/"
    try:
        _check_headers(request)
        if gate is not None:  # (a front's handlers call the gate, or the owner answers)
            await gate(request)  # checks the path first when it reads the body
            check_path(request)  # a signed request's, a public path's
        try:
            return await handler(request)
        except QueueError as refused:
            raise as_problem(refused) from refused
    except ProblemError as exc:
        return problem_response(
            exc.status_hint,
            exc.detail,
            type_slug=exc.type_slug,
            title=exc.title,
            instance=instance,
            headers=exc.headers,
            extra=exc.extra,
        )
    except web.RequestPayloadError as exc:  # a body aiohttp cannot read (a chunk, cut)
        return await _closing(request, problem_response(400, f"request body: {exc}",
                                                        type_slug="bad-body",
                                                        instance=instance))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        problem = http_problem(exc)
        return problem_response(problem.status_hint, problem.detail, instance=instance,
                                headers=problem.headers, type_slug=problem.type_slug)
    except AnswerInDoubt:
        if request.transport is not None:
            request.transport.abort()
        return web.Response(status=503)  # counted; never sent (the connection is gone)
    except asyncio.CancelledError:
        raise
    except Exception:
        server_log.exception("unhandled error method=%s path=%s", request.method, request.path)
        return problem_response(500, "internal error; see the gateway log", instance=instance)
