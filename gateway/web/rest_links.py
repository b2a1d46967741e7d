"""``/v1/links``: the outgoing queues and their links (state, backlog, stream), and the
receipt lanes (gateway.outbound.receipt_lanes), with pause/resume for both."""

from __future__ import annotations

from aiohttp import web

from gateway.errors import ProblemError
from gateway.outbound.links import Links
from gateway.web.appkeys import STATE_KEY
from gateway.web.auth_middleware import body_of, require_admin
from gateway.web.rest_body import no_fields

__all__ = ["routes"]

routes = web.RouteTableDef()


def _links(request: web.Request) -> Links:
    return request.app[STATE_KEY].serving().links


@routes.get("/v1/links")
async def list_links(request: web.Request) -> web.Response:
    """``{"links": [{"id", "kind", "destination", "state", "backlog", "unacked",
    "oldest_age_s", "last_error", "stream", "sent", "retries"}]}``; ``kind`` is "messages"
    for a link, "receipts" for a receipt lane (which adds ``through``)."""
    require_admin(request)
    return web.json_response({"links": _links(request).summaries()})


@routes.post("/v1/links/{id}/{action}")
async def act(request: web.Request) -> web.Response:
    require_admin(request)
    no_fields(await body_of(request))
    links = _links(request)
    try:
        link = links.find(request.match_info["id"])
    except KeyError:
        raise ProblemError(404, f"no link {request.match_info['id']!r} (an outgoing queue "
                           "or a receipt lane)",
                           type_slug="MQ_ERROR_QUEUE_NOT_FOUND") from None
    action = request.match_info["action"]
    if action == "pause":
        link.pause()
    elif action == "resume":
        link.resume()
    else:
        raise ProblemError(404, f"no action {action!r} (pause or resume)", type_slug="not-found")
    return web.json_response({"id": request.match_info["id"], **link.summary()})
