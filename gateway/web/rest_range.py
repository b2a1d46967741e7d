"""Range reads and registered consumers over REST (the Spark source's side of the contract).

Under ``/v1/queues/{path}/``:

- ``GET head`` -> ``{"queue", "first", "next", "consumers": {name: position}}``: ``[first,
  next)`` is readable now and ``next`` only grows.
- ``GET range?from=A&to=B`` -> the records with ``A <= seq < min(B, next)`` framed as
  ``gateway.range_wire`` (``?format=json`` for people and scripts); header ``Entrepot-Next``
  is where the answer ends. 410 when ``A`` is below ``first``. At most 100,000 sequences wide.
- ``GET consumers``; ``PUT``/``GET``/``DELETE consumers/{name}`` (``PUT`` body
  ``{"start": "earliest" | "latest" | seq}``, 201 new / 200 known); ``POST
  consumers/{name}/commit`` with ``{"position": seq}``.
"""

from __future__ import annotations

from aiohttp import web

from gateway.errors import ProblemError
from gateway.logs import server_log
from gateway.msmq.message import MessageFormatError, compose_id, split_payload
from gateway.queues.manager import Queue, QueueManager
from gateway.queues.range_consumers import RangeConsumers
from gateway.range_wire import CONTENT_TYPE, END_OF_RANGE, encode_record
from gateway.web.appkeys import STATE_KEY
from gateway.web.rest_body import json_body
from gateway.web.rest_codec import message_json
from store.records import StoredRecord

__all__ = ["handle", "RANGE_WIDTH_MAX"]

RANGE_WIDTH_MAX = 100_000
_FLUSH_BYTES = 256 * 1024


def consumers_of(request: web.Request) -> RangeConsumers:
    return request.app[STATE_KEY].serving().consumers


async def handle(request: web.Request, qm: QueueManager, name: str, rest: list[str]
                 ) -> web.StreamResponse:
    """Serve ``rest`` (``head``, ``range`` or ``consumers[/name[/commit]]``) of a queue."""
    consumers = consumers_of(request)
    queue = qm.queue(name)
    method = request.method
    if rest == ["head"]:
        _allow(method, "GET")
        return web.json_response(consumers.head(queue))
    if rest == ["range"]:
        _allow(method, "GET")
        return await _range(request, qm, consumers, queue)
    if rest == ["consumers"]:
        _allow(method, "GET")
        end = qm.store.readable_end(queue.queue_id)
        return web.json_response({"consumers": [
            {"name": n, "position": p, "lag": end - p}
            for n, p in sorted(consumers.positions(queue).items())]})
    if len(rest) == 2 and rest[0] == "consumers":
        return await _consumer(request, consumers, queue, rest[1])
    if len(rest) == 3 and rest[0] == "consumers" and rest[2] == "commit":
        _allow(method, "POST")
        position = _int_field(await json_body(request, allow_empty=True), "position")
        done = await consumers.commit(queue, rest[1], position)
        return web.json_response({"name": rest[1], "position": done,
                                  "first": consumers.floor(queue)})
    raise ProblemError(404, f"no resource {'/'.join(rest)!r} under queue {name!r}",
                       type_slug="not-found")


async def _consumer(request: web.Request, consumers: RangeConsumers, queue: Queue,
                    name: str) -> web.Response:
    method = request.method
    if method == "PUT":
        body = await json_body(request, allow_empty=True)
        start = body.get("start", "earliest")
        if start not in ("earliest", "latest"):
            start = _int_field(body, "start")
        position, created = await consumers.register(queue, name, start)
        return web.json_response({"name": name, "position": position},
                                 status=201 if created else 200)
    if method in ("GET", "HEAD"):
        positions = consumers.positions(queue)
        if name not in positions:
            raise ProblemError(404, f"no consumer {name!r} on {queue.path.display}",
                               type_slug="consumer-not-found")
        return web.json_response({"name": name, "position": positions[name]})
    if method == "DELETE":
        await consumers.unregister(queue, name)
        return web.Response(status=204)
    raise web.HTTPMethodNotAllowed(method, ["DELETE", "GET", "PUT"])


