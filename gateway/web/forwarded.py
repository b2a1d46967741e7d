"""What a front process tells the store owner about a request it forwards.

The owner serves forwarded requests on a Unix socket only its own fronts can open (a private
directory), so it sees the front, not the client: the front passes the client's address,
scheme and verified TLS certificate in these headers, after removing any a client sent.
"""

from __future__ import annotations

import base64

from aiohttp import web
from aiohttp.typedefs import Handler

from gateway.web.auth_middleware import NONCE_TAKEN, PEER_CERT, THROTTLED

__all__ = ["CERT", "FRONT_HEADERS", "NONCE", "REMOTE", "SCHEME", "TOKEN", "from_front"]

REMOTE = "Entrepot-Front-Remote"
SCHEME = "Entrepot-Front-Scheme"
CERT = "Entrepot-Front-Cert"  # base64 of the DER
TOKEN = "Entrepot-Front-Throttled"  # "1": the front took the partner's rate token
NONCE = "Entrepot-Front-Nonce-Taken"  # "1": the owner used up the signature's nonce
FRONT_HEADERS = frozenset(h.lower() for h in (REMOTE, SCHEME, CERT, TOKEN, NONCE))


@web.middleware
async def from_front(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The owner's outermost layer: the request as the client made it."""
    headers = request.headers
    scheme = headers.get(SCHEME, "http")
    clone = request.clone(remote=headers.get(REMOTE, ""),
                          scheme="https" if scheme == "https" else "http")
    der = headers.get(CERT)
    if der:  # set by a front only, from the certificate ssl verified
        clone[PEER_CERT] = base64.b64decode(der)
    if headers.get(TOKEN) == "1":
        clone[THROTTLED] = True
    if headers.get(NONCE) == "1":
        clone[NONCE_TAKEN] = True
    return await handler(clone)
