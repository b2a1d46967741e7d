"""Links between real gateways on loopback: A sends to P directly and through a store-and-
forward gateway F; exactly once and in order, outgoing queues empty once stream receipts
come back; 400 and time-to-reach-queue expiry end in the dead-letter queues."""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.web.app import make_app
from gateway.web.appkeys import STATE_KEY
from gateway.settings import Settings, parse_settings
from tests.helpers import free_port

FAST = {"links.resend": ["1s"], "links.retry_max": "200ms", "links.request_timeout": "5s"}


@pytest.fixture
def gateway_factory(aiohttp_client: Any, tmp_path: Path) -> Callable[..., Any]:
    """A gateway app served on a known loopback port (so it knows its own URL). The ports
    are reserved up front so that each gateway can allow the others as outbound addresses
    (stream receipts go back to the sender's URL)."""
    ports: list[int] = []
    while len(ports) < 6:
        candidate = free_port()
        if candidate not in ports:
            ports.append(candidate)
    spare = list(ports)

    async def make(name: str, port: int = 0, doc: dict[str, Any] | None = None,
                   **overrides: Any) -> tuple[Any, int]:
        port = port or (spare.pop(0) if spare else free_port())
        dotted = {"store.data_dir": str(tmp_path / name), "server.listen": f"127.0.0.1:{port}",
                  "outbound.allow": [f"http://127.0.0.1:{p}" for p in ports],
                  **FAST, **{k.replace("__", "."): v for k, v in overrides.items()}}
        app = make_app(parse_settings(doc or {}, dotted))
        client = await aiohttp_client(app, server_kwargs={"port": port})
        for _ in range(3000):  # an upper bound only
            if app[STATE_KEY].ready:
                break
            await asyncio.sleep(0.01)
        return client, port

    make.spare = spare  # type: ignore[attr-defined]  # ports a test may name itself
    return make


async def _bodies(client: Any, queue: str) -> list[bytes]:
    found = await (await client.get(f"/v1/queues/{queue}/messages?limit=1000")).json()
    return [base64.b64decode(m["body_base64"]) for m in found["messages"]]


