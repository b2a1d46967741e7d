"""Queue management: list, show, create, delete and purge queues, read, delete and requeue
messages one by one, requeue dead letters in bulk. Operations (gateway.web.calls): they
run where the store is, in one process or the store owner behind fronts; the web edge has
authorized them (gateway.web.queue_access)."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import unquote

from aiohttp import web

from gateway.errors import ProblemError
from gateway.msmq.classes import MessageClass
from gateway.queues.manager import QueueManager, QueueSettings
from gateway.queues.redrive import RedriveFilter
from gateway.units import parse_size
from gateway.web.appkeys import STATE_KEY
from gateway.web.calls import Call, Reply, json_reply, operate, operation
from gateway.web.queue_access import split_tail
from gateway.web.rest_body import json_object, names, no_fields
from gateway.web.rest_queues import message_answer
from gateway.web.state import Services
from mapping.names import MACHINE_JOURNAL, QueueNameError, parse_queue_path

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.get("/v1/queues")
async def list_queues(request: web.Request) -> web.Response:
    return await operate(request, "queues")


@operation("queues")
async def _list(app: web.Application, call: Call) -> Reply:
    """The queues the caller may send to or receive from."""
    qm = app[STATE_KEY].serving().queue_manager
    principal = call.principal
    return json_reply({"queues": [
        _queue_json(qm, q.path.canonical) for q in qm.queues()
        if principal.may("send", q.path.canonical)
        or principal.may("receive", q.path.canonical)]})


@operation("queue")
async def _queue(app: web.Application, call: Call) -> Reply:
    """A request under ``/v1/queues/<queue>`` but for sends, receives, browses and the
    log's resources (gateway.web.rest_queues, rest_range)."""
    services = app[STATE_KEY].serving()
    name, rest = split_tail(call.match["tail"])
    method = "GET" if call.method == "HEAD" else call.method  # aiohttp leaves the body out
    if not rest:
        if method == "GET":
            return json_reply(_queue_json(services.queue_manager, name))
        if method == "PUT":
            return await _put(services.queue_manager, name, call.body)
        _only(method, "DELETE", "GET", "HEAD", "PUT")
        queue = services.queue_manager.queue(name)
        await services.queue_manager.delete_queue(name)
        await services.consumers.drop_queue(queue)
        return Reply(204, b"", {})
    if rest == ["purge"]:
        _only(method, "POST")
        no_fields(call.body)
        return json_reply({"purged": await services.consumers.purge(
            services.queue_manager.queue(name))})
    if rest == ["requeue"]:
        _only(method, "POST")
        return await _requeue_bulk(services, name, call.body)
    if len(rest) == 3 and rest[0] == "messages" and rest[2] == "requeue":
        _only(method, "POST")
        body = json_object(call.body, allow_empty=True)
        moved = await services.redrive.one(name, unquote(rest[1]), _target(body))
        return json_reply({"id": moved.message_id, "queue": moved.queue})
    if len(rest) == 2 and rest[0] == "messages":
        message_id = unquote(rest[1])
        if method == "GET":
            return json_reply(message_answer(await services.queue_manager.get(name,
                                                                              message_id)))
        _only(method, "DELETE", "GET", "HEAD")
        await services.queue_manager.delete(name, message_id)
        return Reply(204, b"", {})
    raise ProblemError(404, f"no resource {'/'.join(rest)!r} under queue {name!r}",
                       type_slug="not-found")


def _only(method: str, *allowed: str) -> None:
    """Raises: HTTPMethodNotAllowed unless ``method`` is one of ``allowed`` (the edge has
    refused it already: gateway.web.queue_access.served)."""
    if method not in allowed:
        raise web.HTTPMethodNotAllowed(method, sorted(allowed))


def _queue_json(qm: QueueManager, name: str) -> dict[str, object]:
    queue = qm.queue(name)
    s = queue.settings
    return {"path": queue.path.display, "transactional": s.transactional, "quota": s.quota,
            "journal": s.journal, "journal_quota": s.journal_quota, "label": s.label,
            "anonymous": s.anonymous, "authenticate": s.authenticate,
            "system": queue.path.system or queue.is_dead_letter
            or queue.path.canonical == MACHINE_JOURNAL, "messages": qm.store.count(
                queue.queue_id), "bytes": qm.store.queue_bytes(queue.queue_id)}


