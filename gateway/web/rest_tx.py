"""REST API for transactions (``/v1/transactions``) and atomic batches (``/v1/batch``)."""

from __future__ import annotations

import base64
import binascii
import re
import time

from aiohttp import web

from gateway import jsonio
from gateway.auth.principal import Principal
from gateway.errors import ProblemError
from gateway.msmq.message import MessageProperties
from gateway.queues.batch import batch_answer, send_batch
from gateway.queues.manager import QueueManager
from gateway.queues.transactions import Transactions
from gateway.web.appkeys import STATE_KEY
from gateway.web.auth_middleware import (
    body_of,
    principal_of,
    require,
    require_admin,
    scoped_key,
)
from gateway.web.reply_addresses import check_request_replies
from gateway.web.rest_body import no_fields, parse_json
from gateway.web.rest_codec import (
    REPLAYED,
    HeaderError,
    header_text,
    message_location,
    parse_send_headers,
)

__all__ = ["routes", "BATCH_PROPERTY_KEYS", "batch_items", "batch_key", "batch_response",
           "store_batch", "transaction_action"]

routes = web.RouteTableDef()
BATCH_MESSAGES_MAX = 10_000
# What an Idempotency-Key's digest names as the destination of a batch: no queue path starts
# with "/", so a single send of the same bytes with the same key is another request.
_BATCH_DIGEST_DESTINATION = "/v1/batch"


def _ready(request: web.Request) -> tuple[QueueManager, Transactions]:
    services = request.app[STATE_KEY].serving()
    return services.queue_manager, services.transactions


@routes.post("/v1/transactions")
async def begin(request: web.Request) -> web.Response:
    return await _tx_response(request, "begin", "")


@routes.get("/v1/transactions")
async def list_transactions(request: web.Request) -> web.Response:
    """A partner's own transactions; the admin's list has everyone's. On an open gateway
    every client is the same anonymous owner: the list is management, for loopback only."""
    _, transactions = _ready(request)
    if principal_of(request).open:
        require_admin(request)
    return jsonio.json_response(transaction_list(transactions, principal_of(request)))


def transaction_list(transactions: Transactions, principal: Principal) -> dict[str, object]:
    """The answer of ``GET /v1/transactions``: the transactions ``principal`` may see."""
    return {"transactions": [t.summary() for t in transactions.visible(principal)]}


@routes.get("/v1/transactions/{id}")
async def show(request: web.Request) -> web.Response:
    return await _tx_response(request, "show", request.match_info["id"])


@routes.post("/v1/transactions/{id}/{action}")
async def act(request: web.Request) -> web.Response:
    return await _tx_response(request, request.match_info["action"], request.match_info["id"])


async def _tx_response(request: web.Request, action: str, tx_id: str) -> web.Response:
    _, transactions = _ready(request)
    if request.method == "POST":
        no_fields(await body_of(request))
    status, answer = await transaction_action(transactions, principal_of(request), action,
                                              tx_id)
    return jsonio.json_response(answer, status=status)


async def transaction_action(transactions: Transactions, principal: Principal, action: str,
                             tx_id: str) -> tuple[int, dict[str, object]]:
    """``begin`` a transaction, ``show``, ``prepare``, ``commit`` or ``abort`` transaction
    ``tx_id`` for ``principal``: the answer's status and body.

    Raises:
        QueueError: 404 for a transaction that is not the principal's (gateway.queues).
        ProblemError: 404 for an action there is not."""
    if action == "begin":
        return 201, transactions.begin(principal).summary()
    if action == "show":
        return 200, transactions.get(tx_id, principal).summary()
    if action == "prepare":
        return 200, (await transactions.prepare(tx_id, principal)).summary()
    if action == "commit":
        made = await transactions.commit(tx_id, principal)
        return 200, {"id": tx_id, "state": "committed", "messages": made}
    if action == "abort":
        await transactions.abort(tx_id, principal)
        return 200, {"id": tx_id, "state": "aborted"}
    raise ProblemError(404, f"no action {action!r} (prepare, commit or abort)",
                       type_slug="not-found")


