"""``/v1/links``: the outgoing queues and their links (state, backlog, stream), and the
receipt lanes (gateway.outbound.receipt_lanes), with pause/resume for both."""

from __future__ import annotations

from aiohttp import web

from gateway.errors import ProblemError
from gateway.outbound.links import Links
from gateway.web.appkeys import STATE_KEY
from gateway.web.auth_middleware import require_admin
from gateway.web.calls import Call, Reply, json_reply, operate, operation
from gateway.web.rest_body import no_fields

__all__ = ["routes"]

routes = web.RouteTableDef()


def _links(app: web.Application) -> Links:
    return app[STATE_KEY].serving().links


@routes.get("/v1/links")
async def list_links(request: web.Request) -> web.Response:
    """``{"links": [{"id", "kind", "destination", "state", "backlog", "unacked",
    "oldest_age_s", "last_error", "stream", "sent", "retries"}]}``; ``kind`` is "messages"
    for a link, "receipts" for a receipt lane (which adds ``through``)."""
    require_admin(request)
    return await operate(request, "links")


@operation("links")
async def _list(app: web.Application, call: Call) -> Reply:
    return json_reply({"links": _links(app).summaries()})


@routes.post("/v1/links/{id}/{action}")
async def act(request: web.Request) -> web.Response:
    require_admin(request)
    return await operate(request, "link")


@operation("link")
async def _act(app: web.Application, call: Call) -> Reply:
    no_fields(call.body)
    links = _links(app)
    try:
        link = links.find(call.match["id"])
    except KeyError:
        raise ProblemError(404, f"no link {call.match['id']!r} (an outgoing queue "
                           "or a receipt lane)",
                           type_slug="MQ_ERROR_QUEUE_NOT_FOUND") from None
    action = call.match["action"]
    if action == "pause":
        link.pause()
    elif action == "resume":
        link.resume()
    else:
        raise ProblemError(404, f"no action {action!r} (pause or resume)", type_slug="not-found")
    return json_reply({"id": call.match["id"], **link.summary()})
