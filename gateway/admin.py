"""Admin routes that act on the whole gateway (``/v1/admin/...``).

Until partner and admin credentials exist (the security issue), these routes answer only
requests from the loopback interface.
"""

from __future__ import annotations

import asyncio
import ipaddress
from pathlib import Path

from aiohttp import web

from gateway.appkeys import STATE_KEY
from gateway.auth.middleware import principal_of, require_admin
from gateway.errors import ProblemError
from store.backup import BackupError

__all__ = ["routes"]

routes = web.RouteTableDef()


def _require_loopback(request: web.Request) -> None:
    peer = request.remote or ""
    try:
        loopback = ipaddress.ip_address(peer).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ProblemError(403, "admin routes answer only on the loopback interface",
                           type_slug="forbidden")


@routes.post("/v1/admin/backup")
async def backup(request: web.Request) -> web.Response:
    """Take a consistent backup of the running store into ``{"dest": DIR}`` (empty or new)."""
    require_admin(request)
    principal = principal_of(request)
    if not principal.admin:
        _require_loopback(request)  # an open gateway takes admin requests from loopback only
    try:
        body = await request.json()
    except ValueError as exc:
        raise ProblemError(400, f"body is not JSON: {exc}", type_slug="bad-request") from exc
    dest = body.get("dest") if isinstance(body, dict) else None
    if not isinstance(dest, str) or not dest:
        raise ProblemError(400, 'body must be {"dest": "<directory>"}', type_slug="bad-request")
    if not Path(dest).is_absolute():
        # Relative to wherever the gateway was started: never what the caller meant.
        raise ProblemError(400, f"dest {dest!r} must be an absolute directory path",
                           type_slug="bad-request")
    state = request.app[STATE_KEY]
    store = state.store
    if store is None or not state.ready:
        raise ProblemError(503, state.not_ready_reason() or "store not open",
                           type_slug="not-ready", headers={"Retry-After": "1"})
    loop = asyncio.get_running_loop()
    try:
        report = await loop.run_in_executor(None, store.backup, Path(dest))
    except BackupError as exc:
        raise ProblemError(409, str(exc), type_slug="backup-target-not-empty") from exc
    except OSError as exc:
        raise ProblemError(500, f"backup failed: {exc}", type_slug="backup-failed") from exc
    return web.json_response({"dest": dest, "files": report.files, "bytes": report.bytes,
                              "seconds": round(report.seconds, 3)})
