"""REST API ``/v1/queues/...``: translate HTTP to queue-manager calls and back (no decisions).

``{path}`` is ``name`` or ``private$/name`` (case-insensitive, ``\\`` allowed for ``/``), so
one tail route takes everything under ``/v1/queues/`` and splits it: a queue name never
contains ``/``, and what follows it names the sub-resource.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Callable

from aiohttp import web

from gateway import jsonio
from gateway.auth.principal import Principal
from gateway.errors import ProblemError
from gateway.msmq.message import MessageProperties
from gateway.queues.manager import Park, QueueManager, ReceivedMessage
from gateway.queues.transactions import Transactions
from gateway.web import rest_range
from gateway.web.appkeys import STATE_KEY
from gateway.web.auth_middleware import body_of, principal_of, scoped_key
from gateway.web.calls import operate
from gateway.web.long_polls import LONG_POLLS_KEY
from gateway.web.queue_access import authorize, split_tail
from gateway.web.reply_addresses import check_request_replies
from gateway.web.rest_codec import (
    REPLAYED,
    HeaderError,
    header_text,
    message_json,
    message_location,
    parse_send_headers,
)

__all__ = ["routes"]

routes = web.RouteTableDef()


def _qm(request: web.Request) -> QueueManager:
    return request.app[STATE_KEY].serving().queue_manager


def _transactions(request: web.Request) -> Transactions:
    return request.app[STATE_KEY].serving().transactions


def message_answer(m: ReceivedMessage) -> dict[str, object]:
    return message_json(message_id=m.message_id, queue=m.queue, seq=m.seq,
                        properties=m.properties, body=m.body)


# Every character, a line break too (``.`` would leave it to a bare 404): the name rule names it.
@routes.route("*", "/v1/queues/{tail:[\\s\\S]+}")
async def queue_tree(request: web.Request) -> web.StreamResponse:
    name, rest = split_tail(request.match_info["tail"])
    method = request.method
    authorize(request, name, rest)
    if rest == ["messages"]:
        qm = _qm(request)
        return await _dispatch(method, {"GET": _browse, "POST": _send}, request, qm, name)
    if rest == ["receive"]:
        return await _dispatch(method, {"POST": _receive}, request, _qm(request), name)
    if rest and rest[0] in ("head", "range", "consumers"):
        return await rest_range.handle(request, _qm(request), name, rest)
    return await operate(request, "queue")  # the queue itself, its messages one by one


async def _dispatch(method: str, table: dict[str, object], request: web.Request,
                    qm: QueueManager, name: str) -> web.StreamResponse:
    # HEAD is GET without the body (aiohttp leaves the body out), as on every other route.
    handler = table.get(method) or (table.get("GET") if method == "HEAD" else None)
    if handler is None:  # HEAD wherever GET, as aiohttp's own 405 says
        raise web.HTTPMethodNotAllowed(method, sorted({*table, *(["HEAD"] if "GET" in table
                                                                 else [])}))
    response: web.StreamResponse = await handler(request, qm, name)  # type: ignore[operator]
    return response


async def _send(request: web.Request, qm: QueueManager, name: str) -> web.Response:
    try:
        send = parse_send_headers(request.headers, now_ms=int(time.time() * 1000))
    except HeaderError as exc:
        raise ProblemError(400, str(exc), type_slug=exc.type_slug) from exc
    check_request_replies(request, send.properties)
    qm.queue(name)  # an unknown queue is refused before the body is read
    if send.transaction not in (None, "single", "none"):
        transactions = _transactions(request)
        principal = principal_of(request)
        transactions.get(send.transaction, principal, join=True)  # before the body is read
        body = await body_of(request)
        return jsonio.json_response(send_in_transaction(
            qm, transactions, principal, send.transaction, name, body, send.properties),
            status=202)
    body = await body_of(request)
    answer, replayed = await send_one(qm, name, body, send.properties,
                                      transaction=send.transaction,
                                      key=scoped_key(request, send.idempotency_key))
    return sent_response(answer, replayed)


def send_in_transaction(qm: QueueManager, transactions: Transactions, principal: Principal,
                        tx_id: str, name: str, body: bytes, properties: MessageProperties
                        ) -> dict[str, object]:
    """Hold a send to queue ``name`` in ``principal``'s transaction ``tx_id`` (stored at its
    commit): the 202's answer.

    Raises:
        QueueError: an unknown queue first, then a transaction that is not the principal's
            (404), or a send the transaction cannot hold."""
    display = qm.queue(name).path.display
    tx, index = transactions.send(tx_id, principal, name, body, properties)
    return {"transaction": tx.id, "queue": display, "index": index}


async def send_one(qm: QueueManager, name: str, body: bytes, properties: MessageProperties, *,
                   transaction: str | None, key: str | None) -> tuple[dict[str, object], bool]:
    """Store one message sent outside a transaction: its answer, and whether it is the
    replay of an earlier send with the same Idempotency-Key (``key``, scoped)."""
    prior = await replayed_send(qm, key, name, body)
    if prior is not None:
        return prior, True
    message = await qm.send(name, body, properties, transaction=transaction, dedup_key=key,
                            fresh=True)
    return {"id": message.message_id, "queue": message.queue, "seq": message.seq}, False


def sent_response(answer: dict[str, object], replayed: bool) -> web.Response:
    """The 201 of a send to one queue."""
    return jsonio.json_response(answer, status=201, headers=sent_headers(answer, replayed))


def sent_headers(answer: dict[str, object], replayed: bool) -> dict[str, str]:
    """``sent_response``'s headers but Content-Type (a front's send lane writes them too)."""
    headers = {"Location": message_location(str(answer["queue"]), str(answer["id"]))}
    return {**REPLAYED, **headers} if replayed else headers


async def replayed_send(qm: QueueManager, key: str | None, name: str, body: bytes
                        ) -> dict[str, object] | None:
    """The first answer to a send to queue ``name`` with this Idempotency-Key and body, so
    the replay can say it is one (``QueueManager.send`` answers a replay as it stands).

    Nothing awaits between this look-up and the send's own unless a send with the same key
    is in flight, and then this one waits for it and finds its answer.

    Raises:
        ProblemError: 422 when the key was used with another body.
    """
    if key is None:
        return None
    assert qm.dedup is not None
    return await qm.dedup.seen(key, qm.dedup.digest(body, qm.queue(name).path.canonical))


async def _receive(request: web.Request, qm: QueueManager, name: str) -> web.Response:
    asked = receive_query(request)
    messages = await receive_messages(request.app, principal_of(request), name, asked,
                                      gone=lambda: _hung_up(request))
    return jsonio.json_response({"messages": messages})


def receive_query(request: web.Request) -> tuple[int, float, str | None]:
    """A receive's ``(max, wait, Mq-Transaction)``.

    Raises:
        ProblemError: 400 naming the query parameter or header."""
    max_messages = _query_int(request, "max", 1, 1, 1000)
    wait = _query_float(request, "wait", 0.0, 0.0, 60.0)
    try:
        tx_id = header_text(request.headers, "Mq-Transaction")
    except HeaderError as exc:
        raise ProblemError(400, str(exc), type_slug=exc.type_slug) from exc
    return max_messages, wait, tx_id


async def receive_messages(app: web.Application, principal: Principal, name: str,
                           asked: tuple[int, float, str | None], *,
                           gone: Callable[[], bool]) -> list[dict[str, object]]:
    """Take up to ``max`` messages from queue ``name`` for ``principal``, waiting up to
    ``wait`` seconds, in its transaction when ``Mq-Transaction`` names one; ``gone`` tells
    when the client went away (nothing is taken then). The messages as JSON objects."""
    max_messages, wait, tx_id = asked
    services = app[STATE_KEY].serving()
    park: Park | None = None
    if wait > 0:  # the long-poll slot: a partner's counts against its share
        partner = None if principal.admin or principal.open else principal.name
        park = functools.partial(app[LONG_POLLS_KEY].slot, partner)
    if tx_id is not None and tx_id not in ("none", "single"):
        messages = await services.transactions.receive(
            tx_id, principal, name, max_messages=max_messages, wait_s=wait, park=park,
            gone=gone)
    else:
        messages = await services.queue_manager.receive(
            name, max_messages=max_messages, wait_s=wait, park=park, gone=gone)
    return [message_answer(m) for m in messages]


def _hung_up(request: web.Request) -> bool:
    """The client's connection is closed (a front process that held it died, too): a
    waiting receive would take messages nobody can be given, and hold a long-poll slot."""
    return request.transport is None or request.transport.is_closing()


async def _browse(request: web.Request, qm: QueueManager, name: str) -> web.Response:
    return jsonio.json_response(browse_page(qm, name, browse_query(request)))


def browse_query(request: web.Request) -> tuple[int, int]:
    """A browse's ``(after, limit)``.

    Raises:
        ProblemError: 400 naming the query parameter."""
    return (_query_int(request, "after", 0, 0, 2**62),
            _query_int(request, "limit", 100, 1, 1000))


def browse_page(qm: QueueManager, name: str, asked: tuple[int, int]) -> dict[str, object]:
    """Up to ``limit`` messages of queue ``name`` after sequence ``after``, left in place,
    and where the next page starts."""
    after, limit = asked
    messages, last = qm.browse(name, after=after, limit=limit)
    return {"messages": [message_answer(m) for m in messages], "next": last}


def _query_int(request: web.Request, key: str, default: int, low: int, high: int) -> int:
    return int(_query_number(request, key, default, low, high, _int, "an integer"))


def _query_float(request: web.Request, key: str, default: float, low: float,
                 high: float) -> float:
    return _query_number(request, key, default, low, high, float, "a number")


_PLAIN_NUMBER = re.compile(r"[0-9]+(\.[0-9]+)?", re.ASCII)
_PLAIN_INT = re.compile(r"[0-9]+", re.ASCII)


def _int(text: str) -> float:
    return int(text)


def _query_number(request: web.Request, key: str, default: float, low: float, high: float,
                  parse: Callable[[str], float], what: str) -> float:
    """A query parameter in ``[low, high]``; a bad one is 400 naming it and its value.
    Only ASCII digits (and a decimal point for a number) are taken: Python's own parsing
    also reads other scripts' digits, ``_`` separators, signs and spaces."""
    given = request.query.getall(key, [])
    if not given:
        return default
    if len(given) > 1:
        raise ProblemError(400, f"query {key} is given {len(given)} times",
                           type_slug="bad-request")
    raw = given[0]
    try:
        if not (_PLAIN_INT if parse is _int else _PLAIN_NUMBER).fullmatch(raw):
            raise ValueError(raw)
        value = parse(raw)
    except ValueError:
        shown = f"{int(low)}..{int(high)}" if parse is _int else f"{low:g} to {high:g}"
        raise ProblemError(400, f"query {key}={raw[:64]!r} is not {what} in {shown} (digits "
                           "only, no sign)", type_slug="bad-request") from None
    if not low <= value <= high:
        raise ProblemError(400, f"query {key}={value} is out of range {low}..{high}",
                           type_slug="bad-request")
    return value