async def _until(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        result = await check()
        if result or asyncio.get_running_loop().time() > deadline:
            return result
        await asyncio.sleep(0.05)


async def _links(client: Any) -> list[dict[str, Any]]:
    return list((await (await client.get("/v1/links")).json())["links"])


async def _send(client: Any, destination: str, body: bytes, **headers: str) -> Any:
    response = await client.post("/v1/messages", data=body,
                                 headers={"Mq-Destination": destination, **headers})
    assert response.status == 201, await response.text()
    return response


async def test_a_to_p_exactly_once_in_order(gateway_factory: Callable[..., Any]) -> None:
    p, p_port = await gateway_factory("p")
    await p.put("/v1/queues/private$/orders", json={"transactional": True})
    await p.put("/v1/queues/plain", json={})
    a, _ = await gateway_factory("a")
    orders = f"DIRECT=HTTP://127.0.0.1:{p_port}/msmq/private$/orders"
    for n in range(40):
        await _send(a, orders, b"m%03d" % n, **{"Mq-Transaction": "single"})
    await _send(a, f"DIRECT=HTTP://127.0.0.1:{p_port}/msmq/plain", b"plain",
                **{"Mq-Journal": "journal"})
    expected = [b"m%03d" % n for n in range(40)]

    async def arrived() -> bool:
        return await _bodies(p, "private$/orders") == expected

    assert await _until(arrived), await _bodies(p, "private$/orders")
    assert await _until(lambda: _bodies(p, "plain")) == [b"plain"]
    # Positive source journaling: once delivered, a copy in A's machine journal.
    assert await _until(lambda: _bodies(a, "system$;journal")) == [b"plain"]

    async def drained() -> bool:
        return all(link["backlog"] == 0 and link["unacked"] == 0 for link in await _links(a))

    assert await _until(drained), await _links(a)
    [orders_link] = [x for x in await _links(a) if x["destination"].endswith("orders")]
    assert orders_link["stream"].startswith("uid:") and orders_link["state"] == "active"


async def test_refused_and_expired_messages_are_dead_lettered(
        gateway_factory: Callable[..., Any]) -> None:
    p, p_port = await gateway_factory("p")
    a, _ = await gateway_factory("a")
    await _send(a, f"DIRECT=HTTP://127.0.0.1:{p_port}/msmq/private$/missing", b"refused",
                **{"Mq-Journal": "deadletter"})
    dead_port = free_port()  # nothing listens there
    await _send(a, f"DIRECT=HTTP://127.0.0.1:{dead_port}/msmq/private$/q", b"expired",
                **{"Mq-Journal": "deadletter", "Mq-Time-To-Reach-Queue": "1",
                   "Mq-Transaction": "single"})

    async def dead() -> dict[str, str]:
        found = {}
        for queue in ("system$;deadletter", "system$;deadxact"):
            listing = await (await a.get(f"/v1/queues/{queue}/messages")).json()
            for m in listing["messages"]:
                found[base64.b64decode(m["body_base64"]).decode()] = m["class"]
        return found if len(found) == 2 else {}

    assert await _until(dead) == {"refused": "MQMSG_CLASS_NACK_BAD_DST_Q",
                                  "expired": "MQMSG_CLASS_NACK_REACH_QUEUE_TIMEOUT"}
    waiting = [x for x in await _links(a) if str(dead_port) in x["destination"]]
    assert waiting and waiting[0]["last_error"]


async def test_through_a_store_and_forward_gateway_with_order_acks_coming_back(
        gateway_factory: Callable[..., Any], tmp_path: Path) -> None:
    """The mission's picture: A sends to P through F (outbound redirection); A publishes F's
    logical receipt address; F forwards P's order acknowledgements to A's order queue."""
    p, p_port = await gateway_factory("p")
    await p.put("/v1/queues/private$/orders", json={"transactional": True})
    spare = gateway_factory.spare  # type: ignore[attr-defined]
    f_port, a_port = spare.pop(), spare.pop()
    f_map, a_map = tmp_path / "f-mapping", tmp_path / "a-mapping"
    f_map.mkdir()
    a_map.mkdir()
    (f_map / "acks.xml").write_text(
        '<redirections xmlns="msmq-queue-redirections.xml"><redirection>'
        f"<from>http://127.0.0.1:{f_port}/msmq/orderack</from>"
        f"<to>http://127.0.0.1:{a_port}/msmq/private$/order_queue$</to>"
        "</redirection></redirections>")
    (a_map / "out.xml").write_text(
        '<outbound_redirections xmlns="msmq_outbound_mapping.xml"><redirection>'
        f"<destination>http://127.0.0.1:{p_port}/*</destination>"
        f"<through>http://127.0.0.1:{f_port}/msmq</through></redirection>"
        "</outbound_redirections>")
    (a_map / "receipts.xml").write_text(
        '<StreamReceiptSetup xmlns="msmq-streamreceipt-mapping.xml"><setup>'
        f"<LogicalAddress>http://127.0.0.1:{p_port}/*</LogicalAddress>"
        f"<StreamReceiptURL>http://127.0.0.1:{f_port}/msmq/orderack</StreamReceiptURL>"
        "</setup></StreamReceiptSetup>")
    f, _ = await gateway_factory("f", f_port, srmp__forward=True, mapping__dir=str(f_map))
    a, _ = await gateway_factory("a", a_port, mapping__dir=str(a_map))
    orders = f"DIRECT=HTTP://127.0.0.1:{p_port}/msmq/private$/orders"
    for n in range(30):
        await _send(a, orders, b"t%02d" % n, **{"Mq-Transaction": "single"})
    expected = [b"t%02d" % n for n in range(30)]
    assert await _until(lambda: _eq(_bodies(p, "private$/orders"), expected))

    async def a_drained() -> bool:
        links = await _links(a)
        return bool(links) and all(x["backlog"] == 0 and x["unacked"] == 0 for x in links)

    assert await _until(a_drained), await _links(a)
    f_links = await _links(f)  # F forwarded both ways (to P, and acks to A), kept nothing
    assert {x["destination"].split("/")[2] for x in f_links} == {
        f"127.0.0.1:{p_port}", f"127.0.0.1:{a_port}"}
    assert all(x["backlog"] == 0 and x["sent"] > 0 for x in f_links), f_links
    assert await _bodies(a, "system$;deadxact") == []


async def _eq(got: Any, expected: list[bytes]) -> bool:
    return bool(await got == expected)


async def test_idempotency_key_for_remote_destinations(gateway_factory: Callable[..., Any]
                                                       ) -> None:
    a, _ = await gateway_factory("a")
    destination = f"DIRECT=HTTP://127.0.0.1:{free_port()}/msmq/private$/q"  # nobody there
    first = await (await _send(a, destination, b"once", **{"Idempotency-Key": "k1"})).json()
    again = await (await _send(a, destination, b"once", **{"Idempotency-Key": "k1"})).json()
    assert first == again and len(first["messages"]) == 1
    [link] = await _links(a)
    assert link["backlog"] == 1


async def test_order_acks_at_a_published_logical_address_advance_the_sender(
        gateway_factory: Callable[..., Any], tmp_path: Path) -> None:
    """Stream-receipt mapping end to end: a setup publishes a logical URL on this gateway as
    sendReceiptsTo; order acknowledgements arriving there reach the order queue and move
    the stream on (nothing else maps that URL)."""
    p, p_port = await gateway_factory("p")
    await p.put("/v1/queues/private$/orders", json={"transactional": True})
    a_port = gateway_factory.spare.pop()  # type: ignore[attr-defined]
    mapping = tmp_path / "a-mapping"
    mapping.mkdir()
    (mapping / "receipts.xml").write_text(
        '<StreamReceiptSetup xmlns="msmq-streamreceipt-mapping.xml"><setup>'
        f"<LogicalAddress>http://127.0.0.1:{p_port}/*</LogicalAddress>"
        f"<StreamReceiptURL>http://127.0.0.1:{a_port}/msmq/logical/orderack</StreamReceiptURL>"
        "</setup></StreamReceiptSetup>")
    a, _ = await gateway_factory("a", a_port, mapping__dir=str(mapping))
    for n in range(5):
        await _send(a, f"DIRECT=HTTP://127.0.0.1:{p_port}/msmq/private$/orders", b"%d" % n,
                    **{"Mq-Transaction": "single"})

    async def drained() -> bool:
        links = await _links(a)
        return bool(links) and links[0]["backlog"] == 0

    assert await _until(drained), await _links(a)
    metrics = await (await a.get("/metrics")).text()
    assert 'entrepot_srmp_messages_total{kind="stream_receipt",outcome="stream_advanced"}' \
        in metrics


async def test_a_receiver_that_lost_the_stream_gets_a_new_one(
        gateway_factory: Callable[..., Any], tmp_path: Path) -> None:
    """(docs/srmp.md, "Exactly-once in-order delivery: sender".) P acknowledged message 1
    of a stream, message 2 is still on its way, and P's
    data is lost (a new install at the same address). P refuses number 2 of a stream it does
    not know; A moves the waiting message to a new stream, which P takes."""
    from tests.fault.proxy import FaultProxy

    spare = gateway_factory.spare  # type: ignore[attr-defined]
    p_port, proxy_port = spare.pop(), spare.pop()
    p, _ = await gateway_factory("p", p_port)
    await p.put("/v1/queues/private$/orders", json={"transactional": True})
    proxy = FaultProxy(f"http://127.0.0.1:{p_port}")
    await proxy.start(proxy_port)
    mapping = tmp_path / "a-mapping"
    mapping.mkdir()
    (mapping / "out.xml").write_text(
        '<outbound_redirections xmlns="msmq_outbound_mapping.xml"><redirection>'
        f"<destination>http://127.0.0.1:{p_port}/*</destination>"
        f"<through>http://127.0.0.1:{proxy_port}/msmq</through></redirection>"
        "</outbound_redirections>")
    try:
        a, _ = await gateway_factory("a", mapping__dir=str(mapping))
        orders = f"DIRECT=HTTP://127.0.0.1:{p_port}/msmq/private$/orders"
        await _send(a, orders, b"one", **{"Mq-Transaction": "single"})
        assert await _until(lambda: _eq(_bodies(p, "private$/orders"), [b"one"]))
        proxy.drop = 1.0  # number 2 does not get through for now
        await _send(a, orders, b"two", **{"Mq-Transaction": "single"})

        async def one_acked() -> bool:
            links = await _links(a)
            return bool(links) and links[0]["backlog"] == 1 and links[0]["unacked"] == 1

        assert await _until(one_acked), await _links(a)
        first_stream = (await _links(a))[0]["stream"]
        await p.close()
        fresh, _ = await gateway_factory("p-fresh", p_port)
        await fresh.put("/v1/queues/private$/orders", json={"transactional": True})
        proxy.drop = 0.0
        assert await _until(lambda: _eq(_bodies(fresh, "private$/orders"), [b"two"]))

        async def drained() -> bool:
            links = await _links(a)
            return links[0]["backlog"] == 0

        assert await _until(drained)
        assert (await _links(a))[0]["stream"] != first_stream
    finally:
        await proxy.stop()


async def test_final_stream_receipts_settle_dead_letter_messages(
        gateway_factory: Callable[..., Any]) -> None:
    """(docs/srmp.md, "Final stream receipts".) A stream message with DeadLetter/ stays in
    A's outgoing queue after its stream receipt, until P's final receipt says how it left P's
    queue: read -> removed, purged -> A's system$;deadxact with the receipt's class."""
    p, p_port = await gateway_factory("p")
    await p.put("/v1/queues/private$/orders", json={"transactional": True})
    a, _ = await gateway_factory("a")
    orders = f"DIRECT=HTTP://127.0.0.1:{p_port}/msmq/private$/orders"

    async def kept(count: int) -> bool:
        links = await _links(a)
        return bool(links) and links[0]["backlog"] == count and links[0]["unacked"] == 0

    for body, settle in ((b"read", "receive"), (b"purged", "purge")):
        await _send(a, orders, body, **{"Mq-Transaction": "single",
                                        "Mq-Journal": "deadletter"})
        assert await _until(lambda: _eq(_bodies(p, "private$/orders"), [body]))
        assert await _until(lambda: kept(1)), await _links(a)  # acknowledged, still kept
        assert (await p.post(f"/v1/queues/private$/orders/{settle}")).status == 200
        assert await _until(lambda: kept(0)), await _links(a)
    dead = await (await a.get("/v1/queues/system$;deadxact/messages")).json()
    assert [(base64.b64decode(m["body_base64"]), m["class"]) for m in dead["messages"]] == [
        (b"purged", "MQMSG_CLASS_NACK_Q_PURGED")]


async def test_webhook_link_posts_signed_messages_in_order(
        gateway_factory: Callable[..., Any], aiohttp_server: Any, tmp_path: Path) -> None:
    """A partner that is not a queue manager: each message POSTed as it is, properties as
    headers, signed with the shared secret, in order; a 4xx sends it to the dead letters."""
    from aiohttp import web

    from gateway.auth.hmac_sig import parse_authorization, verify

    secret = b"webhook-secret-0123456789"
    (tmp_path / "hook.secret").write_bytes(secret)
    got: list[tuple[bytes, str]] = []

    async def hook(request: web.Request) -> web.Response:
        body = await request.read()
        signed = parse_authorization(request.headers["Authorization"])
        verify(signed, secret, method="POST", path_qs=request.path_qs, body=body,
               headers=request.headers.items(), now=time.time(), window_s=300)
        if body == b"refuse me":
            return web.Response(status=422)
        got.append((body, request.headers["Mq-Label"]))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hooks/orders", hook)
    server = await aiohttp_server(app)
    a, _ = await gateway_factory("a", doc={"webhooks": [{
        "url": f"http://127.0.0.1:{server.port}/hooks/*", "name": "a-gateway",
        "hmac_secret_file": str(tmp_path / "hook.secret")}]})
    destination = f"DIRECT=HTTP://127.0.0.1:{server.port}/hooks/orders"
    for n in range(5):
        await _send(a, destination, b"order %d" % n, **{"Mq-Label": f"L{n}",
                                                         "Mq-Transaction": "single"})
    await _send(a, destination, b"refuse me", **{"Mq-Journal": "deadletter"})

    async def delivered() -> bool:
        return len(got) == 5

    assert await _until(delivered)
    assert got == [(b"order %d" % n, f"L{n}") for n in range(5)]
    assert await _until(lambda: _eq(_bodies(a, "system$;deadletter"), [b"refuse me"]))


async def test_explicit_transaction_with_a_remote_destination(
        gateway_factory: Callable[..., Any]) -> None:
    p, p_port = await gateway_factory("p")
    await p.put("/v1/queues/private$/orders", json={"transactional": True})
    a, _ = await gateway_factory("a")
    await a.put("/v1/queues/private$/audit", json={"transactional": True})
    orders = f"DIRECT=HTTP://127.0.0.1:{p_port}/msmq/private$/orders"
    both = f"{orders},DIRECT=OS:.\\private$\\audit"

    async def in_tx(tx: str, body: bytes) -> None:
        response = await a.post("/v1/messages", data=body,
                                headers={"Mq-Destination": both, "Mq-Transaction": tx})
        assert response.status == 202, await response.text()

    aborted = (await (await a.post("/v1/transactions")).json())["id"]
    await in_tx(aborted, b"never")
    assert (await a.post(f"/v1/transactions/{aborted}/abort")).status == 200
    tx = (await (await a.post("/v1/transactions")).json())["id"]
    await in_tx(tx, b"t1")
    await in_tx(tx, b"t2")
    await asyncio.sleep(0.5)
    assert await _bodies(p, "private$/orders") == [], "nothing leaves before the commit"
    committed = await (await a.post(f"/v1/transactions/{tx}/commit")).json()
    assert [m["queue"] for m in committed["messages"]].count(
        f"http://127.0.0.1:{p_port}/msmq/private$/orders") == 2
    assert await _until(lambda: _equal(p, "private$/orders", [b"t1", b"t2"]))
    assert await _bodies(a, "private$/audit") == [b"t1", b"t2"]
    assert await _until(lambda: _drained(a))


async def _equal(client: Any, queue: str, expected: list[bytes]) -> bool:
    return await _bodies(client, queue) == expected


async def _drained(client: Any) -> bool:
    return all(link["backlog"] == 0 for link in await _links(client))


async def test_a_paused_link_shows_paused_whatever_a_send_in_flight_reports(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    """A send that was in flight when the link was paused ends later and sets the link's
    state ("waiting to connect" after a failed connection): /v1/links still says paused."""
    from tests.helpers import ready_client
    client = await ready_client(aiohttp_client, settings_factory())
    response = await client.post("/v1/messages", data=b"far", headers={
        "Mq-Transaction": "single",
        "Mq-Destination": "DIRECT=HTTP://127.0.0.1:1/msmq/private$/far"})
    assert response.status == 201
    [summary] = (await (await client.get("/v1/links")).json())["links"]
    assert (await client.post(f"/v1/links/{summary['id']}/pause")).status == 200
    link = client.server.app[STATE_KEY].serving().links.find(summary["id"])
    link.state = "waiting to connect"  # what the send in flight does when it fails
    [summary] = (await (await client.get("/v1/links")).json())["links"]
    assert summary["state"] == "paused"
    assert (await client.post(f"/v1/links/{summary['id']}/resume")).status == 200
    [summary] = (await (await client.get("/v1/links")).json())["links"]
    assert summary["state"] != "paused"


async def test_a_failing_link_logs_one_warning_while_it_retries(
        gateway_factory: Callable[..., Any], caplog: pytest.LogCaptureFixture) -> None:
    """A link whose destination does not answer says so at WARNING once, naming the
    destination and the back-off, not once per attempt."""
    import logging

    caplog.set_level(logging.INFO, logger="gateway")
    a, _ = await gateway_factory("a")
    dead_port = free_port()  # nothing listens there
    await _send(a, f"DIRECT=HTTP://127.0.0.1:{dead_port}/msmq/private$/q", b"x")

    async def retried() -> bool:
        return any(x["retries"] >= 4 for x in await _links(a))

    assert await _until(retried), await _links(a)
    warnings = [r.getMessage() for r in caplog.records
                if r.levelno >= logging.WARNING and "link to" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert f"127.0.0.1:{dead_port}" in warnings[0] and "back-off" in warnings[0]
