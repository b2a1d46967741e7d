"""Who may do what under ``/v1/queues/{path}/...``: one decision, made before the body.

Partners send and receive on the queues they are allowed; everything that manages a queue
(create, delete, purge, requeue) needs the admin. The route checks it, and so does the
authentication gate before it reads the body (``authorize_early``), so that a partner that
may not send to a queue gets its 403 before it sends a body it waits to send
(``Expect: 100-continue``).
"""

from __future__ import annotations

from aiohttp import web

from gateway.errors import ProblemError
from gateway.web.auth_middleware import principal_of, require, require_admin
from gateway.web.escapes import check_path
from mapping.names import QueueNameError, parse_queue_path

__all__ = ["authorize", "authorize_early", "served", "split_tail"]

_TREE = "/v1/queues/"
# Routes only the admin may call (gateway.web.admin, rest_links, ui): refused before a body.
_ADMIN_ONLY = ("/v1/admin/", "/v1/links", "/ui")


def split_tail(tail: str) -> tuple[str, list[str]]:
    """``private$/name/messages`` -> (``private$/name``, [``messages``])."""
    segments = tail.split("/")
    if segments[0].lower() == "private$" and len(segments) > 1:
        return "/".join(segments[:2]), segments[2:]
    return segments[0], segments[1:]


def served(rest: list[str]) -> frozenset[str] | None:
    """The methods a resource under a queue serves (``rest``: the path under the queue);
    None for the range resources (gateway.web.rest_range decides) and for no resource."""
    if not rest:
        return _QUEUE
    if rest == ["messages"]:
        return _MESSAGES
    if rest in (["receive"], ["purge"], ["requeue"]) or (
            len(rest) == 3 and rest[0] == "messages" and rest[2] == "requeue"):
        return _ACTION
    if len(rest) == 2 and rest[0] == "messages":
        return _MESSAGE
    return None


_QUEUE = frozenset({"GET", "HEAD", "PUT", "DELETE"})
_MESSAGES = frozenset({"GET", "HEAD", "POST"})
_MESSAGE = frozenset({"GET", "HEAD", "DELETE"})
_ACTION = frozenset({"POST"})


def authorize(request: web.Request, name: str, rest: list[str]) -> None:
    """Raises: ProblemError 403 when the principal may not do what ``request`` asks of the
    queue ``name`` (``rest``: the path under it); HTTPMethodNotAllowed first for a method
    the resource does not serve, whoever asks (the API's methods are no secret, and a
    partner is told what an admin is)."""
    method = request.method
    methods = served(rest)
    if methods is not None and method not in methods:
        raise web.HTTPMethodNotAllowed(method, sorted(methods))
    if rest == ["messages"] and method == "POST":
        require(request, "send", name)
    elif rest in (["messages"], ["receive"]) or (len(rest) == 2 and rest[0] == "messages"):
        require(request, "receive", name)
    elif rest and rest[0] in ("head", "range", "consumers"):
        require(request, "receive", name)  # a range consumer is a receiver that keeps a log
    elif not rest and method in ("GET", "HEAD"):
        principal = principal_of(request)
        if not (principal.may("send", _canonical(name))
                or principal.may("receive", _canonical(name))):
            require(request, "receive", name)
    else:
        require_admin(request)


async def authorize_early(request: web.Request) -> None:
    """The path's escapes, ``authorize`` for a request of the queue tree, and the admin
    credential for the admin routes, from the path alone (the gate's check before the
    body); other routes decide in their handlers."""
    check_path(request)
    if (request.path.startswith(_ADMIN_ONLY)
            and request.match_info.http_exception is None):  # a route, not a 404
        require_admin(request)
        return
    tail = request.match_info.get("tail")
    if tail is not None and request.path.startswith(_TREE):
        name, rest = split_tail(tail)
        try:
            parse_queue_path(name)
        except QueueNameError as exc:  # the route would say so after the body
            raise ProblemError(400, str(exc),
                               type_slug="MQ_ERROR_ILLEGAL_QUEUE_PATHNAME") from None
        authorize(request, name, rest)


def _canonical(name: str) -> str:
    try:
        return parse_queue_path(name).canonical
    except QueueNameError:
        return name.lower()
