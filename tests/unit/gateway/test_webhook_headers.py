"""Header injection into forwarded requests: whatever a label or content type holds, a webhook
request carries exactly the headers the link meant to send (sent to a real server on
127.0.0.1 through aiohttp's client)."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import aiohttp
from aiohttp import web

from gateway.auth.hmac_sig import SignatureError, parse_authorization, verify
from gateway.msmq.message import MessageProperties
from gateway.queues.manager import ReceivedMessage
from gateway.outbound.webhook_headers import safe_content_type, webhook_headers

_HOSTILE = "a\r\nX-Injected: 1\r\n\r\nGET /evil HTTP/1.1\x00\x7f é"


def _message(label: str) -> ReceivedMessage:
    props = MessageProperties(label=label, priority=5, sent_at_ms=1)
    return ReceivedMessage("{00000000-0000-0000-0000-000000000001}\\7", "q", 7, props, b"x")


def test_a_label_with_control_characters_travels_percent_encoded() -> None:
    headers = webhook_headers(_message(_HOSTILE), "gw", b"", "http://h/x")
    assert headers["Mq-Label-Encoding"] == "percent"
    assert unquote(headers["Mq-Label"]) == _HOSTILE
    assert all(ch >= " " and ch != "\x7f" for v in headers.values() for ch in v)
    plain = webhook_headers(_message("50% off, é"), "gw", b"", "http://h/x")
    assert plain["Mq-Label"] == "50% off, é" and "Mq-Label-Encoding" not in plain


def test_only_well_formed_media_types_pass() -> None:
    assert safe_content_type("text/plain; charset=utf-8") == "text/plain; charset=utf-8"
    assert safe_content_type('multipart/related; boundary="a b"') == \
        'multipart/related; boundary="a b"'
    for bad in ("text/plain\r\nX-Injected: 1", "", "no-slash", "text/plain; x=\"\n\""):
        assert safe_content_type(bad) == "application/octet-stream"


async def test_the_receiver_sees_no_injected_header(aiohttp_server: Any) -> None:
    seen: list[dict[str, str]] = []

    async def hook(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    server = await aiohttp_server(app)
    url = f"http://127.0.0.1:{server.port}/hook"
    headers = webhook_headers(_message(_HOSTILE), "gw", b"secret-0123456789", url)
    async with aiohttp.ClientSession() as session:
        async with session.post(url, data=b"x", headers={
                "Content-Type": safe_content_type("text/plain\r\nX-Injected: 2"),
                **headers}) as response:
            assert response.status == 204
    assert len(seen) == 1
    got = seen[0]
    assert "X-Injected" not in got and unquote(got["Mq-Label"]) == _HOSTILE
    assert got["Content-Type"] == "application/octet-stream"
    assert got["Authorization"].startswith("EP-HMAC-SHA256 ")


async def test_the_signature_covers_the_headers_as_the_receiver_sees_them(
        aiohttp_server: Any) -> None:
    """The receiver verifies the signature over the request it got (Content-Type and the
    Mq-* headers included); had a header been changed on the way, it would not verify."""
    secret = b"secret-0123456789"
    seen: list[str] = []

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        signed = parse_authorization(request.headers["Authorization"])
        try:
            verify(signed, secret, method="POST", path_qs=request.path_qs, body=body,
                   headers=request.headers.items(), now=signed.ts, window_s=300)
        except SignatureError:
            seen.append("refused")
            return web.Response(status=401)
        seen.append(request.headers["Content-Type"])
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", hook)
    server = await aiohttp_server(app)
    url = f"http://127.0.0.1:{server.port}/hook?x=1"
    props = MessageProperties(label="50% off, é", priority=5, sent_at_ms=1,
                              content_type="text/plain; charset=utf-8")
    message = ReceivedMessage("{00000000-0000-0000-0000-000000000001}\\7", "q", 7, props,
                              b"x")
    headers = webhook_headers(message, "gw", secret, url)
    async with aiohttp.ClientSession() as session:
        for sent in (headers, {**headers, "Mq-Priority": "7"},
                     {**headers, "Content-Type": "text/html"}):
            async with session.post(url, data=b"x", headers=sent) as response:
                await response.read()
    assert seen == ["text/plain; charset=utf-8", "refused", "refused"]
