"""The OpenAPI 3.1 document of the HTTP API, served at ``GET /v1/openapi.json``.

Written out by hand (it is documentation); ``tests/integration/test_openapi.py`` validates it
against the OpenAPI 3.1 meta-schema, calls every operation it lists against the real
application (a route that is renamed or removed makes the suite fail) and checks real
answers against the documented schemas, as ``test_api_fuzz.py`` does for generated requests.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.web.rest_tx import BATCH_PROPERTY_KEYS

__all__ = ["routes", "document"]

routes = web.RouteTableDef()


def _anycase(word: str) -> str:
    """``word`` matched case-insensitively (ECMA-262 patterns have no flags)."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else "\\" + c if c in "$." else c
                   for c in word)


# MS-MQMQ 2.1.1 name characters (mapping.names): printable ASCII but space " + , ; \ and /.
_NAME_CHARS = "[!#-*\\-.0-:<-\\[\\]-~]"
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
_LINK = {"name": "id", "in": "path", "required": True, "schema": {"type": "string"},
         "description": "A link's or receipt lane's id, as `GET /v1/links` lists it."}
_NAME = {"name": "name", "in": "path", "required": True,
         "schema": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"},
         "description": "A range consumer: 1-64 letters, digits, ., _ or -, not . or .. alone."}
_PROBLEM = {"$ref": "#/components/responses/Problem"}
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
        ("Mq-App-Specific", "-2147483648..4294967295: MSMQ's AppSpecific, a ULONG that .NET "
         "shows as an Int32 (either view; sent on as the unsigned one).",
         {"pattern": "^ *-?[0-9]{1,10} *$"}),
        ("Mq-Sent-Time", "ISO 8601 time the producer sent it (default: arrival).", {}),
        ("Mq-Label-Encoding", "percent: Mq-Label is percent-encoded UTF-8 (as an entrepot "
         "webhook sends a label no header can carry).",
         {"pattern": f"^ *{_anycase('percent')} *$"}),
        ("Mq-Message-Id", "An entrepot webhook's source message id; not used.", {}),
        ("Mq-Sent-At", "An entrepot webhook's source send time (ms); not used.", {}),
        ("Mq-Transaction", "A transaction id (`tx-...`, one this principal began), single, "
         "or none.", {"pattern": "\\S"}),
        ("Idempotency-Key", "Same key and body within the window: stored once.",
         {"minLength": 1, "maxLength": 255}),
    )
]


_IDEMPOTENCY_KEY = next(h for h in _MQ_HEADERS if h["name"] == "Idempotency-Key")


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
# A header value's characters (RFC 9110 field-value): no control character but tab.
_HEADER_TEXT = "^[^\\u0000-\\u0008\\u000a-\\u001f\\u007f]*$"
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
    "items": _object({
        "queue": {"type": "string"},
        "body_base64": {"type": "string", "contentEncoding": "base64",
                        "description": "The body (\"\" for an empty one)."},
        "properties": {**_object({key: {"type": ["string", "integer"],
                                        "pattern": _HEADER_TEXT}
                                  for key in sorted(BATCH_PROPERTY_KEYS)}),
                       "description": "The send headers' names without Mq- (label, priority, "
                                      "time_to_be_received, correlation_id, ...), as they "
                                      "would be written in the header: a string (no control "
                                      "character but tab, as in a header) or an integer."}},
        required=("queue", "body_base64"))}},
    required=("messages",))


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _answer(properties: dict[str, Any], required: tuple[str, ...] | None = None
            ) -> dict[str, Any]:
    """An answer's JSON object: every field listed is there (``required``: only those);
    more may come in later versions, so clients must ignore fields they do not know."""
    return {"type": "object", "properties": properties,
            "required": list(properties if required is None else required)}


_INT = {"type": "integer"}
_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_OPT_TIME = {"type": ["string", "null"], "format": "date-time"}
_STORED = _answer({"id": _STR, "queue": {"type": "string", "description": (
    "Where it is stored: the queue path, or the destination URL of a remote copy.")},
    "seq": _INT})
