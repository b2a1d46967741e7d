"""``[[peers]]``: a link to a TLS peer that requires a client certificate, with the peer's own
CA bundle, stream element and window — and, without them, a link that refuses an unknown
certificate instead of sending."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.web.app import make_app
from gateway.web.appkeys import STATE_KEY
from gateway.errors import ConfigError
from gateway.settings import parse_settings
from tests.helpers import GatewayProcess, free_port, tls_server_config

pytestmark = pytest.mark.workers


@pytest.fixture(scope="module")
def tls_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayProcess, Path]]:
    root = tmp_path_factory.mktemp("peer")
    cert = root / "server" / "cert.pem"
    config = root / "entrepot.toml"
    config.write_text(tls_server_config(root, "a-gateway") + f"""
[srmp]
allow_networks = []
[[partners]]
name = "a"
cert_subject = "CN=a-gateway,O=entrepot development"
api_key_sha256 = "{hashlib.sha256(b'a-key').hexdigest()}"
send = ["private$/orders"]
receive = ["private$/orders"]
[[queues]]
path = "private$/orders"
transactional = true
""")
    proc = GatewayProcess(root / "data", extra_args=["--config", str(config)], cafile=cert)
    try:
        proc.wait_ready()
        yield proc, root
    finally:
        proc.stop()


async def _gateway(aiohttp_client: Any, tmp: Path, name: str, doc: dict[str, Any]) -> Any:
    port = free_port()
    app = make_app(parse_settings(doc, {
        "store.data_dir": str(tmp / name), "server.listen": f"127.0.0.1:{port}",
        "links.resend": ["1s"], "links.retry_max": "200ms", "links.request_timeout": "5s"}))
    client = await aiohttp_client(app, server_kwargs={"port": port})
    for _ in range(3000):  # an upper bound only
        if app[STATE_KEY].ready:
            break
        await asyncio.sleep(0.01)
    return client


async def _orders(peer: GatewayProcess, root: Path) -> list[dict[str, Any]]:
    context = ssl.create_default_context(cafile=str(root / "server" / "cert.pem"))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as http:
        async with http.get(f"{peer.url}/v1/queues/private$/orders/messages",
                            headers={"Authorization": "Bearer a-key"}) as response:
            messages: list[dict[str, Any]] = (await response.json())["messages"]
            return messages


async def test_a_link_with_peer_tls_stream_element_and_window(
        aiohttp_client: Any, tmp_path: Path, tls_peer: tuple[GatewayProcess, Path]) -> None:
    peer, root = tls_peer
    a = await _gateway(aiohttp_client, tmp_path, "a", {"peers": [{
        "url": f"https://127.0.0.1:{peer.port}/*", "cafile": str(root / "server" / "cert.pem"),
        "client_cert": str(root / "client" / "cert.pem"),
        "client_key": str(root / "client" / "key.pem"),
        "stream_element": "Stream", "window": 2}]})
    orders = f"DIRECT=HTTPS://127.0.0.1:{peer.port}/msmq/private$/orders"
    for n in range(6):
        response = await a.post("/v1/messages", data=b"o%d" % n, headers={
            "Mq-Destination": orders, "Mq-Transaction": "single"})
        assert response.status == 201, await response.text()
    messages: list[dict[str, Any]] = []
    for _ in range(400):
        messages = await _orders(peer, root)
        if len(messages) >= 6:
            break
        await asyncio.sleep(0.05)
    assert [base64.b64decode(m["body_base64"]) for m in messages] == [b"o%d" % n
                                                                      for n in range(6)]
    envelope = messages[0]["properties"]["srmp_envelope"]
    assert "<Stream " in envelope or "<Stream>" in envelope, envelope[:400]
    links = (await (await a.get("/v1/links")).json())["links"]
    assert links[0]["last_error"] == ""


async def test_without_the_peer_ca_the_link_refuses_to_send(
        aiohttp_client: Any, tmp_path: Path, tls_peer: tuple[GatewayProcess, Path]) -> None:
    peer, root = tls_peer
    before = len(await _orders(peer, root))
    b = await _gateway(aiohttp_client, tmp_path, "b", {})
    await b.post("/v1/messages", data=b"x", headers={
        "Mq-Destination": f"DIRECT=HTTPS://127.0.0.1:{peer.port}/msmq/private$/orders",
        "Mq-Transaction": "single"})
    links: list[dict[str, Any]] = []
    for _ in range(600):  # an upper bound only
        links = (await (await b.get("/v1/links")).json())["links"]
        if links and links[0]["last_error"]:
            break
        await asyncio.sleep(0.05)
    assert "certificate" in links[0]["last_error"].lower(), json.dumps(links)
    assert links[0]["backlog"] == 1 and len(await _orders(peer, root)) == before


@pytest.mark.parametrize("peer, fragment", [
    ({"url": "https://x/*", "client_cert": "/nonexistent.pem", "client_key": "/n.pem"},
     "peers[0] (https://x/*): cannot load"),
    ({"url": "https://x/*", "client_cert": "/c.pem"}, "client_cert and client_key"),
    ({"url": "https://x/*", "stream_element": "STREAM"}, "peers[0].stream_element"),
    ({"url": "https://x/*", "window": 5000}, "peers[0].window"),
])
def test_bad_peer_settings_are_refused(peer: dict[str, Any], fragment: str) -> None:
    with pytest.raises(ConfigError) as failure:
        make_app(parse_settings({"peers": [peer]}))
    assert fragment in str(failure.value)