async def _put(qm: QueueManager, name: str, raw: bytes) -> Reply:
    body = json_object(raw, allow_empty=True)
    known = {"transactional", "quota", "journal", "journal_quota", "label", "anonymous",
             "authenticate"}
    unknown = set(body) - known
    if unknown:
        raise ProblemError(400, f"unknown queue properties: {names(unknown)}",
                           type_slug="bad-request")
    if "\x7f" in name and qm.lookup(parse_queue_path(name).canonical) is None:
        # MS-MQMQ allows DEL in a queue name, but no HTTP header (Mq-Destination,
        # Mq-Response-Queue) can carry it: such a queue could not be addressed by format name.
        # Existing ones (stores written before) keep being served.
        raise ProblemError(400, f"queue name {name!r} has a character a new queue may not "
                           f"have: {chr(0x7F)!r} (DEL: no header can carry it)",
                           type_slug="MQ_ERROR_ILLEGAL_QUEUE_PATHNAME")
    settings = QueueSettings(
        transactional=_bool(body, "transactional"), quota=_size(body, "quota"),
        journal=_bool(body, "journal"), journal_quota=_size(body, "journal_quota"),
        label=_label(body), anonymous=_bool(body, "anonymous"),
        authenticate=_bool(body, "authenticate"))
    queue, created = await qm.create_queue(name, settings)
    return json_reply(_queue_json(qm, queue.path.canonical), status=201 if created else 200)


def _target(body: dict[str, object]) -> str | None:
    target = body.get("queue")
    if target is not None and not isinstance(target, str):
        raise ProblemError(400, "queue: expected a queue path", type_slug="bad-request")
    return target


_CLASS_NAMES = frozenset(c.msmq_name for c in MessageClass)


async def _requeue_bulk(services: Services, name: str, raw: bytes) -> Reply:
    """Body: optional ``queue`` (target), ``class``, ``source_queue``, ``after`` and ``before``
    (ISO 8601 times of dead-lettering), ``limit`` (<= 10000)."""
    body = json_object(raw, allow_empty=True)
    unknown = set(body) - {"queue", "class", "source_queue", "after", "before", "limit"}
    if unknown:
        raise ProblemError(400, f"unknown filter fields: {', '.join(sorted(unknown))}",
                           type_slug="bad-request")
    limit = body.get("limit", 1000)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise ProblemError(400, "limit: expected an integer 1..10000", type_slug="bad-request")
    cls, source = body.get("class"), body.get("source_queue")
    if cls is not None and not isinstance(cls, str) or source is not None and not isinstance(
            source, str):
        raise ProblemError(400, "class and source_queue must be strings",
                           type_slug="bad-request")
    if cls is not None and cls not in _CLASS_NAMES:
        raise ProblemError(400, f"class: {cls!r} is not an MSMQ message class (such as "
                           "MQMSG_CLASS_NACK_RECEIVE_TIMEOUT)", type_slug="bad-request")
    if source is not None:
        try:
            parse_queue_path(source)
        except QueueNameError as exc:
            raise ProblemError(400, f"source_queue: {source!r} is not a queue path ({exc})",
                               type_slug="bad-request") from exc
    flt = RedriveFilter(message_class=cls, source_queue=source, limit=limit,
                        after_ms=_time_ms(body, "after"), before_ms=_time_ms(body, "before"))
    moved = await services.redrive.bulk(name, flt, _target(body))
    return json_reply({"requeued": moved})


def _time_ms(body: dict[str, object], key: str) -> int:
    value = body.get(key)
    if value is None:
        return 0
    try:
        if not isinstance(value, str):
            raise ValueError("not a string")
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ProblemError(400, f"{key}: expected an ISO 8601 time ({exc})",
                           type_slug="bad-request") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def _bool(body: dict[str, object], key: str) -> bool:
    value = body.get(key, False)
    if not isinstance(value, bool):
        raise ProblemError(400, f"{key}: expected true or false, got {value!r}",
                           type_slug="bad-request")
    return value


def _size(body: dict[str, object], key: str) -> int:
    value = body.get(key, 0)
    try:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise ValueError(f"expected bytes or a size such as '4MiB', got {value!r}")
        return parse_size(value)
    except ValueError as exc:
        raise ProblemError(400, f"{key}: {exc}", type_slug="bad-request") from exc


def _label(body: dict[str, object]) -> str:
    value = body.get("label", "")
    if not isinstance(value, str) or len(value) > 124:
        raise ProblemError(400, "label: expected a string of at most 124 characters",
                           type_slug="bad-request")
    return value


