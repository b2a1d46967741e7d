"""The request gate: body limits and time-out, authentication, rate limits; and the checks
handlers call for what a principal may touch.

Order: a declared body over the limit is refused (413) before any of it is read; the body is
read within ``server.body_timeout`` (408 for slow clients) because HMAC signatures cover it;
then the credential decides the principal (401 when one is required and missing or wrong);
then the partner's rate limit (429 with Retry-After). Health, metrics and the OpenAPI document
are public. SRMP routes take their principal from a client certificate only: MSMQ senders
authenticate by certificate or by source network (gateway.web.srmp_routes).

The gate is a check the one middleware layer (gateway.web.middlewares) awaits before the
handler, not a middleware of its own: each aiohttp middleware layer costs two more calls on
every request.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiohttp import web

from gateway.auth.authenticator import Authenticator, AuthError, Credentials, RateLimited
from gateway.auth.hmac_sig import SCHEME, SignedRequest, is_signed
from gateway.auth.networks import in_networks
from gateway.auth.principal import NOBODY, OPEN, Principal
from gateway.auth.ratelimit import TokenBucket
from gateway.auth.tls import PeerSubjects
from gateway.errors import ProblemError
from gateway.settings import Settings
from gateway.web.appkeys import SETTINGS_KEY, STATE_KEY
from gateway.web.body_coding import BodyCodingError, BodyTooLarge, decode
from gateway.web.expect import send_continue
from gateway.web.partner_shares import PartnerShares
from mapping.formatnames import canonical_host
from mapping.names import QueueNameError, parse_queue_path

__all__ = [
    "NONCE_TAKEN",
    "PEER_CERT",
    "PRINCIPAL",
    "PROBES",
    "THROTTLED",
    "Gate",
    "NonceTaker",
    "is_local_client",
    "is_loopback",
    "make_auth_gate",
    "principal_of",
    "require_admin_of",
    "require_may",
    "read_body",
    "body_of",
    "BODY",
    "refuse_declared_length",
    "require",
    "require_admin",
    "scoped_key",
    "scoped_key_of",
    "take_nonce",
    "throttle",
]

Gate = Callable[[web.Request], Awaitable[None]]
# Uses up a verified signed request's nonce where the nonces are, or raises ProblemError.
NonceTaker = Callable[[web.Request, SignedRequest], Awaitable[None]]

# The liveness and readiness probes: they read no header and no body.
PROBES = frozenset({"/healthz", "/readyz"})
PUBLIC_PATHS = PROBES | {"/metrics", "/v1/openapi.json"}
PRINCIPAL = web.RequestKey("principal", Principal)
# The body the gate read (``read_body``; handlers take it with ``body_of``).
BODY = web.RequestKey("body", bytes)
# The client certificate (DER) a front process verified (gateway.fronts): the store owner
# sees the front's Unix socket, not the client's TLS connection.
PEER_CERT = web.RequestKey("peer_cert", bytes)
# The partner's rate token is taken (a front's gate took it; the owner is told so).
THROTTLED = web.RequestKey("throttled", bool)
# A signed request's nonce is used up (a front's gate had the owner take it; the owner is
# told so).
NONCE_TAKEN = web.RequestKey("nonce_taken", bool)
# Basic first: browsers (the status page) read the first challenge; API clients know theirs.
_CHALLENGE = {"WWW-Authenticate": f'Basic realm="entrepot", Bearer realm="entrepot", '
              f'{SCHEME} realm="entrepot"'}


def make_auth_gate(settings: Settings, authenticator: Authenticator,
                   shares: PartnerShares | None = None,
                   before_body: Gate | None = None,
                   take_nonce: NonceTaker | None = None) -> Gate:
    """The check every request passes before its handler; it raises ProblemError (413, 408,
    401, 403, 429, 503) or records the request's principal. ``shares``: the request takes a
    place in its partner's share once the partner is known (the middleware gives it back).
    ``before_body``: the route's permission check, made on the headers' principal before the
    body is read (a signed request's principal is known only with its body).
    ``take_nonce``: where a verified signature's nonce is used up (a front's way to the
    store owner, which also takes the partner's rate token); by ``authenticator`` if None."""
    body_max = settings.server.request_body_max
    body_timeout = settings.server.body_timeout
    subjects = PeerSubjects()
    allow_networks = settings.srmp.allow_networks
    # A client certificate is asked for only with a CA to verify it (gateway.auth.tls).
    certificates = bool(settings.server.tls_cert and settings.server.tls_client_ca)

    async def gate(request: web.Request) -> None:
        if request.path in PUBLIC_PATHS:
            return
        refuse_declared_length(request, body_max)
        route = request.match_info.route
        srmp = route.name is not None and route.name.startswith("srmp-")
        header = "" if srmp else request.headers.get("Authorization", "")
        signed = is_signed(header)
        subject = None
        if certificates:
            subject = (subjects.of_der(request[PEER_CERT]) if PEER_CERT in request
                       else subjects.of(request.transport))
        principal: Principal | None = None
        # Everything but a signature is decided on the headers, before the body is read: a
        # stranger's slow body cannot hold the in-flight slots partners need.
        if signed:
            _check(authenticator.known_signer, header)
        else:
            if header or subject is not None:  # (nothing presented: no principal)
                principal = _check(authenticate, Credentials(
                    header, subject, request.method, request.path_qs, b"", (),
                    THROTTLED in request))
            if principal is None and authenticator.required and not srmp:
                raise ProblemError(401, "a credential is required (Authorization: Bearer "
                                   f"<API key> or {SCHEME}, or a client certificate)",
                                   type_slug="unauthorized", headers=_CHALLENGE)
            if shares is not None and (principal is not None or srmp):
                # Before its body: a slow one counts too (an SRMP sender nobody vouches
                # for, whose body says where it goes, among them).
                trusted = ""
                if principal is None and in_networks(request.remote or "", allow_networks):
                    trusted = request.remote or ""
                shares.take(request, principal or NOBODY, trusted)
            request[PRINCIPAL] = principal or (NOBODY if srmp else OPEN)
            if before_body is not None:
                await before_body(request)
        body = await read_body(request, body_timeout, body_max)
        if signed:
            credentials = Credentials(header, subject, request.method, request.path_qs, body,
                                      request.headers.items(), THROTTLED in request,
                                      NONCE_TAKEN in request)
            if take_nonce is None or NONCE_TAKEN in request:
                principal = _check(authenticate, credentials)
            else:  # a front: the signature is checked here, the nonce where the nonces are
                principal, signed_request = _check(verify_signed, credentials)
                await take_nonce(request, signed_request)
                request[NONCE_TAKEN] = request[THROTTLED] = True
            if principal is not None and shares is not None:
                shares.take(request, principal)
        request[PRINCIPAL] = principal or (NOBODY if srmp else OPEN)

    def authenticate(creds: Credentials) -> Principal | None:
        return authenticator.authenticate(creds, now=time.time(), monotonic=time.monotonic())

    def verify_signed(creds: Credentials) -> tuple[Principal, SignedRequest]:
        return authenticator.verify_signed(creds, now=time.time())

    return gate


T = TypeVar("T")
A = TypeVar("A")


def _check(step: Callable[[A], T], argument: A) -> T:
    """One authentication step, its refusals as the answers they are."""
    try:
        return step(argument)
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


def refuse_declared_length(request: web.Request, body_max: int) -> None:
    """Raises: ProblemError 413 when the declared body is over ``body_max`` (nothing read)."""
    length = request.content_length
    if length is not None and length > body_max:
        raise ProblemError(413, f"request body of {length} bytes is over the limit of "
                           f"{body_max} bytes (server.request_body_max)",
                           type_slug="body-too-large")


def throttle(authenticator: Authenticator, partner: str) -> None:
    """Raises: ProblemError 429 when ``partner`` is over its rate limit."""
    _check(lambda name: authenticator.throttle(name, time.monotonic()), partner)


def take_nonce(authenticator: Authenticator, signed: SignedRequest, throttled: bool) -> None:
    """``Authenticator.take_nonce`` now, its refusals as answers (401, 429, 503)."""
    _check(lambda s: authenticator.take_nonce(s, now=time.time(), monotonic=time.monotonic(),
                                              throttled=throttled), signed)


async def read_body(request: web.Request, timeout_s: float, body_max: int) -> bytes:
    """The whole body, within ``timeout_s`` (408), decoded from its Content-Encoding
    (gateway.web.body_coding: 400 when it does not decode), at most ``body_max`` bytes as
    sent and once decoded (413); kept for ``body_of``. A client that hangs up mid-body is
    answered 499 (client closed request, as nginx counts it, and as a front counts the
    same client when aiohttp cancels its handler): the status its request is counted
    under, since no answer reaches it. No error is logged: the fault is not the
    gateway's."""
    body: bytes | None = request.get(BODY)
    if body is not None:
        return body
    if not request.can_read_body:
        return b""
    try:
        content = request.content
        if content.is_eof():  # all there already: taken as it is, no timer, one copy
            body = content.read_nowait()
            if len(body) > body_max:  # (a chunked body: no length was declared)
                raise web.HTTPRequestEntityTooLarge(max_size=body_max, actual_size=len(body))
        else:
            await send_continue(request)  # the checks that need no body are passed
            async with asyncio.timeout(timeout_s):  # no task per request, unlike wait_for
                body = await request.read()
        coding = request.headers.get("Content-Encoding")
        if coding is not None:
            body = await _decoded(coding, body, body_max)
    except TimeoutError:
        raise ProblemError(408, f"request body not received within {timeout_s} s",
                           type_slug="body-timeout") from None
    except ConnectionError as exc:
        raise ProblemError(499, f"the client closed the connection mid-body ({exc})",
                           type_slug="body-incomplete") from None
    request[BODY] = body
    return body


async def body_of(request: web.Request) -> bytes:
    """The request's body, as the gate read it (``read_body``), or read now (a route the
    gate does not read for). Handlers read it here, not with ``request.read()``: the gate
    takes a body that has all arrived from the stream as it is, leaving aiohttp's copy
    empty, and aiohttp's is not decoded."""
    body: bytes | None = request.get(BODY)
    if body is not None:
        return body
    server = request.app[SETTINGS_KEY].server
    return await read_body(request, server.body_timeout, server.request_body_max)


# A body larger than this (as sent) is decoded off the event loop: zlib lets go of the GIL.
_DECODE_INLINE_BYTES_MAX = 64 << 10


async def _decoded(coding: str, raw: bytes, body_max: int) -> bytes:
    """Raises: ProblemError 400 when ``raw`` does not decode; HTTPRequestEntityTooLarge."""
    try:
        if len(raw) <= _DECODE_INLINE_BYTES_MAX:
            return decode(coding, raw, body_max)
        return await asyncio.get_running_loop().run_in_executor(
            None, decode, coding, raw, body_max)
    except BodyTooLarge:
        raise web.HTTPRequestEntityTooLarge(max_size=body_max,
                                            actual_size=body_max + 1) from None
    except BodyCodingError as exc:
        raise ProblemError(400, "request body: it does not decode as its Content-Encoding "
                           f"says ({coding[:64]}): {exc}", type_slug="bad-body") from None


def principal_of(request: web.Request) -> Principal:
    """The authenticated principal; OPEN when no credentials are configured; NOBODY for an
    SRMP sender without a client certificate."""
    if PRINCIPAL not in request:
        return OPEN
    return request[PRINCIPAL]


def scoped_key(request: web.Request, key: str | None) -> str | None:
    """An ``Idempotency-Key`` in its principal's own space: one partner's keys can neither
    block nor reveal another's."""
    return scoped_key_of(principal_of(request), key)


def scoped_key_of(principal: Principal, key: str | None) -> str | None:
    """``scoped_key`` for ``principal``."""
    return None if key is None else f"{principal.scope}\0{key}"


def require(request: web.Request, action: str, queue: str) -> None:
    """Raises: ProblemError 403 when the principal may not ``action`` ("send"/"receive")
    on ``queue``. An invalid queue name passes here: its handler says what is wrong."""
    require_may(principal_of(request), action, queue)


def require_may(principal: Principal, action: str, queue: str) -> None:
    """``require`` for ``principal``."""
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
    require_admin_of(principal, principal.admin or not principal.open
                     or is_local_client(request))


def require_admin_of(principal: Principal, local: bool) -> None:
    """``require_admin`` for ``principal``, ``local`` telling a client on this machine."""
    if principal.admin:
        return
    if not principal.open:
        raise ProblemError(403, "this needs the admin credential",
                           type_slug="MQ_ERROR_ACCESS_DENIED")
    if not local:
        raise ProblemError(403, "management answers only clients on this machine (loopback, "
                           "a Host naming this gateway, no Origin of another site) while no "
                           "credentials are configured (set auth.admin_key_sha256)",
                           type_slug="MQ_ERROR_ACCESS_DENIED")


def is_local_client(request: web.Request) -> bool:
    """A client on this machine that means to talk to this gateway: loopback, a ``Host``
    that names it, and no ``Origin`` of another site. A web page open in a browser on the
    machine connects from loopback too: its requests carry its own ``Origin``, and a page
    reaching us by DNS rebinding its own name sends that name as ``Host``."""
    if not is_loopback(request):
        return False
    hosts = request.app[STATE_KEY].local.hosts
    if _host_of(request.host) not in hosts:
        return False
    origin = request.headers.get("Origin")
    return origin is None or _host_of(origin.partition("://")[2] or origin) in hosts


def _host_of(authority: str) -> str:
    """The host of ``host[:port]``, as format names compare it (``[v6]`` kept bracketed)."""
    authority = authority.strip().rstrip("/").lower()
    if authority.startswith("["):
        return canonical_host(authority[:authority.find("]") + 1])
    return authority.rsplit(":", 1)[0] if authority.count(":") == 1 else authority


def is_loopback(request: web.Request) -> bool:
    """The client connected from this machine (127.0.0.0/8 or ::1)."""
    try:
        address = ipaddress.ip_address(request.remote or "")
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback  # an IPv4 client of a dual-stack listener
    return address.is_loopback
