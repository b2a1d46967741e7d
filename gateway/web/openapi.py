"""The OpenAPI 3.1 document of the HTTP API, served at ``GET /v1/openapi.json``.

Written out by hand (it is documentation); ``tests/integration/test_openapi.py`` calls every
operation it lists against the real application, so a route that is renamed or removed
makes the suite fail.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

__all__ = ["routes", "document"]

routes = web.RouteTableDef()


def _anycase(word: str) -> str:
    """``word`` matched case-insensitively (ECMA-262 patterns have no flags)."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else "\\" + c if c in "$." else c
                   for c in word)


# MS-MQMQ 2.1.1 name characters (mapping.names): printable ASCII but space " + , ; \ and /.
_NAME_CHARS = "[!#-*\\-.0-:<-\\[\\]-\\u007f]"
_QUEUE_PATTERN = (
    f"^(?:{_anycase('system$;')}(?:{_anycase('deadletter')}|{_anycase('deadxact')}|"
    f"{_anycase('journal')})|(?:{_anycase('private$/')})?{_NAME_CHARS}{{1,124}}"
    f"(?:;{_anycase('journal')})?)$")
_PATH = {"name": "path", "in": "path", "required": True,
         "schema": {"type": "string", "pattern": _QUEUE_PATTERN},
         "description": "Queue path name: `name` or `private$/name` (case-insensitive); "
                        "`name;journal` is its journal."}
_ID = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"},
       "description": "Message id `{QM GUID}\\\\counter`, URL-encoded."}
_TX_ID = {"type": "string", "pattern": "^tx-[A-Za-z0-9_-]{22}$"}
_TX = {"name": "id", "in": "path", "required": True, "schema": _TX_ID,
       "description": "Transaction id: `tx-` and 128 random bits in URL-safe base64. Only "
                      "the principal that began it (and the admin, to see, commit or abort "
                      "it) finds it; anyone else gets 404."}
_NAME = {"name": "name", "in": "path", "required": True,
         "schema": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"},
         "description": "A range consumer: 1-64 letters, digits, ., _ or -."}
_PROBLEM = {"description": "Error (application/problem+json, RFC 9457)",
            "content": {"application/problem+json": {"schema": {"type": "object"}}}}
_DESTINATION = {"name": "Mq-Destination", "in": "header", "required": True,
                "schema": {"type": "string", "minLength": 1},
                "description": "Format name(s), comma-separated: DIRECT=..., PUBLIC=..., "
                               "PRIVATE=... or a multicast address."}
_SECONDS = "^ *[0-9]{1,8}(?:\\.[0-9]{1,3})? *$"  # within the server's 0 .. ten years
_MQ_HEADERS = [
    {"name": name, "in": "header", "required": False, "schema": {"type": "string", **schema},
     "description": text}
    for name, text, schema in (
        ("Mq-Label", "Label, at most 249 characters.", {"maxLength": 249}),
        ("Mq-Priority", "0-7 (default 3; transactional messages use 0).",
         {"pattern": "^ *[0-7] *$"}),
        ("Mq-Delivery", "express or recoverable (default).", {"pattern": (
            f"^ *(?:{_anycase('express')}|{_anycase('recoverable')}) *$")}),
        ("Mq-Time-To-Reach-Queue", "Seconds.", {"pattern": _SECONDS}),
        ("Mq-Time-To-Be-Received", "Seconds.", {"pattern": _SECONDS}),
        ("Mq-Correlation-Id", "", {"maxLength": 1024}),
        ("Mq-Response-Queue", "A format name.", {"maxLength": 1024}),
        ("Mq-Admin-Queue", "A format name.", {"maxLength": 1024}),
        ("Mq-Acknowledge", "MQMSG_ACKNOWLEDGMENT_* name or number.", {}),
        ("Mq-Journal", "none, journal or deadletter.", {"pattern": (
            f"^ *(?:{_anycase('none')}|{_anycase('journal')}|{_anycase('deadletter')}) *$")}),
        ("Mq-App-Specific", "32-bit integer.", {"pattern": "^ *-?[0-9]{1,9} *$"}),
        ("Mq-Sent-Time", "ISO 8601 time the producer sent it (default: arrival).", {}),
        ("Mq-Transaction", "A transaction id (`tx-...`, one this principal began), single, "
         "or none.", {"pattern": "\\S"}),
        ("Idempotency-Key", "Same key and body within the window: stored once.",
         {"minLength": 1, "maxLength": 255}),
    )
]


def _query(name: str, schema: dict[str, Any], text: str, *, required: bool = False
           ) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema,
            "description": text}


