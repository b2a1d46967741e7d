"""Management operations: the routes whose work is all the store's (queues, messages, links,
backup, readiness, metrics, the status page) as functions of a ``Call``, run wherever the
store is.

The web edge checks who may ask (gateway.web.auth_middleware), reads the request into a
``Call`` and has it run: in one process by calling the operation; in a front process by
sending it to the store owner as one command (gateway.fronts), which runs the same
operation on its application and sends the ``Reply`` back. Operations see no HTTP request,
so both ways are the same code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web

from gateway import jsonio
from gateway.auth.principal import Principal
from gateway.web.auth_middleware import body_of, is_local_client, principal_of

__all__ = ["Call", "OPERATIONS", "OPERATOR_KEY", "Operation", "Reply", "json_reply",
           "operate", "operation"]


@dataclass(frozen=True, slots=True)
class Call:
    """A management request as its operation sees it: checked at the edge, its body read."""

    op: str  # the operation's name (OPERATIONS)
    method: str
    match: dict[str, str]  # the route's path parameters
    query: list[tuple[str, str]]
    headers: list[tuple[str, str]]  # as the client sent them, Authorization left out
    body: bytes
    principal: Principal
    local: bool  # a client on this machine (auth_middleware.is_local_client)


@dataclass(frozen=True, slots=True)
class Reply:
    """An operation's answer: its status, body and headers (Content-Type among them)."""

    status: int
    body: bytes
    headers: dict[str, str]


Operation = Callable[[web.Application, Call], Awaitable[Reply]]
# Every operation by name; the route modules add theirs as they are imported.
OPERATIONS: dict[str, Operation] = {}
# How a front has an operation run (by the store owner); absent in one process.
OPERATOR_KEY: web.AppKey[Callable[[Call], Awaitable[Reply]]] = web.AppKey("operator")

_JSON = "application/json; charset=utf-8"


def operation(name: str) -> Callable[[Operation], Operation]:
    """Register an operation under ``name``."""
    def register(op: Operation) -> Operation:
        assert name not in OPERATIONS, name
        OPERATIONS[name] = op
        return op
    return register


def json_reply(data: object, *, status: int = 200,
               headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, jsonio.dumps(data), {"Content-Type": _JSON, **(headers or {})})


async def call_of(request: web.Request, op: str) -> Call:
    """``request`` as the ``Call`` of operation ``op``, its body read."""
    # Plain str throughout (aiohttp's header names are not): a Call may cross processes.
    return Call(op, request.method, {str(k): str(v) for k, v in request.match_info.items()},
                [(str(k), str(v)) for k, v in request.query.items()],
                [(str(k), str(v)) for k, v in request.headers.items()
                 if k.lower() != "authorization"],
                # Only a PUT's or a POST's body is ever read: a probe answers at once
                # whatever Content-Length it is sent (gateway.web.middlewares).
                await body_of(request) if request.method in ("PUT", "POST") else b"",
                principal_of(request), is_local_client(request))


async def operate(request: web.Request, op: str) -> web.Response:
    """The answer to ``request``, which the edge has checked, by operation ``op``: run here,
    or by the store owner when this is a front."""
    call = await call_of(request, op)
    run = request.app.get(OPERATOR_KEY)
    reply = await (run(call) if run is not None else OPERATIONS[op](request.app, call))
    return web.Response(status=reply.status, body=reply.body, headers=reply.headers)
