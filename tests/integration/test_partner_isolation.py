"""What one partner does cannot block, reveal or forge what another does: idempotency keys
live in each principal's own space; stream receipts are taken only from senders that may
send to the order queue."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from gateway.settings import parse_settings
from tests.helpers import ready_client


def _sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _settings(tmp_path: Path) -> Any:
    return parse_settings({
        "store": {"data_dir": str(tmp_path / "data")},
        "auth": {"admin_key_sha256": _sha("admin-key")},
        "partners": [
            {"name": "a", "api_key_sha256": _sha("a-key"), "send": ["private$/a_*"],
             "receive": ["private$/a_*"]},
            {"name": "b", "api_key_sha256": _sha("b-key"), "send": ["private$/b_*"],
             "receive": ["private$/b_*"]}],
        "queues": [{"path": "private$/a_in"}, {"path": "private$/b_in"},
                   {"path": "private$/a_tx", "transactional": True}],
    })


async def test_idempotency_keys_are_per_principal(aiohttp_client: Any, tmp_path: Path) -> None:
    client = await ready_client(aiohttp_client, _settings(tmp_path))
    a = {"Authorization": "Bearer a-key", "Idempotency-Key": "order-42"}
    b = {"Authorization": "Bearer b-key", "Idempotency-Key": "order-42"}
    first = await client.post("/v1/queues/private$/b_in/messages", data=b"b's", headers=b)
    assert first.status == 201, await first.text()
    # The same key from A, another body and queue: A's own first use, stored.
    mine = await client.post("/v1/queues/private$/a_in/messages", data=b"a's", headers=a)
    assert mine.status == 201, await mine.text()
    assert (await mine.json())["id"] != (await first.json())["id"]
    # Within A's space the key still works: a retry is answered with the first answer.
    again = await client.post("/v1/queues/private$/a_in/messages", data=b"a's", headers=a)
    assert again.status == 201 and await again.json() == await mine.json()
    for queue, key in (("private$/a_in", "a-key"), ("private$/b_in", "b-key")):
        shown = await (await client.get(f"/v1/queues/{queue}",
                                        headers={"Authorization": f"Bearer {key}"})).json()
        assert shown["messages"] == 1, shown
    # Through the format-name route too.
    response = await client.post("/v1/messages", data=b"a2", headers={
        **a, "Idempotency-Key": "order-43", "Mq-Destination": "DIRECT=OS:.\\private$\\a_in"})
    assert response.status == 201
    response = await client.post("/v1/messages", data=b"b2", headers={
        **b, "Idempotency-Key": "order-43", "Mq-Destination": "DIRECT=OS:.\\private$\\b_in"})
    assert response.status == 201, await response.text()


async def test_a_stream_receipt_is_taken_only_from_who_may_send_order_acks(
        aiohttp_client: Any, tmp_path: Path) -> None:
    """A sender outside ``srmp.allow_networks`` that may post to an anonymous queue cannot
    acknowledge one of our outgoing streams by addressing its receipt to that queue."""
    import asyncio

    from aiohttp import web

    from gateway.srmp.build import build_request
    from gateway.srmp.receipts import stream_receipt

    async def never_acknowledges(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=200)

    peer = web.Application()
    peer.router.add_post("/{tail:.*}", never_acknowledges)
    runner = web.AppRunner(peer)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    peer_port = runner.addresses[0][1]
    try:
        settings = parse_settings({
            "store": {"data_dir": str(tmp_path / "data")},
            "srmp": {"allow_networks": ["10.0.0.0/8"]},
            "queues": [{"path": "anonq", "anonymous": True}]})
        client = await ready_client(aiohttp_client, settings)
        response = await client.post("/v1/messages", data=b"x", headers={
            "Mq-Destination": f"DIRECT=HTTP://127.0.0.1:{peer_port}/msmq/private$/orders",
            "Mq-Transaction": "single"})
        assert response.status == 201, await response.text()
        links: list[dict[str, Any]] = []
        for _ in range(1200):
            links = (await (await client.get("/v1/links")).json())["links"]
            if links and links[0].get("unacked") == 1 and links[0].get("stream"):
                break
            await asyncio.sleep(0.05)
        assert links and links[0]["unacked"] == 1, links
        forged = stream_receipt(stream_id=links[0]["stream"], last_ordinal=1,
                                send_to="http://localhost/msmq/anonq", queue_url="",
                                qm_guid="4a85b192-3ccd-4ba2-a0ac-7f0a11be1b08", ordinal=5,
                                now_s=1_900_000_000)
        request = build_request(forged, None, host="localhost", path="/msmq/anonq")
        headers = {k: v for k, v in request.headers if k not in ("Host", "Content-Length")}
        response = await client.post("/msmq/anonq", data=request.body, headers=headers)
        # 403 as any access refusal of SRMP's (docs/srmp.md), not the 400 of a bad request.
        assert response.status == 403, await response.text()
        assert (await response.json())["type"].endswith("/MQ_ERROR_ACCESS_DENIED")
        links = (await (await client.get("/v1/links")).json())["links"]
        assert links[0]["unacked"] == 1, links
    finally:
        await runner.cleanup()


async def test_deleting_a_queue_a_prepared_transaction_receives_from_is_409(
        aiohttp_client: Any, tmp_path: Path) -> None:
    client = await ready_client(aiohttp_client, _settings(tmp_path))
    admin = {"Authorization": "Bearer admin-key"}
    assert (await client.post("/v1/queues/private$/a_tx/messages", data=b"held",
                              headers={**admin, "Mq-Transaction": "single"})).status == 201
    tx = (await (await client.post("/v1/transactions", headers=admin)).json())["id"]
    got = await client.post("/v1/queues/private$/a_tx/receive",
                            headers={**admin, "Mq-Transaction": tx})
    answer = await got.json()
    assert got.status == 200 and len(answer["messages"]) == 1, answer
    assert (await client.post(f"/v1/transactions/{tx}/prepare", headers=admin)).status == 200
    response = await client.delete("/v1/queues/private$/a_tx", headers=admin)
    assert response.status == 409, await response.text()
    assert (await client.post(f"/v1/transactions/{tx}/abort", headers=admin)).status == 200
    shown = await (await client.get("/v1/queues/private$/a_tx", headers=admin)).json()
    assert shown["messages"] == 1
    assert (await client.delete("/v1/queues/private$/a_tx", headers=admin)).status == 204


async def test_a_sender_cannot_pre_claim_another_senders_message_id(aiohttp_client: Any,
                                                                    tmp_path: Path) -> None:
    """MSMQ ids are a queue manager's GUID and a counter, both easy to guess: a message an
    anonymous sender (no certificate, outside srmp.allow_networks) posts first under a
    victim's id with another body must not make the victim's real message a duplicate. A
    resend (same id, same body) still is one, also after a restart."""
    from tests.srmp_client import post, user_message

    settings = parse_settings({"store": {"data_dir": str(tmp_path / "data")},
                               "srmp": {"allow_networks": ["10.0.0.0/8"]},
                               "queues": [{"path": "anonq", "anonymous": True}]})
    client = await ready_client(aiohttp_client, settings)
    to = "http://localhost/msmq/anonq"
    forged = user_message(to, b"FORGED", ordinal=777)
    real = user_message(to, b"REAL", ordinal=777)
    assert (await post(client, forged)).status == 200
    assert (await post(client, real)).status == 200
    assert (await post(client, real)).status == 200  # the real sender's resend
    await client.close()
    again = await ready_client(aiohttp_client, settings)
    assert (await post(again, real)).status == 200  # and after a restart
    page = await (await again.get("/v1/queues/anonq/messages")).json()
    import base64
    bodies = sorted(base64.b64decode(m["body_base64"]) for m in page["messages"])
    assert bodies == [b"FORGED", b"REAL"]
