"""Admin and response queues, receipts and acknowledgements cannot reach what their sender
cannot: the gateway's own queues, other partners' queues, dead-letter queues and journals, or
an address of the sender's choosing on the network."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway.web.appkeys import STATE_KEY
from gateway.queues.internal import INTERNAL_QUEUES, OUTGOING_PREFIX
from gateway.settings import parse_settings
from gateway.srmp.model import Services
from tests.helpers import ready_client
from tests.srmp_client import post, stream_message, user_message

ACK_REACH = "MQMSG_ACKNOWLEDGMENT_FULL_REACH_QUEUE"


def _sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


ACME = {"Authorization": "Bearer acme-key"}
ADMIN = {"Authorization": "Bearer admin-key"}


def _settings(tmp_path: Path, **outbound: object) -> Any:
    doc: dict[str, object] = {
        "store": {"data_dir": str(tmp_path / "data")},
        "auth": {"admin_key_sha256": _sha("admin-key")},
        "partners": [{"name": "acme", "api_key_sha256": _sha("acme-key"),
                      "send": ["private$/acme_*"], "receive": ["private$/acme_*"]}],
        "queues": [{"path": "private$/acme_in"}, {"path": "private$/acme_acks"},
                   {"path": "private$/other_in"}, {"path": "anon", "anonymous": True},
                   {"path": "anon_tx", "anonymous": True, "transactional": True}],
    }
    if outbound:
        doc["outbound"] = outbound
    return parse_settings(doc)


async def _counts(client: Any) -> dict[str, int]:
    qm = client.app[STATE_KEY].serving().queue_manager
    return {q.path.canonical: qm.store.count(q.queue_id) for q in qm.all_queues()}


INTERNAL_FORMS = [*INTERNAL_QUEUES, OUTGOING_PREFIX + "0123abcd", "private$/entrepot_future$",
                  "PRIVATE$\\ENTREPOT_DEDUP$", "DIRECT=OS:.\\private$\\entrepot_dedup$",
                  "private$/entrepot_dedup$;journal"]


@pytest.mark.parametrize("header", ["Mq-Admin-Queue", "Mq-Response-Queue"])
async def test_internal_queues_are_never_a_reply_address(aiohttp_client: Any, tmp_path: Path,
                                                         header: str) -> None:
    client = await ready_client(aiohttp_client, _settings(tmp_path))
    port = client.server.port
    before = await _counts(client)
    forms = list(INTERNAL_FORMS)
    if header == "Mq-Admin-Queue":  # this in-process server's port is not its listen port:
        # the URL is remote to it, and no remote admin queue is allowed by default
        forms.append(f"DIRECT=HTTP://127.0.0.1:{port}/msmq/private$/entrepot_dedup$")
    for form in forms:
        for path, extra in (("/v1/queues/private$/acme_in/messages", {}),
                            ("/v1/messages", {"Mq-Destination": "DIRECT=OS:.\\private$\\acme_in"})):
            response = await client.post(path, data=b"x", headers={
                **ADMIN, **extra, header: form, "Mq-Acknowledge": ACK_REACH})
            assert response.status == 403, (form, path, await response.text())
            problem = await response.json()
            assert header in problem["detail"], problem
        batch = {"messages": [{"queue": "private$/acme_in", "body_base64": "eA==",
                               "properties": {header[3:].lower().replace("-", "_"): form,
                                              "acknowledge": ACK_REACH}}]}
        response = await client.post("/v1/batch", json=batch, headers=ADMIN)
        assert response.status == 403, (form, await response.text())
    assert await _counts(client) == before


async def test_internal_queues_are_no_destination(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await ready_client(aiohttp_client, _settings(tmp_path))
    before = await _counts(client)
    for name in INTERNAL_FORMS[:-2]:
        quoted = name.replace("\\", "/")
        for method, path in (("POST", f"/v1/queues/{quoted}/messages"),
                             ("PUT", f"/v1/queues/{quoted}"),
                             ("POST", f"/v1/queues/{quoted}/receive"),
                             ("POST", f"/v1/queues/{quoted}/purge"),
                             ("DELETE", f"/v1/queues/{quoted}")):
            response = await client.request(method, path, data=b"{}", headers=ADMIN)
            assert response.status == 403, (method, path, await response.text())
        response = await client.post("/v1/messages", data=b"x", headers={
            **ADMIN, "Mq-Destination": "DIRECT=OS:.\\" + name.replace("/", "\\")})
        assert response.status == 403, (name, await response.text())
    assert await _counts(client) == before


@pytest.mark.parametrize("admin_queue", ["private$/other_in", "system$;deadletter",
                                         "system$;deadxact", "system$;journal",
                                         "private$/order_queue$", "private$/acme_in;journal"])
async def test_a_partners_admin_queue_is_under_its_send_acl(aiohttp_client: Any,
                                                            tmp_path: Path,
                                                            admin_queue: str) -> None:
    client = await ready_client(aiohttp_client, _settings(tmp_path))
    before = await _counts(client)
    for header in ("Mq-Admin-Queue", "Mq-Response-Queue"):
        response = await client.post("/v1/queues/private$/acme_in/messages", data=b"secret",
                                     headers={**ACME, header: admin_queue,
                                              "Mq-Acknowledge": ACK_REACH})
        assert response.status == 403, (header, await response.text())
    assert await _counts(client) == before
    # What its ACL allows works: the acknowledgement arrives.
    response = await client.post("/v1/queues/private$/acme_in/messages", data=b"ok",
                                 headers={**ACME, "Mq-Admin-Queue": "private$/acme_acks",
                                          "Mq-Acknowledge": ACK_REACH})
    assert response.status == 201, await response.text()
    after = await _counts(client)
    assert after["private$/acme_acks"] == before["private$/acme_acks"] + 1


class _Receiver:
    """A local HTTP server that records what the gateway posts to it."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, bytes]] = []
        self.arrived = asyncio.Event()
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        async def take(request: web.Request) -> web.Response:
            self.posts.append((request.path_qs, await request.read()))
            self.arrived.set()
            return web.Response(status=200)

        app = web.Application()
        app.router.add_post("/{tail:.*}", take)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