@routes.post("/v1/batch")
async def batch(request: web.Request) -> web.Response:
    """``{"messages": [{"queue", "body_base64", "properties"}]}`` stored as one atomic
    transaction. ``properties`` takes the send headers' names without ``Mq-``
    (``label``, ``priority``, ``time_to_be_received``, ``correlation_id``, ...).
    ``Idempotency-Key`` applies as to a single send, the whole body being the request."""
    qm, _ = _ready(request)
    raw = await body_of(request)
    items = batch_items(raw)
    for index, (queue, _, props) in enumerate(items):
        require(request, "send", queue)
        check_request_replies(request, props, where=f"messages[{index}].properties.")
    answer, replayed = await store_batch(qm, items, batch_key(request), raw)
    return batch_response(answer, replayed)


def batch_items(raw: bytes) -> list[tuple[str, bytes, MessageProperties]]:
    """A batch's messages ``(queue, body, properties)``, every key known and checked.

    Raises:
        ProblemError: 400 naming the item and field."""
    doc = parse_json(raw)
    if isinstance(doc, dict):
        unknown = sorted(set(doc) - {"messages"})
        if unknown:
            raise ProblemError(400, f"{unknown[0][:64]}: unknown key (a batch is "
                               "{\"messages\": [...]})", type_slug="bad-request")
    messages = doc.get("messages") if isinstance(doc, dict) else None
    if not isinstance(messages, list) or not 0 < len(messages) <= BATCH_MESSAGES_MAX:
        raise ProblemError(400, f"body must be {{\"messages\": [...]}} with 1 to "
                           f"{BATCH_MESSAGES_MAX} messages", type_slug="bad-request")
    now_ms = int(time.time() * 1000)
    return [_item(index, item, now_ms) for index, item in enumerate(messages)]


def batch_key(request: web.Request) -> str | None:
    """The batch's Idempotency-Key in its principal's space (None without one).

    Raises: ProblemError 400 for an Mq-Transaction header: a batch is a transaction of its
    own, and a client that named another one must not believe its messages are in it."""
    if "Mq-Transaction" in request.headers:
        raise ProblemError(400, "Mq-Transaction: a batch is a transaction of its own; to send "
                           "in a transaction, send each message with the header",
                           type_slug="bad-header")
    return scoped_key(request, _idempotency_key(request))


async def store_batch(qm: QueueManager, items: list[tuple[str, bytes, MessageProperties]],
                      key: str | None, raw: bytes) -> tuple[dict[str, object], bool]:
    """Store a checked batch: its answer, and whether it replays an earlier one with the
    same key and body (``raw``, the request's body, is what the key's digest covers)."""
    if key is None:
        return batch_answer(await send_batch(qm, items)), False
    assert qm.dedup is not None
    digest = qm.dedup.digest(raw, _BATCH_DIGEST_DESTINATION)
    prior = await qm.dedup.seen(key, digest)
    if prior:
        return prior, True
    qm.dedup.begin(key)
    try:
        answer = batch_answer(await send_batch(qm, items, dedup_key=(key, digest)))
    finally:
        qm.dedup.failed(key)  # no-op once stored
    return answer, False


def batch_response(answer: dict[str, object], replayed: bool) -> web.Response:
    """The 201 of a batch (with its Location when it holds one message)."""
    return jsonio.json_response(answer, status=201,
                                headers=_location(answer) | (REPLAYED if replayed else {}))


def _idempotency_key(request: web.Request) -> str | None:
    try:
        key = header_text(request.headers, "Idempotency-Key")
    except HeaderError as exc:
        raise ProblemError(400, str(exc), type_slug=exc.type_slug) from exc
    if key is not None and not 0 < len(key) <= 255:
        raise ProblemError(400, "Idempotency-Key: must be 1..255 characters",
                           type_slug="bad-header")
    return key


def _location(answer: dict[str, object]) -> dict[str, str]:
    """One message stored: its Location, as for any send; several have no one resource."""
    messages = answer.get("messages")
    if not isinstance(messages, list) or len(messages) != 1:
        return {}
    return {"Location": message_location(str(messages[0]["queue"]), str(messages[0]["id"]))}