def _object(properties: dict[str, Any], required: tuple[str, ...] = (), *,
            closed: bool = True) -> dict[str, Any]:
    """A JSON object with these fields; ``closed``: the server refuses unknown ones."""
    schema: dict[str, Any] = {"type": "object", "additionalProperties": not closed,
                              "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


# A byte count or a size as operators write it (gateway.units.parse_size), whole bytes.
_SIZE = {"oneOf": [{"type": "integer", "minimum": 0, "maximum": 2**53},
                   {"type": "string", "pattern": "^[0-9]{1,12}(?:[Bb]|[KkMmGgTt][Ii]?[Bb])?$"}]}
_SEQ = {"type": "integer", "minimum": 0, "maximum": 2**62}
_TIME = {"type": "string", "format": "date-time"}
_QUEUE_BODY = _object({
    "transactional": {"type": "boolean"}, "quota": _SIZE, "journal": {"type": "boolean"},
    "journal_quota": _SIZE, "label": {"type": "string", "maxLength": 124},
    "anonymous": {"type": "boolean"}, "authenticate": {"type": "boolean"}})
_TARGET = {"type": "string", "pattern": _QUEUE_PATTERN,
           "description": "Target queue (default: the message's source)."}
_TARGET_BODY = _object({"queue": _TARGET})
_REQUEUE_BODY = _object({
    "queue": _TARGET,
    "class": {"type": "string", "description": "MSMQ class name, e.g. NACK_BAD_DST_Q"},
    "source_queue": {"type": "string"}, "after": _TIME, "before": _TIME,
    "limit": {"type": "integer", "minimum": 1, "maximum": 10_000}})
_BATCH_BODY = _object({"messages": {
    "type": "array", "minItems": 1, "maxItems": 10_000,
    "items": {"type": "object", "required": ["queue"], "properties": {
        "queue": {"type": "string"},
        "body_base64": {"type": "string", "contentEncoding": "base64"},
        "properties": {"type": "object", "description": "The send headers' names without "
                       "Mq- (label, priority, time_to_be_received, correlation_id, ...)."}}}}},
    required=("messages",))


def _op(summary: str, *, status: str = "200", params: list[dict[str, Any]] | None = None,
        body: bool | dict[str, Any] = False) -> dict[str, Any]:
    """``status``: the success codes, space-separated (a PUT answers 201 or 200). ``body``:
    True for any body (a message body), or the JSON schema of the body."""
    responses: dict[str, Any] = {code: {"description": "OK"} for code in status.split()}
    operation: dict[str, Any] = {"summary": summary, "parameters": params or [],
                                 "responses": {**responses, "default": _PROBLEM}}
    if body is True:
        operation["requestBody"] = {"required": False, "content": {
            "application/json": {"schema": {"type": "object"}},
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}
    elif body:
        operation["requestBody"] = {"required": bool(body.get("required")), "content": {
            "application/json": {"schema": body}}}
    return operation


def document() -> dict[str, Any]:
    q = [_PATH]
    paths: dict[str, dict[str, Any]] = {
        "/healthz": {"get": _op("Alive while the process serves HTTP.")},
        "/readyz": {"get": _op("Ready once the store is open and recovered.")},
        "/metrics": {"get": _op("Prometheus metrics.")},
        "/v1/openapi.json": {"get": _op("This document.")},
        "/v1/queues": {"get": _op("List queues.")},
        "/v1/queues/{path}": {
            "get": _op("Show a queue with its message count and bytes.", params=q),
            "put": _op("Create (201) or update (200) a queue.", status="201 200", params=q,
                       body=_QUEUE_BODY),
            "delete": _op("Delete a queue (negative acknowledgements as asked).",
                          status="204", params=q),
        },
        "/v1/queues/{path}/messages": {
            "get": _op("Browse without removing.", params=q + [
                _query("after", _SEQ, "Only messages after this sequence number."),
                _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000},
                       "At most this many (default 100).")]),
            "post": _op("Send; the body is the message body.", status="201",
                        params=q + _MQ_HEADERS, body=True),
        },
        "/v1/queues/{path}/messages/{id}": {
            "get": _op("Read one message by id.", params=[_PATH, _ID]),
            "delete": _op("Delete one message by id.", status="204", params=[_PATH, _ID]),
        },
        "/v1/queues/{path}/messages/{id}/requeue": {
            "post": _op("Requeue a dead letter to its source or {queue}.",
                        params=[_PATH, _ID], body=_TARGET_BODY),
        },
        "/v1/queues/{path}/receive": {
            "post": _op("Receive, optionally in a transaction (Mq-Transaction).", params=q + [
                _query("max", {"type": "integer", "minimum": 1, "maximum": 1000},
                       "At most this many messages (default 1)."),
                _query("wait", {"type": "number", "minimum": 0, "maximum": 60},
                       "Seconds to wait for a first message (default 0). A wait that "
                       "would go over server.long_polls_max, or a partner's quarter of it, "
                       "is answered 503 too-many-long-polls at once."),
                {"name": "Mq-Transaction", "in": "header", "required": False,
                 "schema": {"type": "string"}, "description": "A transaction id "
                 "(`tx-...`, one this principal began); none or single: outside any."}]),
        },
        "/v1/queues/{path}/purge": {"post": _op("Purge a queue.", params=q)},
        "/v1/queues/{path}/requeue": {
            "post": _op("Requeue dead letters matching a filter.", params=q,
                        body=_REQUEUE_BODY),
        },
        "/v1/queues/{path}/head": {"get": _op(
            "Range reads: first and next readable sequence, registered consumers.", params=q)},
        "/v1/queues/{path}/range": {"get": _op(
            "Records with from <= seq < to (application/x-entrepot-records, or ?format=json); "
            "410 below the floor.", params=q + [
                _query("from", _SEQ, "First sequence number.", required=True),
                _query("to", _SEQ, "End (exclusive).", required=True),
                _query("format", {"enum": ["records", "json"]}, "Default records.")])},
        "/v1/queues/{path}/consumers": {"get": _op("Registered range consumers.", params=q)},
        "/v1/queues/{path}/consumers/{name}": {
            "put": _op("Register a range consumer ({start}: earliest, latest or a sequence).",
                       status="201 200", params=q + [_NAME], body=_object({"start": {"oneOf": [
                           {"enum": ["earliest", "latest"]}, _SEQ]}}, closed=False)),
            "get": _op("A consumer's committed position.", params=q + [_NAME]),
            "delete": _op("Unregister a consumer.", status="204", params=q + [_NAME]),
        },
        "/v1/queues/{path}/consumers/{name}/commit": {"post": _op(
            "Commit a consumer's position ({position}); retention follows the slowest.",
            params=q + [_NAME], body=_object({"position": _SEQ}, required=("position",)))},
        "/ui": {"get": _op("The status page (HTML; admin; Basic or Bearer).")},
        "/ui/status.json": {"get": _op("The status page's data: queues, links, dead letters "
                                       "by class, recent errors.")},
        "/v1/transactions": {
            "get": _op("List open and prepared transactions: a partner's own, the admin's "
                       "all."),
            "post": _op("Begin a transaction.", status="201"),
        },
        "/v1/transactions/{id}": {"get": _op("Show a transaction.", params=[_TX])},
        "/v1/transactions/{id}/prepare": {"post": _op("Prepare (two-phase).", params=[_TX])},
        "/v1/transactions/{id}/commit": {"post": _op("Commit.", params=[_TX])},
        "/v1/transactions/{id}/abort": {"post": _op("Abort.", params=[_TX])},
        "/v1/messages": {"post": _op("Send to a format name (Mq-Destination); several "
                                     "destinations in one atomic commit.", status="201",
                                     params=[_DESTINATION, *_MQ_HEADERS], body=True)},
        "/v1/batch": {"post": _op("Store several messages atomically.", status="201",
                                  body=_BATCH_BODY)},
        "/v1/admin/backup": {"post": _op("Back up the running store into {dest}.",
                                         body=_object({"dest": {
                                             "type": "string", "pattern": "^/",
                                             "description": "An absolute directory path."}},
                                             required=("dest",), closed=False))},
        "/v1/links": {"get": _op("Links to remote queue managers (kind messages) and "
                                 "receipt lanes (kind receipts): destination, state, backlog, "
                                 "unacked, oldest_age_s, last_error, sent, retries.")},
        "/v1/links/{id}/pause": {"post": _op("Pause a link or receipt lane.", params=[_TX])},
        "/v1/links/{id}/resume": {"post": _op("Resume a link or receipt lane.",
                                              params=[_TX])},
        "/msmq/{path}": {"post": {
            "summary": "SRMP (MSMQ over HTTP): a multipart/related SOAP envelope and body, or "
                       "a text/xml receipt. The queue comes from the envelope's <to>; the "
                       "virtual directories are srmp.virtual_dirs.",
            "parameters": q,
            "requestBody": {"required": True, "content": {
                "multipart/related": {"schema": {"type": "string", "format": "binary"}},
                "text/xml": {"schema": {"type": "string"}}}},
            "responses": {"200": {"description": "Stored, or a duplicate (empty body)"},
                          "default": _PROBLEM},
            "security": [{}, {"clientCertificate": []}]}},
    }
    public = ("/healthz", "/readyz", "/metrics", "/v1/openapi.json")
    for path in public:
        paths[path]["get"]["security"] = [{}]
    return {"openapi": "3.1.0",
            "info": {"title": "entrepot", "version": "1",
                     "description": "HTTP store-and-forward gateway: REST API and SRMP. With "
                                    "credentials configured every other operation needs "
                                    "one of the security schemes."},
            "components": {"securitySchemes": {
                "apiKey": {"type": "http", "scheme": "bearer",
                           "description": "Authorization: Bearer <API key>"},
                "hmac": {"type": "apiKey", "in": "header", "name": "Authorization",
                         "description": "EP-HMAC-SHA256 partner=, ts=, nonce=, sig= (see "
                                        "docs/security.md)"},
                "basic": {"type": "http", "scheme": "basic",
                          "description": "Browsers: any user name, the API key as password"},
                "clientCertificate": {"type": "mutualTLS"}}},
            "security": [{"apiKey": []}, {"hmac": []}, {"basic": []},
                         {"clientCertificate": []}],
            "paths": paths}


@routes.get("/v1/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    return web.json_response(document())
