"""A front's way to the owner for every request it does not turn into a command.

The request goes as it came (method, path and query, headers, body) to the owner's own
application on its private Unix socket, with the client's address, scheme and certificate in
``gateway.web.forwarded``'s headers; the answer comes back as the owner made it. The front's
gate has passed it (refusing a stranger before its body); the owner authenticates it again,
told whether the partner's rate token and a signature's nonce are taken already.
"""

from __future__ import annotations

import base64

import aiohttp
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from gateway.auth.tls import peer_certificate
from gateway.errors import ProblemError
from gateway.fronts.channel import AnswerLost
from gateway.settings import Settings
from gateway.web import forwarded
from gateway.web.auth_middleware import (
    NONCE_TAKEN,
    PRINCIPAL,
    PROBES,
    THROTTLED,
    Gate,
    read_body,
    refuse_declared_length,
)
from gateway.web.slow_readers import write_within

__all__ = ["Forwarder"]

# Hop-by-hop headers (RFC 9110 7.6.1) and those the HTTP layer sets for the body it sends.
# Expect too: the front has answered it (gateway.web.expect) and sends the body whole; and
# Content-Encoding: the front sends the body as it decoded it.
_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer",
                  "transfer-encoding", "upgrade", "content-length", "expect",
                  "content-encoding"})


# Answers up to this size are read whole and answered with a length; larger ones and those
# of unknown length (chunked) are streamed in chunks of _CHUNK.
_WHOLE_MAX = 1 << 20
_CHUNK = 1 << 16


class Forwarder:
    def __init__(self, settings: Settings, owner_socket: str) -> None:
        self._body_max = settings.server.request_body_max
        self._body_timeout = settings.server.body_timeout
        self._owner_socket = owner_socket
        # One connection per request in flight, at most as many as the front admits.
        self._limit = (settings.server.concurrent_requests_max
                       + settings.server.long_polls_max)
        self._session: aiohttp.ClientSession | None = None
        # The front's gate: a request that waits for "100 Continue" passes it here first,
        # so that a stranger is refused before it sends its body (gateway.web.expect).
        self.gate: Gate | None = None

    async def start(self) -> None:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.UnixConnector(self._owner_socket, limit=self._limit),
            auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def forward(self, request: web.Request) -> web.StreamResponse:
        """The owner's answer to ``request``.

        Raises:
            ProblemError: 413/408/400 for a body the owner's gate would refuse the same way;
                503 when the owner cannot be reached.
            AnswerLost: the owner went away after the request was sent.
        """
        assert self._session is not None
        if request.path in PROBES:  # answered on no header and no body, as in one process
            return await self._send(request, request.method, CIMultiDict(), b"")
        refuse_declared_length(request, self._body_max)
        if self.gate is not None and PRINCIPAL not in request:
            # Refused here, before the body where one process would; the owner's gate checks
            # it again, told that the partner's token and a signature's nonce are taken.
            await self.gate(request)
        # Read here, or already by the front's gate (then aiohttp has kept it).
        body = await read_body(request, self._body_timeout, self._body_max)
        headers: CIMultiDict[str] = CIMultiDict()
        for name, value in request.headers.items():
            if name.lower() in _HOP or name.lower() in forwarded.FRONT_HEADERS:
                continue
            headers.add(name, value)  # UTF-8: the middleware refused other bytes
        return await self._send(request, request.method, headers, body)

    async def _send(self, request: web.Request, method: str, headers: CIMultiDict[str],
                    body: bytes) -> web.StreamResponse:
        assert self._session is not None
        if THROTTLED in request:
            headers[forwarded.TOKEN] = "1"
        if NONCE_TAKEN in request:
            headers[forwarded.NONCE] = "1"
        headers[forwarded.REMOTE] = request.remote or ""
        headers[forwarded.SCHEME] = request.scheme
        der = peer_certificate(request.transport)
        if der:
            headers[forwarded.CERT] = base64.b64encode(der).decode()
        # The path and query as sent (an absolute-form target's too: RFC 9112 3.2.2).
        url = URL("http://owner" + request.rel_url.raw_path_qs, encoded=True)
        try:
            async with self._session.request(method, url, headers=headers,
                                             data=body if body else None,
                                             allow_redirects=False) as answer:
                out = CIMultiDict((k, v) for k, v in answer.headers.items()
                                  if k.lower() not in _HOP)
                length = answer.content_length
                if length is not None and length <= _WHOLE_MAX:
                    return web.Response(status=answer.status, reason=answer.reason,
                                        body=await answer.read(), headers=out)
                return await _stream(request, answer, out, self._body_timeout)
        except aiohttp.ClientConnectorError as exc:  # not sent: nothing was done
            raise ProblemError(503, f"the store owner process cannot be reached: {exc}",
                               type_slug="not-ready", headers={"Retry-After": "1"}) from exc
        except aiohttp.ClientError as exc:  # sent, then the owner went away: done or not
            raise AnswerLost(f"the store owner process went away: {exc}") from exc


async def _stream(request: web.Request, answer: aiohttp.ClientResponse,
                  headers: CIMultiDict[str], timeout: float) -> web.StreamResponse:
    """An answer passed on as it arrives (a range read of many messages): a front holds a
    chunk of it at a time, not the whole. Once started, a failure can only cut it short."""
    response = web.StreamResponse(status=answer.status, reason=answer.reason, headers=headers)
    if answer.content_length is not None:
        response.content_length = answer.content_length
    await response.prepare(request)
    try:
        async for chunk in answer.content.iter_chunked(_CHUNK):
            await write_within(request, response, chunk, timeout)
        await response.write_eof()
    except ConnectionError:  # the client hung up: closing the owner's answer ends it
        pass
    return response

