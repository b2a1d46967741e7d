"""``POST /v1/messages``: a send addressed by MSMQ format name (``Mq-Destination``)."""

from __future__ import annotations

import time
from dataclasses import replace

from aiohttp import web
from multidict import CIMultiDict

from gateway.errors import ProblemError
from gateway.queues.destinations import (
    redirect_inbound,
    remote_positions,
    send_to_destinations,
    split_destinations,
)
from gateway.queues.manager import Queue
from gateway.queues.wire_ids import local_id
from gateway.web.appkeys import STATE_KEY
from gateway.web.auth_middleware import require_admin_of, require_may, scoped_key_of
from gateway.web.calls import Call, Reply, json_reply, operate, operation
from gateway.web.reply_addresses import check_principal_replies
from gateway.web.rest_codec import (
    REPLAYED,
    HeaderError,
    header_text,
    message_location,
    parse_send_headers,
)
from gateway.web.rest_queues import replayed_send

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.post("/v1/messages")
async def send_by_format_name(request: web.Request) -> web.Response:
    return await operate(request, "send_by_format_name")


@operation("send_by_format_name")
async def _send(app: web.Application, call: Call) -> Reply:
    state = app[STATE_KEY]
    services = state.serving()
    qm, transactions = services.queue_manager, services.transactions
    headers = CIMultiDict(call.headers)
    try:
        destination = header_text(headers, "Mq-Destination")
    except HeaderError as exc:
        raise ProblemError(400, str(exc), type_slug="MQ_ERROR_ILLEGAL_FORMATNAME") from exc
    if not destination:
        raise ProblemError(400, "Mq-Destination: a format name is required",
                           type_slug="MQ_ERROR_ILLEGAL_FORMATNAME")
    try:
        send = parse_send_headers(headers, now_ms=int(time.time() * 1000),
                                  by_format_name=True)
    except HeaderError as exc:
        raise ProblemError(400, str(exc), type_slug=exc.type_slug) from exc
    principal = call.principal
    check_principal_replies(state, principal, send.properties)
    rules = state.mapping.rules if state.mapping is not None else None
    redirected = redirect_inbound(destination, rules)
    paths, urls = split_destinations(redirected, state.local)
    for path in paths:
        require_may(principal, "send", path)
    if urls:
        require_admin_of(principal, call.local)  # partners' allow lists name local queues only
    queues = [qm.queue(path) for path in paths]
    body = call.body
    tx = send.transaction
    if tx not in (None, "single", "none"):
        # An unknown (or another principal's) transaction is 404 before anything is created.
        transactions.get(tx, principal, join=True)
    remote = [(await services.links.queue_for(url), url) for url in urls]
    if tx not in (None, "single", "none"):
        assert qm.wire_ids is not None
        copies = [(outgoing, url, replace(
                      send.properties, message_id=send.properties.message_id or local_id(
                          qm.qm_guid, await qm.wire_ids.next())))
                  for outgoing, url in remote]
        _, held = transactions.send_many(tx, principal, paths, copies, body, send.properties)
        return json_reply({"transaction": tx, "queues": [q.path.display for q in queues]
                                  + [url for _, url in remote], "index": held}, status=202)
    if len(paths) == 1 and not remote:
        key = scoped_key_of(principal, send.idempotency_key)
        prior = await replayed_send(qm, key, paths[0], body)
        if prior is None:
            message = await qm.send(paths[0], body, send.properties, transaction=tx,
                                    dedup_key=key, fresh=True)
            made = {"id": message.message_id, "queue": message.queue, "seq": message.seq}
        else:
            made = {"id": prior["id"], "queue": prior["queue"], "seq": prior["seq"]}
        return json_reply(
            {"messages": [made], "dead_lettered": []}, status=201, headers={
                **(REPLAYED if prior is not None else {}),
                "Location": message_location(str(made["queue"]), str(made["id"]))})
    transactional = tx == "single" or (tx is None and any(q.settings.transactional
                                                          for q in queues))
    key = scoped_key_of(principal, send.idempotency_key)
    assert qm.dedup is not None
    digest = qm.dedup.digest(body, destination)
    if key is not None:
        prior = await qm.dedup.seen(key, digest)
        if prior:
            return json_reply(prior, status=201,
                                        headers=_location(prior, remote) | REPLAYED)
        qm.dedup.begin(key)
    try:
        answer = await send_to_destinations(
            qm, paths, body, send.properties, transactional=transactional, remote=remote,
            remote_at=remote_positions(redirected, state.local),
            dedup_key=(key, digest) if key is not None else None)
    finally:
        if key is not None:
            qm.dedup.failed(key)  # no-op once stored
    return json_reply(answer, status=201, headers=_location(answer, remote))


def _location(answer: dict[str, object], remote: list[tuple[Queue, str]]
              ) -> dict[str, str]:
    """``Location`` when the send stored one message, in a local queue (a remote copy waits
    in an outgoing queue, which is not served)."""
    messages = answer.get("messages")
    if remote or not isinstance(messages, list) or len(messages) != 1:
        return {}
    return {"Location": message_location(str(messages[0]["queue"]), str(messages[0]["id"]))}
