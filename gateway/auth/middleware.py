"""The request gate: body limits and time-out, authentication, rate limits; and the checks
handlers call for what a principal may touch.

Order: a declared body over the limit is refused (413) before any of it is read; the body is
read within ``server.body_timeout`` (408 for slow clients) because HMAC signatures cover it;
then the credential decides the principal (401 when one is required and missing or wrong);
then the partner's rate limit (429 with Retry-After). Health, metrics and the OpenAPI document
are public. SRMP routes take their principal from a client certificate only: MSMQ senders
authenticate by certificate or by source network (gateway.srmp_http).

The gate is a check the one middleware layer (gateway.middlewares) awaits before the
handler, not a middleware of its own: each aiohttp middleware layer costs two more calls on
every request.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time

from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.auth.authenticator import Authenticator, AuthError, Credentials, RateLimited
from gateway.auth.hmac_sig import SCHEME
from gateway.auth.principal import NOBODY, OPEN, Principal
from gateway.auth.ratelimit import TokenBucket
from gateway.auth.tls import PeerSubjects
from gateway.errors import ProblemError
from gateway.settings import Settings
from mapping.names import QueueNameError, parse_queue_path

__all__ = ["Gate", "make_auth_gate", "principal_of", "require", "require_admin", "PRINCIPAL",
           "is_loopback"]

Gate = Callable[[web.Request], Awaitable[None]]

PUBLIC_PATHS = frozenset({"/healthz", "/readyz", "/metrics", "/v1/openapi.json"})
PRINCIPAL = web.RequestKey("principal", Principal)
# Basic first: browsers (the status page) read the first challenge; API clients know theirs.
_CHALLENGE = {"WWW-Authenticate": f'Basic realm="entrepot", Bearer realm="entrepot", '
              f'{SCHEME} realm="entrepot"'}


def make_auth_gate(settings: Settings, authenticator: Authenticator) -> Gate:
    """The check every request passes before its handler; it raises ProblemError (413, 408,
    401, 429, 503) or records the request's principal."""
    body_max = settings.server.request_body_max
    body_timeout = settings.server.body_timeout
    subjects = PeerSubjects()

    async def gate(request: web.Request) -> None:
        if request.path in PUBLIC_PATHS:
            return
        length = request.content_length
        if length is not None and length > body_max:
            raise ProblemError(413, f"request body of {length} bytes is over the limit of "
                               f"{body_max} bytes", type_slug="body-too-large")
        body = b""
        if request.can_read_body and request.content.is_eof():
            body = await request.read()  # all there already: no timer needed on this hot path
        elif request.can_read_body:
            try:
                async with asyncio.timeout(body_timeout):  # no task per request, unlike wait_for
                    body = await request.read()
            except TimeoutError:
                raise ProblemError(408, f"request body not received within {body_timeout} s",
                                   type_slug="body-timeout") from None
        route = request.match_info.route
        srmp = route.name is not None and route.name.startswith("srmp-")
        creds = Credentials("" if srmp else request.headers.get("Authorization", ""),
                            subjects.of(request.transport), request.method, request.path_qs,
                            body, request.headers.items())
        try:
            principal = authenticator.authenticate(creds, now=time.time(),
                                                   monotonic=time.monotonic())
        except AuthError as exc:
            raise ProblemError(401, str(exc), type_slug="unauthorized",
                               headers=_CHALLENGE) from exc
        except RateLimited as exc:
            raise ProblemError(429, str(exc), type_slug="rate-limited",
                               headers={"Retry-After": TokenBucket.retry_after(exc.wait_s)}
                               ) from exc
        except OverflowError as exc:
            raise ProblemError(503, str(exc), type_slug="overloaded",
                               headers={"Retry-After": "5"}) from exc
        if principal is None and authenticator.required and not srmp:
            raise ProblemError(401, "a credential is required (Authorization: Bearer <API key> "
                               f"or {SCHEME}, or a client certificate)",
                               type_slug="unauthorized", headers=_CHALLENGE)
        request[PRINCIPAL] = principal or (NOBODY if srmp else OPEN)

    return gate


def principal_of(request: web.Request) -> Principal:
    """The authenticated principal; OPEN when no credentials are configured; NOBODY for an
    SRMP sender without a client certificate."""
    if PRINCIPAL not in request:
        return OPEN
    return request[PRINCIPAL]


def require(request: web.Request, action: str, queue: str) -> None:
    """Raises: ProblemError 403 when the principal may not ``action`` ("send"/"receive")
    on ``queue``. An invalid queue name passes here: its handler says what is wrong."""
    principal = principal_of(request)
    try:
        canonical = parse_queue_path(queue).canonical
    except QueueNameError:
        return
    if not principal.may(action, canonical):
        raise ProblemError(403, f"{principal.name} may not {action} on {queue!r}",
                           type_slug="MQ_ERROR_ACCESS_DENIED")


def require_admin(request: web.Request) -> None:
    """Raises: ProblemError 403 unless the admin, or a loopback client of an open gateway
    (no credentials configured: management stays on the machine itself)."""
    principal = principal_of(request)
    if principal.admin:
        return
    if not principal.open:
        raise ProblemError(403, "this needs the admin credential",
                           type_slug="MQ_ERROR_ACCESS_DENIED")
    if not is_loopback(request):
        raise ProblemError(403, "management answers only loopback clients while no "
                           "credentials are configured (set auth.admin_key_sha256)",
                           type_slug="MQ_ERROR_ACCESS_DENIED")


def is_loopback(request: web.Request) -> bool:
    """The client connected from this machine (127.0.0.0/8 or ::1)."""
    try:
        return ipaddress.ip_address(request.remote or "").is_loopback
    except ValueError:
        return False