_SCHEMAS: dict[str, Any] = {
    "Problem": {**_answer({
        "type": {"type": "string", "description": "about:blank or a URI ending in the MSMQ "
                 "error or class, or a short slug"},
        "title": _STR, "status": {"type": "integer", "minimum": 400, "maximum": 599},
        "detail": {"type": "string", "description": "What is wrong, naming the field or "
                   "header at fault."},
        "instance": _STR}, ("type", "title", "status")),
        "description": "RFC 9457 problem details; some carry more members (e.g. `class`)."},
    "Health": _answer({"status": {"enum": ["alive", "ready"]}}),
    "Queue": _answer({
        "path": _STR, "transactional": _BOOL, "quota": _INT, "journal": _BOOL,
        "journal_quota": _INT, "label": _STR, "anonymous": _BOOL, "authenticate": _BOOL,
        "system": _BOOL, "messages": _INT, "bytes": _INT}),
    "Message": _answer({
        "id": _STR, "seq": _INT, "queue": _STR, "label": _STR,
        "priority": {"type": "integer", "minimum": 0, "maximum": 7},
        "class": {"type": "string", "description": "MQMSG_CLASS_* name"},
        "delivery": {"enum": ["recoverable", "express"]}, "correlation_id": _STR,
        "response_queue": _STR, "admin_queue": _STR, "app_specific": _INT,
        "sent_at": _OPT_TIME, "arrived_at": _OPT_TIME, "content_type": _STR,
        "body_base64": {"type": "string", "contentEncoding": "base64"},
        "properties": {**_answer({
            "transactional": _BOOL, "acknowledge": _INT,
            "journal": {"enum": ["none", "journal", "deadletter"]},
            "time_to_reach_queue_deadline": _OPT_TIME,
            "time_to_be_received_deadline": _OPT_TIME, "source_qm": _STR}),
            "additionalProperties": {"type": ["string", "integer"]},
            "description": "The MSMQ properties, and what the gateway keeps with the message "
                           "(dead-letter class and time `dead_lettered_at_ms`, SRMP headers "
                           "...): numbers as numbers, the rest as text."}}),
    "Messages": _answer({"messages": {"type": "array", "items": _ref("Message")}}),
    "Stored": _STORED,
    "Sent": _answer({"messages": {"type": "array", "items": _ref("Stored")},
                     "dead_lettered": {"type": "array", "items": _answer(
                         {"queue": _STR, "class": _STR})}}),
    "Transaction": _answer({
        "id": _TX_ID, "state": {"enum": ["active", "prepared"]},
        "owner": {"type": ["string", "null"]},
        "expires_at": {"type": ["string", "null"], "format": "date-time",
                       "description": "null once prepared: a prepared one never expires"},
        "prepared_at": {"type": ["string", "null"], "format": "date-time",
                        "description": "when it was prepared (one restored without that "
                                       "time: when the gateway found it at start); null "
                                       "while active"},
        "sends": _INT, "receives": _INT}),
    "Link": _answer({
        "id": _STR, "kind": {"enum": ["messages", "receipts"]}, "destination": _STR,
        "through": {"type": "string", "description": "receipt lanes: the URL last posted to"},
        "state": _STR, "backlog": _INT, "unacked": _INT, "oldest_age_s": {"type": "number"},
        "last_error": _STR, "stream": {"type": ["string", "null"]}, "sent": _INT,
        "retries": _INT},
        ("id", "kind", "destination", "state", "backlog", "unacked", "oldest_age_s",
         "last_error", "stream", "sent", "retries")),
    "Consumer": _answer({"name": _STR, "position": _SEQ}),
}
_LOCATION = {"description": "The stored message (`GET` reads it until it is received): "
                            "`/v1/queues/{path}/messages/{id}`.",
             "schema": {"type": "string", "format": "uri-reference"}}
_REPLAYED = {"description": "`true` when the Idempotency-Key was seen with the same body: "
                            "the first answer, nothing stored this time.",
             "schema": {"const": "true"}}


def _json(schema: dict[str, Any], description: str = "OK",
          headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description,
                                "content": {"application/json": {"schema": schema}}}
    if headers:
        response["headers"] = headers
    return response


def _media(media: str, schema: dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {media: {"schema": schema}}}


_NO_CONTENT = {"description": "Done (no body)"}
_CREATED = _json(_STORED, "Stored (on disk unless express).", {
    "Location": {**_LOCATION, "required": True}, "Idempotency-Replayed": _REPLAYED})
_HELD = _json(_answer({"transaction": _TX_ID, "queue": _STR, "index": {
    "type": "integer", "description": "Its place among the transaction's sends."}}),
    "Held in the transaction (Mq-Transaction): stored at its commit.")