async def _metric(client: Any, name: str, **labels: str) -> float:
    text = await (await client.get("/metrics")).text()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_rest_admin_queue_urls_must_be_allowed_outbound(aiohttp_client: Any,
                                                              tmp_path: Path) -> None:
    receiver = _Receiver()
    await receiver.start()
    try:
        url = f"DIRECT=HTTP://{receiver.url[7:]}/msmq/private$/acks"
        client = await ready_client(aiohttp_client, _settings(tmp_path))
        before = await _counts(client)
        for headers in (ACME, ADMIN):
            response = await client.post("/v1/queues/private$/acme_in/messages", data=b"x",
                                         headers={**headers, "Mq-Admin-Queue": url,
                                                  "Mq-Acknowledge": ACK_REACH})
            assert response.status == 403, await response.text()
            assert (await response.json())["type"].endswith("outbound-not-allowed")
        assert await _counts(client) == before
        assert receiver.posts == []
        await client.close()

        # Allowed by [outbound] allow: the acknowledgement goes out as a delivery receipt.
        allowed = await ready_client(aiohttp_client, _settings(
            tmp_path, allow=[receiver.url + "/msmq"]))
        response = await allowed.post("/v1/queues/private$/acme_in/messages", data=b"x",
                                      headers={**ACME, "Mq-Admin-Queue": url,
                                               "Mq-Acknowledge": ACK_REACH})
        assert response.status == 201, await response.text()
        await asyncio.wait_for(receiver.arrived.wait(), 60)
        assert receiver.posts[0][0] == "/msmq/private$/acks"
        # A prefix matches by URL parts: the same host on another path is still refused.
        response = await allowed.post("/v1/queues/private$/acme_in/messages", data=b"x",
                                      headers={**ACME, "Mq-Admin-Queue": url.replace(
                                          "/msmq/", "/msmqx/"), "Mq-Acknowledge": ACK_REACH})
        assert response.status == 403, await response.text()
    finally:
        await receiver.stop()


