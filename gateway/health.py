"""Liveness, readiness and metrics endpoints."""

from __future__ import annotations

from aiohttp import web

from gateway.appkeys import METRICS_KEY, STATE_KEY
from gateway.metrics import CONTENT_TYPE_LATEST
from gateway.problem import problem_response

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    """200 while the process serves HTTP, whatever the store is doing."""
    return web.json_response({"status": "alive"})


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    """200 only once the store is open and recovered and nothing has fail-stopped it."""
    state = request.app[STATE_KEY]
    reason = state.not_ready_reason()
    if reason:
        return problem_response(503, reason, type_slug="not-ready", headers={"Retry-After": "1"})
    return web.json_response({"status": "ready"})


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition."""
    body = request.app[METRICS_KEY].render()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})