async def _range(request: web.Request, qm: QueueManager, consumers: RangeConsumers,
                 queue: Queue) -> web.StreamResponse:
    start = _query_seq(request, "from")
    stop = _query_seq(request, "to")
    fmt = request.query.get("format", "records")
    if fmt not in ("records", "json"):
        raise ProblemError(400, f"query format={fmt!r}: expected records or json",
                           type_slug="bad-request")
    if stop < start:
        raise ProblemError(400, f"empty range: to={stop} is below from={start}",
                           type_slug="bad-request")
    if stop - start > RANGE_WIDTH_MAX:
        raise ProblemError(400, f"range [{start}, {stop}) is wider than {RANGE_WIDTH_MAX}",
                           type_slug="bad-request")
    consumers.check_range(queue, start)
    end = min(stop, qm.store.readable_end(queue.queue_id))
    headers = {"Entrepot-Next": str(max(start, end)), "Entrepot-First": str(start)}
    records = [r for seq in range(start, end)
               if (r := qm.store.record(queue.queue_id, seq)) is not None]
    if fmt == "json":
        messages = [message_json(message_id=m.message_id, queue=m.queue, seq=m.seq,
                                 properties=m.properties, body=m.body)
                    for m in (qm.decode(queue, r) for r in records)]
        return web.json_response({"queue": queue.path.display, "from": start,
                                  "next": max(start, end), "messages": messages},
                                 headers=headers)
    if request.method == "HEAD":  # the headers alone: the body is written piece by piece
        return web.Response(headers={**headers, "Content-Type": CONTENT_TYPE})
    response = web.StreamResponse(headers={**headers, "Content-Type": CONTENT_TYPE})
    await response.prepare(request)
    try:
        await _write_records(request, response, qm, queue, records)
    except ConnectionError:  # the reader hung up: its answer ends here, nothing failed
        server_log.info("range of %s not sent whole: the client closed the connection",
                        queue.path.display)
    return response


async def _write_records(request: web.Request, response: web.StreamResponse,
                         qm: QueueManager, queue: Queue, records: list[StoredRecord]) -> None:
    """The records framed and written every ``_FLUSH_BYTES``, then the end marker.

    Raises:
        ConnectionError: the reader hung up.
    """
    pieces: list[bytes | memoryview] = []
    pending = 0
    removals = qm.store.removals  # a second index lookup a record only after a removal
    for record in records:
        if (qm.store.removals != removals
                and qm.store.record(queue.queue_id, record.seq) != record):
            # Trimmed (a purge) while this answer was being written: cut it — what was
            # written, no end marker, the connection closed — rather than read space that
            # may be reused. (Raising here left the connection open: the reader waited for
            # its time-out.)
            server_log.info("range of %s cut: record %d removed while it was written",
                            queue.path.display, record.seq)
            if request.transport is not None:
                request.transport.close()
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
            await response.write(b"".join(pieces))
            pieces, pending = [], 0
    pieces.append(END_OF_RANGE)  # a reader tells a whole answer from a cut one by it
    await response.write(b"".join(pieces))
    await response.write_eof()


def _allow(method: str, allowed: str) -> None:
    if method != allowed and not (method == "HEAD" and allowed == "GET"):
        raise web.HTTPMethodNotAllowed(method, [allowed])


def _query_seq(request: web.Request, key: str) -> int:
    raw = request.query.get(key)
    if raw is None:
        raise ProblemError(400, f"query {key} is required", type_slug="bad-request")
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise ProblemError(400, f"query {key}={raw!r} is not a sequence number",
                           type_slug="bad-request")
    return int(raw)


def _int_field(body: dict[str, object], key: str) -> int:
    value = body.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**62:
        raise ProblemError(400, f"{key}: expected a sequence number, got {value!r}",
                           type_slug="bad-request")
    return value