async def test_a_link_allows_its_queue_managers_queues_not_its_whole_host(
        aiohttp_client: Any, tmp_path: Path) -> None:
    """Once the admin sends to a remote queue (a link), a partner's acknowledgements may go
    to that queue manager's other queues (its virtual directory), not to any path of its
    host."""
    receiver = _Receiver()
    await receiver.start()
    try:
        host = receiver.url[7:]
        client = await ready_client(aiohttp_client, _settings(tmp_path))
        response = await client.post("/v1/messages", data=b"to the peer", headers={
            **ADMIN, "Mq-Destination": f"DIRECT=HTTP://{host}/msmq/private$/orders"})
        assert response.status == 201, await response.text()
        for path, status in (("/anything/else", 403), ("/msmqx/acks", 403),
                             ("/msmq/private$/acks", 201)):
            response = await client.post("/v1/queues/private$/acme_in/messages", data=b"x",
                                         headers={**ACME, "Mq-Acknowledge": ACK_REACH,
                                                  "Mq-Admin-Queue": f"DIRECT=HTTP://{host}{path}"})
            assert response.status == status, (path, await response.text())
    finally:
        await receiver.stop()


async def test_srmp_receipts_go_only_to_allowed_addresses(aiohttp_client: Any,
                                                          tmp_path: Path) -> None:
    receiver = _Receiver()
    await receiver.start()
    try:
        client = await ready_client(aiohttp_client, _settings(tmp_path))
        to = "http://localhost/msmq/anon"
        # A delivery receipt and a stream receipt to an address nobody allowed: the messages
        # are stored, the receipts dropped and counted, nothing is posted.
        receipt = Services(durable=True, delivery_receipt_to=receiver.url + "/msmq/r")
        response = await post(client, user_message(to, b"one", ordinal=1, services=receipt))
        assert response.status == 200, await response.text()
        response = await post(client, stream_message(
            to + "_tx", b"two", 1, receipts_to=receiver.url + "/msmq/order_queue$"))
        assert response.status == 200, await response.text()
        for _ in range(600):
            if await _metric(client, "entrepot_srmp_receipts_sent_total",
                             result="not_allowed") >= 2:
                break
            await asyncio.sleep(0.05)
        assert await _metric(client, "entrepot_srmp_receipts_sent_total",
                             result="not_allowed") >= 2
        assert receiver.posts == []
        counts = await _counts(client)
        assert counts["anon"] == 1 and counts["anon_tx"] == 1
    finally:
        await receiver.stop()


async def test_srmp_receipts_cannot_climb_out_of_an_allowed_prefix(aiohttp_client: Any,
                                                                   tmp_path: Path) -> None:
    """A receipt address under an allowed prefix that leaves it on the server (dot
    segments, escaped or not) or carries credentials is not allowed: dropped and counted."""
    receiver = _Receiver()
    await receiver.start()
    try:
        client = await ready_client(aiohttp_client, _settings(
            tmp_path, allow=[receiver.url + "/msmq/allowed"]))
        to = "http://localhost/msmq/anon"
        escapes = [receiver.url + "/msmq/allowed/../../evil",
                   receiver.url + "/msmq/allowed/%2e%2e/%2E%2E/evil",
                   receiver.url.replace("://", "://evil@") + "/msmq/allowed"]
        for ordinal, address in enumerate(escapes, 1):
            receipt = Services(durable=True, delivery_receipt_to=address)
            response = await post(client, user_message(to, b"x", ordinal=ordinal,
                                                       services=receipt))
            assert response.status == 200, await response.text()
        for _ in range(600):
            if await _metric(client, "entrepot_srmp_receipts_sent_total",
                             result="not_allowed") >= len(escapes):
                break
            await asyncio.sleep(0.05)
        assert await _metric(client, "entrepot_srmp_receipts_sent_total",
                             result="not_allowed") >= len(escapes)
        assert receiver.posts == []
    finally:
        await receiver.stop()


