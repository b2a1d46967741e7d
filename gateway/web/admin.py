"""Admin routes that act on the whole gateway (``/v1/admin/...``).

They need the admin credential; a gateway without credentials answers them to loopback
clients only (``require_admin``).
"""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

from aiohttp import web

from gateway.errors import ProblemError
from gateway.queues.identity import BACKED_UP
from gateway.web.appkeys import STATE_KEY
from gateway.web.auth_middleware import require_admin
from gateway.web.calls import Call, Reply, json_reply, operate, operation
from gateway.web.rest_body import json_object, names
from store.backup import BackupError, BackupInside

__all__ = ["routes"]

routes = web.RouteTableDef()
# A dest that is not a directory, or one this user may not write, or under a parent that
# cannot be made: 409 backup-target-unusable.
_UNUSABLE = frozenset({errno.ENOTDIR, errno.EEXIST, errno.EISDIR, errno.ENOENT, errno.EACCES,
                       errno.EPERM, errno.EROFS})


@routes.post("/v1/admin/backup")
async def backup(request: web.Request) -> web.Response:
    """Take a consistent backup of the running store into ``{"dest": DIR}`` (empty or new)."""
    require_admin(request)
    return await operate(request, "backup")


@operation("backup")
async def _backup(app: web.Application, call: Call) -> Reply:
    body = json_object(call.body, allow_empty=False)
    dest = body.get("dest")
    if not isinstance(dest, str) or not dest:
        raise ProblemError(400, 'body must be {"dest": "<directory>"}', type_slug="bad-request")
    unknown = set(body) - {"dest"}
    if unknown:
        raise ProblemError(400, f"unknown fields: {names(unknown)} (the body is "
                           '{"dest": "<directory>"})', type_slug="bad-request")
    if "\0" in dest:
        raise ProblemError(400, "dest has a NUL character, which no path can hold",
                           type_slug="bad-request")
    if not Path(dest).is_absolute():
        # Relative to wherever the gateway was started: never what the caller meant.
        raise ProblemError(400, f"dest {dest!r} must be an absolute directory path",
                           type_slug="bad-request")
    state = app[STATE_KEY]
    store = state.store
    if store is None or not state.ready:
        raise ProblemError(503, state.not_ready_reason() or "store not open",
                           type_slug="not-ready", headers={"Retry-After": "1"})
    loop = asyncio.get_running_loop()
    try:
        # Transactions ending meanwhile keep their entries in transactions.json, which is
        # copied after the log: every transaction the copy has prepared comes back named.
        async with state.serving().transactions.names_held():
            report = await loop.run_in_executor(None, store.backup, Path(dest), None,
                                                BACKED_UP)
    except BackupInside as exc:
        raise ProblemError(409, str(exc), type_slug="backup-target-inside-data-dir") from exc
    except BackupError as exc:
        raise ProblemError(409, str(exc), type_slug="backup-target-not-empty") from exc
    except OSError as exc:  # nothing is left in dest (store.backup removes what it wrote)
        if exc.errno in _UNUSABLE:  # the caller's choice of dest, not the gateway's fault
            raise ProblemError(409, f"dest {dest!r} cannot take a backup: {exc.strerror}",
                               type_slug="backup-target-unusable") from exc
        status = 507 if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG) else 500
        raise ProblemError(status, f"backup failed, nothing kept in {dest}: {exc}",
                           type_slug="backup-failed") from exc
    return json_reply({"dest": dest, "files": report.files, "bytes": report.bytes,
                       "seconds": round(report.seconds, 3)})
