"""``/ui``: a read-only status page for operators (admin credential; browsers log in with
Basic, the API key as the password), refreshed live from ``/ui/status.json``.

One self-contained page (no external scripts, fonts or styles: it works on an isolated
network and under a strict Content-Security-Policy).
"""

from __future__ import annotations

from aiohttp import web

from gateway.web.appkeys import STATE_KEY
from gateway.web.auth_middleware import require_admin
from gateway.web.calls import Call, Reply, json_reply, operate, operation
from gateway.web.status import DeadLetterClasses, MessageRates, RecentErrors, snapshot
from gateway.web.ui_page import PAGE

__all__ = ["routes", "UI_ERRORS", "UI_DEAD", "UI_RATES"]

routes = web.RouteTableDef()
UI_ERRORS = web.AppKey("ui_errors", RecentErrors)
UI_DEAD = web.AppKey("ui_dead", DeadLetterClasses)
UI_RATES = web.AppKey("ui_rates", MessageRates)
_HEADERS = {"Cache-Control": "no-store",
            "Content-Security-Policy": "default-src 'self'; script-src 'unsafe-inline' 'self'; "
                                       "style-src 'unsafe-inline'; frame-ancestors 'none'",
            "X-Content-Type-Options": "nosniff"}


@routes.get("/ui")
async def page(request: web.Request) -> web.Response:
    require_admin(request)
    return web.Response(text=PAGE, content_type="text/html", charset="utf-8", headers=_HEADERS)


@routes.get("/ui/status.json")
async def status(request: web.Request) -> web.Response:
    require_admin(request)
    return await operate(request, "status")


@operation("status")
async def _status(app: web.Application, call: Call) -> Reply:
    return json_reply(snapshot(app[STATE_KEY], app[UI_DEAD], app[UI_ERRORS], app[UI_RATES]),
                      headers={"Cache-Control": "no-store"})
