"""Range reads and registered consumers over REST (the Spark source's side of the contract).

Under ``/v1/queues/{path}/``:

- ``GET head`` -> ``{"queue", "first", "next", "consumers": {name: position}}``: ``[first,
  next)`` is readable now and ``next`` only grows.
- ``GET range?from=A&to=B`` -> the records with ``A <= seq < min(B, next)`` framed as
  ``gateway.range_wire`` (``?format=json`` for people and scripts); header ``Entrepot-Next``
  is where the answer ends. 400 when ``A`` is 0 (sequences start at 1), 410 when it is
  below ``first``, 409 when it is beyond ``next``. At most 100,000 sequences wide; a JSON
  answer stops after 8 MiB of records (``max_bytes``).
- ``GET consumers``; ``PUT``/``GET``/``DELETE consumers/{name}`` (``PUT`` body
  ``{"start": "earliest" | "latest" | seq}``, 201 new / 200 known); ``POST
  consumers/{name}/commit`` with ``{"position": seq}``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from aiohttp import web
from multidict import MultiMapping

from gateway.errors import ProblemError
from gateway.logs import server_log
from gateway.msmq.message import MessageFormatError, compose_id, split_payload
from gateway.queues.errors import Conflict
from gateway.queues.manager import Queue, QueueManager
from gateway.queues.range_consumers import RangeConsumers
from gateway.range_wire import CONTENT_TYPE, END_OF_RANGE, encode_record
from gateway.web.appkeys import SETTINGS_KEY, STATE_KEY
from gateway.web.auth_middleware import body_of, principal_of
from gateway.web.rest_body import json_object, names
from gateway.web.rest_codec import message_json
from gateway.web.slow_readers import write_within
from store.records import StoredRecord

__all__ = ["JSON_RANGE_BYTES_MAX", "RANGE_WIDTH_MAX", "Records", "Reply", "answer",
           "consumers_of", "handle", "record_pieces", "reply_response", "request_body"]

RANGE_WIDTH_MAX = 100_000
# The largest sequence a client may name: a Java long's, what Spark's offsets hold.
SEQ_MAX = 2**63 - 1
# A ``format=json`` answer stops after this many bytes of records (one record at least), as
# ``max_bytes`` does: it is built whole, and base64 makes it a third larger.
JSON_RANGE_BYTES_MAX = 8 << 20
_RANGE_QUERY = frozenset({"from", "to", "format", "max_bytes"})
_FLUSH_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class Reply:
    """A whole answer: its status, its JSON body (None: no body) and headers."""

    status: int
    body: object
    headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class Records:
    """A range answer in the records format: written piece by piece (``record_pieces``)."""

    queue: Queue
    headers: dict[str, str]
    records: list[StoredRecord]


def consumers_of(request: web.Request) -> RangeConsumers:
    return request.app[STATE_KEY].serving().consumers


async def request_body(request: web.Request) -> bytes:
    """What ``answer`` reads of a request's body: only a PUT's or a POST's is ever parsed."""
    return await body_of(request) if request.method in ("PUT", "POST") else b""


async def handle(request: web.Request, qm: QueueManager, name: str, rest: list[str]
                 ) -> web.StreamResponse:
    """Serve ``rest`` (``head``, ``range`` or ``consumers[/name[/commit]]``) of a queue."""
    found = await answer(qm, consumers_of(request), name, rest, request.method, request.query,
                         await request_body(request), principal_of(request).consumer_owner)
    if isinstance(found, Reply):
        return reply_response(found)
    response = web.StreamResponse(headers=found.headers)
    await response.prepare(request)
    try:
        for piece in record_pieces(qm, found.queue, found.records):
            if piece is None:  # cut: no end marker, the connection closed
                if request.transport is not None:
                    request.transport.close()
                return response
            await write_within(request, response, piece,
                               request.app[SETTINGS_KEY].server.body_timeout)
        await response.write_eof()
    except ConnectionError:  # the reader hung up: its answer ends here, nothing failed
        server_log.info("range of %s not sent whole: the client closed the connection",
                        found.queue.path.display)
    return response


def reply_response(reply: Reply) -> web.Response:
    if reply.body is None:
        return web.Response(status=reply.status, headers=reply.headers)
    return web.json_response(reply.body, status=reply.status, headers=reply.headers)