_ITEM_KEYS = frozenset({"queue", "body_base64", "properties"})
# The send headers a batch item's properties stand for, without ``Mq-``; a batch is one
# transaction, so Mq-Transaction and Idempotency-Key have no item counterpart.
BATCH_PROPERTY_KEYS = frozenset({
    "label", "priority", "delivery", "time_to_reach_queue", "time_to_be_received",
    "correlation_id", "response_queue", "admin_queue", "acknowledge", "journal",
    "app_specific", "sent_time", "content_type"})


def _item(index: int, item: object, now_ms: int) -> tuple[str, bytes, MessageProperties]:
    """One batch item, all of its keys known: a misspelt key would otherwise be dropped in
    silence (a ``body`` for ``body_base64`` stored an empty message)."""
    where = f"messages[{index}]"
    if not isinstance(item, dict):
        raise ProblemError(400, f"{where}: expected an object", type_slug="bad-request")
    _known(item, _ITEM_KEYS, where)
    if not isinstance(item.get("queue"), str):
        raise ProblemError(400, f"{where}: needs a \"queue\" string", type_slug="bad-request")
    props = item.get("properties", {})
    if not isinstance(props, dict):
        raise ProblemError(400, f"{where}.properties: expected an object",
                           type_slug="bad-request")
    _known({k.lower().replace("-", "_"): v for k, v in props.items()}, BATCH_PROPERTY_KEYS,
           f"{where}.properties")
    keys = {_header(k): k for k in props}
    headers = {_header(k): _header_value(f"{where}.properties.{k[:64]} ({_header(k)})", v)
               for k, v in props.items()}
    try:
        request = parse_send_headers(headers, now_ms=now_ms)
    except HeaderError as exc:
        raise ProblemError(400, f"{where}.properties.{keys.get(exc.header, exc.header)[:64]} "
                           f"({exc.header}): {exc.detail}", type_slug=exc.type_slug) from exc
    encoded = item.get("body_base64")
    if not isinstance(encoded, str):
        raise ProblemError(400, f"{where}.body_base64: required, the body in base64 (\"\" "
                           "for an empty body)", type_slug="bad-request")
    try:
        body = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ProblemError(400, f"{where}.body_base64: not base64 ({exc})",
                           type_slug="bad-request") from exc
    return item["queue"], body, request.properties


# What a send header's value cannot hold (RFC 9110 field-value; aiohttp's parser refuses it
# before any handler runs): a control character other than tab.
_NOT_IN_A_HEADER = re.compile("[\x00-\x08\x0a-\x1f\x7f]")
_JSON_TYPES = {dict: "an object", list: "an array", bool: "a boolean", float: "a number",
               type(None): "null"}


def _header_value(where: str, value: object) -> str:
    """A property as the send header it stands for: a string or an integer (the OpenAPI
    schema), with the characters a header can carry; anything else would be stored as
    Python's text of it."""
    if isinstance(value, str):
        bad = _NOT_IN_A_HEADER.search(value)
        if bad:
            raise ProblemError(400, f"{where}: holds the control character "
                               f"U+{ord(bad.group()):04X} (a send header holds none but tab)",
                               type_slug="bad-request")
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ProblemError(400, f"{where}: expected a string or an integer, not "
                       f"{_JSON_TYPES.get(type(value), type(value).__name__)}",
                       type_slug="bad-request")


def _known(doc: dict[str, object], known: frozenset[str], where: str) -> None:
    unknown = sorted(set(doc) - known)
    if unknown:
        raise ProblemError(400, f"{where}.{unknown[0][:64]}: unknown key (known: "
                           f"{', '.join(sorted(known))})", type_slug="bad-request")


def _header(key: str) -> str:
    if key.lower() in ("content_type", "content-type"):
        return "Content-Type"
    return "Mq-" + "-".join(part.capitalize() for part in key.replace("-", "_").split("_"))