async def test_srmp_receipts_to_allowed_addresses_are_rate_limited(aiohttp_client: Any,
                                                                   tmp_path: Path) -> None:
    receiver = _Receiver()
    await receiver.start()
    try:
        client = await ready_client(aiohttp_client, _settings(
            tmp_path, allow=[receiver.url], receipts_rate=1, receipts_burst=2))
        to = "http://localhost/msmq/anon"
        for ordinal in range(1, 6):
            receipt = Services(durable=True, delivery_receipt_to=receiver.url + "/msmq/r")
            response = await post(client, user_message(to, b"m", ordinal=ordinal,
                                                       services=receipt))
            assert response.status == 200, await response.text()
        for _ in range(600):
            if await _metric(client, "entrepot_srmp_receipts_sent_total",
                             result="rate_limited") >= 1 and len(receiver.posts) >= 1:
                break
            await asyncio.sleep(0.05)
        assert await _metric(client, "entrepot_srmp_receipts_sent_total",
                             result="rate_limited") >= 1
        assert 1 <= len(receiver.posts) <= 4
    finally:
        await receiver.stop()


async def test_srmp_receipt_naming_an_internal_queue_is_refused(aiohttp_client: Any,
                                                                tmp_path: Path) -> None:
    client = await ready_client(aiohttp_client, _settings(tmp_path))
    base = "http://localhost/msmq"
    before = await _counts(client)
    for name in (*INTERNAL_QUEUES, "system$;deadletter"):
        receipt = Services(durable=True, delivery_receipt_to=f"{base}/{name}")
        response = await post(client, user_message(f"{base}/anon", b"x", ordinal=7,
                                                   services=receipt))
        assert response.status in (400, 403), (name, await response.text())
    assert await _counts(client) == before


def test_outbound_allow_is_validated() -> None:
    from gateway.errors import ConfigError

    with pytest.raises(ConfigError, match=r"outbound\.allow"):
        parse_settings({"outbound": {"allow": ["ftp://x/"]}})


@pytest.mark.parametrize("value", [
    "DIRECT=OS:.\\private$\\acme_in,DIRECT=OS:.\\private$\\entrepot_dedup$",
    "DIRECT=OS:.\\private$\\acme_in,DIRECT=OS:.\\system$;deadletter",
    "DIRECT=OS:.\\private$\\acme_in,DIRECT=OS:.\\private$\\other_in",
    "private$/acme_in,private$/other_in",
    "FORMATNAME:DIRECT=OS:.\\private$\\other_in",
    "http://localhost/msmq/private$/other_in",
    "DIRECT=HTTPS://10.0.0.5/msmq/x",
    "PUBLIC=00000000-0000-0000-0000-000000000001",
    "private$/acme_in private$/other_in",
])
async def test_every_form_of_a_response_queue_is_checked(aiohttp_client: Any, tmp_path: Path,
                                                          value: str) -> None:
    """A partner cannot hide a queue it may not use in a list, a prefix or a form the
    gateway does not parse: every element is checked, and what cannot be is refused."""
    client = await ready_client(aiohttp_client, _settings(tmp_path))
    before = await _counts(client)
    for path, extra in (("/v1/queues/private$/acme_in/messages", {}),
                        ("/v1/messages", {"Mq-Destination": "DIRECT=OS:.\\private$\\acme_in"})):
        response = await client.post(path, data=b"x", headers={
            **ACME, **extra, "Mq-Response-Queue": value})
        assert response.status in (400, 403), (value, path, await response.text())
    batch = {"messages": [{"queue": "private$/acme_in", "body_base64": "eA==",
                           "properties": {"response_queue": value}}]}
    response = await client.post("/v1/batch", json=batch, headers=ACME)
    assert response.status in (400, 403), (value, await response.text())
    assert await _counts(client) == before
    # A list of queues the partner may use is fine.
    response = await client.post("/v1/queues/private$/acme_in/messages", data=b"x", headers={
        **ACME, "Mq-Response-Queue": "DIRECT=OS:.\\private$\\acme_in,"
                                     "DIRECT=OS:.\\private$\\acme_acks"})
    assert response.status == 201, await response.text()