async def answer(qm: QueueManager, consumers: RangeConsumers, name: str, rest: list[str],
                 method: str, query: MultiMapping[str], body: bytes, owner: str | None
                 ) -> Reply | Records:
    """The answer to ``method`` on ``rest`` of queue ``name`` (one process and the store
    owner behind fronts run this same code: gateway.fronts). ``owner``: whose consumers
    the caller sees and registers (``Principal.consumer_owner``).

    Raises:
        QueueError: no such queue.
        ProblemError: a bad query or body (400), a trimmed range (410), no such resource.
        web.HTTPMethodNotAllowed: a method the resource does not serve.
    """
    queue = qm.queue(name)
    if rest == ["head"]:
        _allow(method, "GET")
        return Reply(200, consumers.head(queue, owner), {})
    if rest == ["range"]:
        _allow(method, "GET")
        return _range(qm, consumers, queue, method, query)
    if rest == ["consumers"]:
        _allow(method, "GET")
        end = qm.store.readable_end(queue.queue_id)
        return Reply(200, {"consumers": [
            {"name": n, "position": p, "lag": end - p}
            for n, p in sorted(consumers.positions(queue, owner).items())]}, {})
    if len(rest) == 2 and rest[0] == "consumers":
        return await _consumer(consumers, queue, rest[1], method, body, owner)
    if len(rest) == 3 and rest[0] == "consumers" and rest[2] == "commit":
        _allow(method, "POST")
        position = _int_field(_fields(body, "position"), "position")
        done = await consumers.commit(queue, rest[1], position, owner)
        return Reply(200, {"name": rest[1], "position": done,
                           "first": consumers.floor(queue)}, {})
    raise ProblemError(404, f"no resource {'/'.join(rest)!r} under queue {name!r}",
                       type_slug="not-found")


async def _consumer(consumers: RangeConsumers, queue: Queue, name: str, method: str,
                    body: bytes, owner: str | None) -> Reply:
    if method == "PUT":
        fields = _fields(body, "start")
        start = fields.get("start", "earliest")
        if start not in ("earliest", "latest"):
            start = _int_field(fields, "start", low=1)  # not "gone": there is no sequence 0
        position, created = await consumers.register(queue, name, start, owner)
        return Reply(201 if created else 200, {"name": name, "position": position}, {})
    if method in ("GET", "HEAD"):
        positions = consumers.positions(queue, owner)
        if name not in positions:
            raise ProblemError(404, f"no consumer {name!r} on {queue.path.display}",
                               type_slug="consumer-not-found")
        return Reply(200, {"name": name, "position": positions[name]}, {})
    if method == "DELETE":
        await consumers.unregister(queue, name, owner)
        return Reply(204, None, {})
    raise web.HTTPMethodNotAllowed(method, ["DELETE", "GET", "HEAD", "PUT"])


def _range(qm: QueueManager, consumers: RangeConsumers, queue: Queue, method: str,
           query: MultiMapping[str]) -> Reply | Records:
    unknown = sorted(set(query) - _RANGE_QUERY)
    if unknown:
        raise ProblemError(400, f"unknown query parameters: {names(unknown)} (a range takes "
                           f"{names(_RANGE_QUERY)})", type_slug="bad-request")
    start = _query_seq(query, "from", low=1)
    stop = _query_seq(query, "to")
    fmt = _query_once(query, "format")
    fmt = "records" if fmt is None else fmt
    if fmt not in ("records", "json"):
        raise ProblemError(400, f"query format={fmt!r}: expected records or json",
                           type_slug="bad-request")
    if stop < start:
        raise ProblemError(400, f"empty range: to={stop} is below from={start}",
                           type_slug="bad-request")
    if stop - start > RANGE_WIDTH_MAX:
        raise ProblemError(400, f"range [{start}, {stop}) is wider than {RANGE_WIDTH_MAX}",
                           type_slug="bad-request")
    size_max = _query_bytes(query)
    if fmt == "json":  # built whole in memory, unlike the records' pieces: bounded
        size_max = min(size_max or JSON_RANGE_BYTES_MAX, JSON_RANGE_BYTES_MAX)
    consumers.check_range(queue, start)
    readable = qm.store.readable_end(queue.queue_id)
    if start > readable:  # an answer ending at ``start`` would skip what comes between
        raise Conflict(f"from={start} is beyond the queue's next sequence {readable}",
                       type_slug="beyond-head", fields={"next": readable})
    end = min(stop, readable)
    records = [r for seq in range(start, end)
               if (r := qm.store.record(queue.queue_id, seq)) is not None]
    if size_max is not None:
        records, end = _within(records, size_max, end)
    headers = {"Entrepot-Next": str(max(start, end)), "Entrepot-First": str(start)}
    if fmt == "json":
        messages = [message_json(message_id=m.message_id, queue=m.queue, seq=m.seq,
                                 properties=m.properties, body=m.body)
                    for m in (qm.decode(queue, r) for r in records)]
        return Reply(200, {"queue": queue.path.display, "from": start,
                           "next": max(start, end), "messages": messages}, headers)
    headers["Content-Type"] = CONTENT_TYPE
    if method == "HEAD":  # the headers alone: the body is written piece by piece
        return Reply(200, None, headers)
    return Records(queue, headers, records)


