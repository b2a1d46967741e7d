"""Liveness, readiness and metrics endpoints."""

from __future__ import annotations

import hashlib
import hmac

from aiohttp import web

from gateway.auth.authenticator import AuthError, presented_key
from gateway.errors import ProblemError
from gateway.metrics import CONTENT_TYPE_LATEST
from gateway.web.appkeys import METRICS_KEY, SETTINGS_KEY, STATE_KEY
from gateway.web.auth_middleware import is_local_client
from gateway.web.calls import Call, Reply, json_reply, operate, operation
from gateway.web.problem import problem_response

__all__ = ["routes"]

routes = web.RouteTableDef()


@routes.get("/healthz")
async def healthz(request: web.Request) -> web.Response:
    """200 while the process serves HTTP, whatever the store is doing."""
    return web.json_response({"status": "alive"})


@routes.get("/readyz")
async def readyz(request: web.Request) -> web.Response:
    """200 only once the store is open and recovered, every front process has started
    (server.workers > 1), and nothing has fail-stopped the store."""
    return await operate(request, "readyz")


@operation("readyz")
async def _readyz(app: web.Application, call: Call) -> Reply:
    reason = app[STATE_KEY].readiness()
    if reason:
        raise ProblemError(503, reason, type_slug="not-ready", headers={"Retry-After": "1"})
    return json_reply({"status": "ready"})


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    """Prometheus text exposition: to loopback clients, or with the admin or metrics key
    (``Authorization: Bearer``, or Basic with the key as the password); the text names
    queues and partners' URLs."""
    if not is_local_client(request) and not _metrics_key(request):
        return problem_response(
            403, "/metrics answers clients on this machine (loopback, a Host naming this "
            "gateway, no Origin of another site), or the admin or metrics key "
            "(Authorization: Bearer or Basic; auth.metrics_key_sha256)",
            type_slug="MQ_ERROR_ACCESS_DENIED")
    return await operate(request, "metrics")


@operation("metrics")
async def _metrics(app: web.Application, call: Call) -> Reply:
    state = app[STATE_KEY]
    if state.before_scrape is not None:
        await state.before_scrape()
    metrics = app[METRICS_KEY]
    metrics.ready.set(0 if state.readiness() else 1)  # as /readyz: a fail-stop shows
    return Reply(200, metrics.render(), {"Content-Type": CONTENT_TYPE_LATEST})


def _metrics_key(request: web.Request) -> bool:
    auth = request.app[SETTINGS_KEY].auth
    try:
        key = presented_key(request.headers.get("Authorization", ""))
    except AuthError:
        return False
    if key is None or not key.strip():
        return False
    digest = hashlib.sha256(key.strip().encode("utf-8", "surrogateescape")).hexdigest()
    return any(hmac.compare_digest(digest, known)
               for known in (auth.admin_key_sha256, auth.metrics_key_sha256) if known)