def _op(operation_id: str, summary: str, answers: dict[str, Any], *,
        params: list[dict[str, Any]] | None = None,
        body: bool | dict[str, Any] = False) -> dict[str, Any]:
    """``answers``: the success responses by status code (a PUT answers 201 or 200); every
    error is the problem response. ``body``: True for any body (a message body), or the
    JSON schema of the body."""
    operation: dict[str, Any] = {"operationId": operation_id, "summary": summary,
                                 "parameters": params or [],
                                 "responses": {**answers, "default": _PROBLEM}}
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
    ok = _json
    messages = _ref("Messages")
    transaction = _ref("Transaction")
    link = ok(_ref("Link"), "The link's or receipt lane's new state.")
    paths: dict[str, dict[str, Any]] = {
        "/healthz": {"get": _op("healthz", "Alive while the process serves HTTP.",
                                {"200": ok(_ref("Health"))})},
        "/readyz": {"get": _op("readyz", "Ready once the store is open and recovered.",
                               {"200": ok(_ref("Health"))})},
        "/metrics": {"get": _op("metrics", "Prometheus metrics.", {"200": _media(
            "text/plain", {"type": "string"}, "Prometheus text exposition format")})},
        "/v1/openapi.json": {"get": _op("openapi", "This document.", {"200": ok(_answer(
            {"openapi": _STR, "info": {"type": "object"}, "paths": {"type": "object"}}))})},
        "/v1/queues": {"get": _op("listQueues", "List queues.", {"200": ok(_answer(
            {"queues": {"type": "array", "items": _ref("Queue")}}))})},
        "/v1/queues/{path}": {
            "get": _op("getQueue", "Show a queue with its message count and bytes.",
                       {"200": ok(_ref("Queue"))}, params=q),
            "put": _op("putQueue", "Create (201) or update (200) a queue.",
                       {"201": ok(_ref("Queue"), "Created"), "200": ok(_ref("Queue"),
                                                                    "Updated")},
                       params=q, body=_QUEUE_BODY),
            "delete": _op("deleteQueue", "Delete a queue (negative acknowledgements as "
                          "asked).", {"204": _NO_CONTENT}, params=q),
        },
        "/v1/queues/{path}/messages": {
            "get": _op("browseMessages", "Browse without removing.", {"200": ok(_answer({
                "messages": {"type": "array", "items": _ref("Message")},
                "next": {**_SEQ, "description": "The `after` of the next page."}}))},
                params=q + [
                    _query("after", _SEQ, "Only messages after this sequence number."),
                    _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000},
                           "At most this many (default 100).")]),
            "post": _op("sendMessage", "Send; the body is the message body. In a "
                        "transaction (Mq-Transaction: an id) it is held until the commit "
                        "(202).", {"201": _CREATED, "202": _HELD},
                        params=q + _MQ_HEADERS, body=True),
        },
        "/v1/queues/{path}/messages/{id}": {
            "get": _op("getMessage", "Read one message by id (the Location of its send).",
                       {"200": ok(_ref("Message"))}, params=[_PATH, _ID]),
            "delete": _op("deleteMessage", "Delete one message by id.",
                          {"204": _NO_CONTENT}, params=[_PATH, _ID]),
        },
        "/v1/queues/{path}/messages/{id}/requeue": {
            "post": _op("requeueMessage", "Requeue a dead letter to its source or {queue}.",
                        {"200": ok(_answer({"id": _STR, "queue": _STR}), "Where it went")},
                        params=[_PATH, _ID], body=_TARGET_BODY),
        },
        "/v1/queues/{path}/receive": {
            "post": _op("receiveMessages", "Receive. Outside a transaction this removes the "
                        "messages it returns; inside one (Mq-Transaction) they are reserved "
                        "until its commit, and an abort puts them back.",
                        {"200": ok(messages, "The messages (none when the wait ended)")},
                        params=q + [
                _query("max", {"type": "integer", "minimum": 1, "maximum": 1000},
                       "At most this many messages (default 1), and no more than 16 MiB of "
                       "stored messages, properties included (the first whatever its size)."),
                _query("wait", {"type": "number", "minimum": 0, "maximum": 60},
                       "Seconds to wait for a first message (default 0). A wait that "
                       "would go over server.long_polls_max, or a partner's quarter of it, "
                       "is answered 503 too-many-long-polls at once."),
                {"name": "Mq-Transaction", "in": "header", "required": False,
                 "schema": {"type": "string"}, "description": "A transaction id "
                 "(`tx-...`, one this principal began); none or single: outside any."}]),
        },
        "/v1/queues/{path}/purge": {"post": _op("purgeQueue", "Purge a queue.", {
            "200": ok(_answer({"purged": _INT}))}, params=q)},
        "/v1/queues/{path}/requeue": {
            "post": _op("requeueMessages", "Requeue dead letters matching a filter.",
                        {"200": ok(_answer({"requeued": _INT}))}, params=q,
                        body=_REQUEUE_BODY),
        },
        "/v1/queues/{path}/head": {"get": _op(
            "getQueueHead",
            "Range reads: first and next readable sequence, registered consumers.",
            {"200": ok(_answer({"queue": _STR, "first": _SEQ, "next": _SEQ,
                                "created_ms": _INT,
                                "consumers": {"type": "object",
                                              "additionalProperties": _SEQ},
                                "messages": _INT, "average_bytes": _INT}))}, params=q)},
        "/v1/queues/{path}/range": {"get": _op(
            "readRange",
            "Records with from <= seq < to (application/x-entrepot-records, or ?format=json, "
            "which stops after 8 MiB of records); 410 below the floor, 409 beyond next; other "
            "query parameters are refused.", {"200": {
                "description": "The records; Entrepot-Next is the `from` of the next read.",
                "headers": {"Entrepot-Next": {"schema": _SEQ, "required": True},
                            "Entrepot-First": {"schema": _SEQ, "required": True}},
                "content": {
                    "application/x-entrepot-records": {"schema": {
                        "type": "string", "format": "binary"}},
                    "application/json": {"schema": _answer({
                        "queue": _STR, "from": _SEQ, "next": _SEQ,
                        "messages": {"type": "array", "items": _ref("Message")}})}}}},
            params=q + [
                _query("from", {**_SEQ, "minimum": 1}, "First sequence number (from 1).",
                       required=True),
                _query("to", _SEQ, "End (exclusive).", required=True),
                _query("format", {"enum": ["records", "json"]}, "Default records."),
                _query("max_bytes", {"type": "integer", "minimum": 1, "maximum": 10**18 - 1},
                       "Stop after this many bytes of records (one record at least).")])},
        "/v1/queues/{path}/consumers": {"get": _op(
            "listConsumers", "Registered range consumers.", {"200": ok(_answer({
                "consumers": {"type": "array", "items": _answer(
                    {"name": _STR, "position": _SEQ, "lag": _INT})}}))}, params=q)},
        "/v1/queues/{path}/consumers/{name}": {
            "put": _op("putConsumer",
                       "Register a range consumer ({start}: earliest, latest or a sequence).",
                       {"201": ok(_ref("Consumer"), "Registered"),
                        "200": ok(_ref("Consumer"), "Already registered")},
                       params=q + [_NAME], body=_object({"start": {"oneOf": [
                           {"enum": ["earliest", "latest"]}, _SEQ]}}, closed=False)),
            "get": _op("getConsumer", "A consumer's committed position.",
                       {"200": ok(_ref("Consumer"))}, params=q + [_NAME]),
            "delete": _op("deleteConsumer", "Unregister a consumer.", {"204": _NO_CONTENT},
                          params=q + [_NAME]),
        },
        "/v1/queues/{path}/consumers/{name}/commit": {"post": _op(
            "commitConsumer",
            "Commit a consumer's position ({position}); retention follows the slowest.",
            {"200": ok(_answer({"name": _STR, "position": _SEQ, "first": _SEQ}))},
            params=q + [_NAME], body=_object({"position": _SEQ}, required=("position",)))},
        "/ui": {"get": _op("statusPage", "The status page (HTML; admin; Basic or Bearer).",
                           {"200": _media("text/html", {"type": "string"})})},
        "/ui/status.json": {"get": _op(
            "statusData", "The status page's data: queues (with sent_per_s and "
            "received_per_s), links, dead letters by class, recent errors, version, uptime; "
            "store and disk once ready.", {"200": ok(_answer({
                "ready": _BOOL, "reason": {"type": ["string", "null"]}, "time": _STR,
                "version": _STR, "uptime_s": {"type": "number"},
                "queues": {"type": "array"}, "links": {"type": "array"},
                "dead_letters": {"type": "array"}, "errors": {"type": "array"}}))})},
        "/v1/transactions": {
            "get": _op("listTransactions", "List open and prepared transactions: a "
                       "partner's own, the admin's all.", {"200": ok(_answer({
                           "transactions": {"type": "array", "items": transaction}}))}),
            "post": _op("beginTransaction", "Begin a transaction.",
                        {"201": ok(transaction, "Begun")}),
        },
        "/v1/transactions/{id}": {"get": _op("getTransaction", "Show a transaction.",
                                             {"200": ok(transaction)}, params=[_TX])},
        "/v1/transactions/{id}/prepare": {"post": _op(
            "prepareTransaction", "Prepare (two-phase).", {"200": ok(transaction)},
            params=[_TX])},
        "/v1/transactions/{id}/commit": {"post": _op(
            "commitTransaction", "Commit: the held sends are stored, the received messages "
            "removed.", {"200": ok(_answer({
                "id": _TX_ID, "state": {"const": "committed"},
                "messages": {"type": "array", "items": _ref("Stored"),
                             "description": "The messages stored, in send order."}}))},
            params=[_TX])},
        "/v1/transactions/{id}/abort": {"post": _op(
            "abortTransaction", "Abort: the received messages go back.", {"200": ok(_answer(
                {"id": _TX_ID, "state": {"const": "aborted"}}))}, params=[_TX])},
        "/v1/messages": {"post": _op(
            "sendByFormatName", "Send to a format name (Mq-Destination); several "
            "destinations in one atomic commit. The answer has the same shape for one "
            "destination and several.", {
                "201": ok(_ref("Sent"), "Stored: the copies, and the destinations whose "
                          "copy was dead-lettered.", {
                              "Location": {**_LOCATION, "description": "When one copy "
                                           "was stored, in a local queue: that message."},
                              "Idempotency-Replayed": _REPLAYED}),
                "202": ok(_answer({"transaction": _TX_ID, "queues": {
                    "type": "array", "items": _STR}, "index": {
                    "type": "array", "items": _INT}}), "Held in the transaction "
                    "(Mq-Transaction): stored at its commit.")},
            params=[_DESTINATION, *_MQ_HEADERS], body=True)},
        "/v1/batch": {"post": _op(
            "sendBatch", "Store several messages atomically.", {"201": ok(_answer({
                "ids": {"type": "array", "items": _STR},
                "messages": {"type": "array", "items": _ref("Stored")}}),
                "Stored, in the order sent.", {"Location": {
                    **_LOCATION, "description": "For a batch of one message: that message."},
                    "Idempotency-Replayed": _REPLAYED}
            )}, params=[_IDEMPOTENCY_KEY], body=_BATCH_BODY)},
        "/v1/admin/backup": {"post": _op(
            "backup", "Back up the running store into {dest}.", {"200": ok(_answer({
                "dest": _STR, "files": _INT, "bytes": _INT, "seconds": {"type": "number"}}))},
            body=_object({"dest": {"type": "string", "pattern": "^/",
                                   "description": "An absolute directory path."}},
                         required=("dest",), closed=False))},
        "/v1/links": {"get": _op(
            "listLinks", "Links to remote queue managers (kind messages) and receipt lanes "
            "(kind receipts).", {"200": ok(_answer({"links": {"type": "array",
                                                              "items": _ref("Link")}}))})},
        "/v1/links/{id}/pause": {"post": _op("pauseLink", "Pause a link or receipt lane.",
                                             {"200": link}, params=[_LINK])},
        "/v1/links/{id}/resume": {"post": _op("resumeLink", "Resume a link or receipt lane.",
                                              {"200": link}, params=[_LINK])},
        "/msmq/{path}": {"post": {
            "operationId": "srmp",
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
            "components": {
                "schemas": _SCHEMAS,
                "responses": {"Problem": {
                    "description": "Error (application/problem+json, RFC 9457)",
                    "content": {"application/problem+json": {"schema": _ref("Problem")}}}},
                "securitySchemes": {
                    "apiKey": {"type": "http", "scheme": "bearer",
                               "description": "Authorization: Bearer <API key>"},
                    "hmac": {"type": "apiKey", "in": "header", "name": "Authorization",
                             "description": "EP-HMAC-SHA256 partner=, ts=, nonce=, sig= (see "
                                            "docs/security.md)"},
                    "basic": {"type": "http", "scheme": "basic",
                              "description": "Browsers: any user name, the API key as "
                                             "password"},
                    "clientCertificate": {"type": "mutualTLS"}}},
            "security": [{"apiKey": []}, {"hmac": []}, {"basic": []},
                         {"clientCertificate": []}],
            "paths": paths}


@routes.get("/v1/openapi.json")
async def openapi(request: web.Request) -> web.Response:
    return web.json_response(document())