def record_pieces(qm: QueueManager, queue: Queue, records: list[StoredRecord]
                  ) -> Iterator[bytes | None]:
    """The records framed, in pieces of about ``_FLUSH_BYTES``, the end marker in the last;
    ``None`` ends them early when a record was removed meanwhile (the answer must be cut).
    Each record is read from the store when its piece is made: between pieces other
    requests run.

    Raises:
        ProblemError: a record that is not a message (500).
    """
    pieces: list[bytes | memoryview] = []
    pending = 0
    removals = qm.store.removals  # a second index lookup a record only after a removal
    for record in records:
        if (qm.store.removals != removals
                and qm.store.record(queue.queue_id, record.seq) != record):
            # Trimmed (a purge) while this answer was being written: cut it rather than read
            # space that may be reused.
            server_log.info("range of %s cut: record %d removed while it was written",
                            queue.path.display, record.seq)
            yield None
            return
        try:
            meta, body = split_payload(qm.store.read(record))
        except MessageFormatError as exc:  # a record we did not write: never skip silently
            raise ProblemError(500, f"record {record.seq} of {queue.path.display} is not a "
                               f"message: {exc}", type_slug="damaged-record") from exc
        message_id = (qm.message_id(queue, record, qm.decode(queue, record).properties)
                      if b'"message_id"' in meta.tobytes() else
                      compose_id(qm.qm_guid, queue.queue_id, record.seq))
        pieces.extend(encode_record(record.seq, message_id.encode(), meta, body))
        pending += len(body) + len(meta)
        if pending >= _FLUSH_BYTES:
            yield b"".join(pieces)
            pieces, pending = [], 0
    pieces.append(END_OF_RANGE)  # a reader tells a whole answer from a cut one by it
    yield b"".join(pieces)


def _allow(method: str, allowed: str) -> None:
    if method != allowed and not (method == "HEAD" and allowed == "GET"):
        raise web.HTTPMethodNotAllowed(method, [allowed, "HEAD"] if allowed == "GET"
                                       else [allowed])


def _query_once(query: MultiMapping[str], key: str) -> str | None:
    given = query.getall(key, [])
    if len(given) > 1:
        raise ProblemError(400, f"query {key} is given {len(given)} times",
                           type_slug="bad-request")
    return given[0] if given else None


def _query_bytes(query: MultiMapping[str]) -> int | None:
    raw = _query_once(query, "max_bytes")
    if raw is None:
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18 or int(raw) < 1:
        raise ProblemError(400, f"query max_bytes={raw!r} is not a positive number of bytes",
                           type_slug="bad-request")
    return int(raw)


def _within(records: list[StoredRecord], size_max: int, end: int
            ) -> tuple[list[StoredRecord], int]:
    """The first records whose payloads (properties and body) come to ``size_max`` bytes
    (at least one), and where the answer then ends: a reader of large messages asks for the
    rest from there, holding a bounded answer at a time."""
    size = 0
    for index, record in enumerate(records):
        size += record.payload_len
        if size > size_max and index:
            return records[:index], record.seq
    return records, end


def _query_seq(query: MultiMapping[str], key: str, low: int = 0) -> int:
    raw = _query_once(query, key)
    if raw is None:
        raise ProblemError(400, f"query {key} is required", type_slug="bad-request")
    if not raw.isascii() or not raw.isdigit() or len(raw) > 20:
        raise ProblemError(400, f"query {key}={raw!r} is not a sequence number",
                           type_slug="bad-request")
    if int(raw) < low:
        raise ProblemError(400, f"query {key}={raw!r} is not a sequence number: they start "
                           f"at {low}", type_slug="bad-request")
    if int(raw) > SEQ_MAX:
        raise ProblemError(400, f"query {key}={raw!r} is not a sequence number: they end "
                           f"at {SEQ_MAX}", type_slug="bad-request")
    return int(raw)


def _fields(body: bytes, known: str) -> dict[str, object]:
    """A body's JSON object, whose only field may be ``known``."""
    fields = json_object(body, allow_empty=True)
    unknown = sorted(set(fields) - {known})
    if unknown:
        raise ProblemError(400, f"unknown fields: {names(unknown)} (only {known!r})",
                           type_slug="bad-request")
    return fields


def _int_field(body: dict[str, object], key: str, low: int = 0) -> int:
    value = body.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= SEQ_MAX:
        raise ProblemError(400, f"{key}: expected a sequence number, got {value!r}",
                           type_slug="bad-request")
    if value < low:
        raise ProblemError(400, f"{key}={value} is not a sequence number: they start at {low}",
                           type_slug="bad-request")
    return value
