"""MSMQ interoperability of the SRMP front door on a real server on loopback (issue 31):
receipt URLs with a query string, one id sent to several queues, messages already expired
when they arrive."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gateway.settings import Settings
from gateway.srmp.build import SrmpRequest, build_request
from gateway.srmp.model import (
    INFINITE_TEXT,
    Envelope,
    MsmqHeader,
    Path as SrmpPath,
    Services,
    Stream,
    format_srmp_time,
)
from gateway.srmp.receipts import stream_receipt
from tests.helpers import ready_client
from tests.srmp_client import SENDER_QM, STREAM_ID, post

RECEIPT_URL = "http://machine1/msmq/private$/receipts?SenderStream=XRntV"  # V09, V10
EXPIRED = "20070609T164419"  # the spec's own dates: long past


@pytest.fixture
def make_client(aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> Any:
    async def make(**overrides: Any) -> Any:
        overrides.setdefault("server__names", ["machine1", "machine2"])
        client = await ready_client(aiohttp_client, settings_factory(**overrides))
        for name, tx in (("private$/receipts", False), ("private$/a", False),
                         ("private$/b", False), ("private$/admin", False),
                         ("private$/orders", True)):
            assert (await client.put(f"/v1/queues/{name}",
                                     json={"transactional": tx})).status in (200, 201)
        return client
    return make


def _message(to: str, body: bytes, *, ordinal: int, expires_at: str = INFINITE_TEXT,
             services: Services | None = None, dead_letter: bool = False,
             stream: Stream | None = None, destination_mqf: str | None = None
             ) -> SrmpRequest:
    """A user message as a Windows QM sends it (V02's shape)."""
    sent = 1_900_000_000
    envelope = Envelope(
        path=SrmpPath(action="MSMQ:interop", to=to, id=f"uuid:{ordinal}@{SENDER_QM}"),
        expires_at=expires_at, sent_at=format_srmp_time(sent),
        services=services or Services(durable=True), stream=stream,
        msmq=MsmqHeader(message_class=0, priority=0 if stream else 3, dead_letter=dead_letter,
                        correlation="AAAAAAAAAAAAAAAAAAAAAAAAAAA=", app=0, body_type=0,
                        hash_algorithm=32772, source_qm=SENDER_QM,
                        destination_mqf=destination_mqf,
                        ttrq=format_srmp_time(sent + 4 * 86400)))
    path = "/" + to.split("/", 3)[3]
    return build_request(envelope, body, host=to.split("/")[2], path=path,
                         boundary_number=ordinal)


async def _messages(client: Any, queue: str) -> list[dict[str, Any]]:
    response = await client.get(f"/v1/queues/{queue}/messages?limit=100")
    assert response.status == 200, await response.text()
    return list((await response.json())["messages"])


async def _metric(client: Any, line_start: str) -> float:
    text = await (await client.get("/metrics")).text()
    for line in text.splitlines():
        if line.startswith(line_start + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def _until(check: Callable[[], Any], limit_s: float = 60.0) -> Any:
    """Polls ``check`` until it is true; a generous limit turns a hang into a failure."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while not (result := await check()):
        assert asyncio.get_running_loop().time() < deadline, f"still not true: {check}"
        await asyncio.sleep(0.02)
    return result


# ---- item 3: a receipt URL with a query string ----------------------------------------------

async def test_a_query_string_is_not_part_of_the_queue_name(make_client: Any) -> None:
    """V10's stream receipt goes to ``.../receipts?SenderStream=XRntV``: the queue is the
    path; the query stays with the message."""
    client = await make_client()
    receipt = stream_receipt(stream_id=STREAM_ID, last_ordinal=3, send_to=RECEIPT_URL,
                             queue_url="http://far/msmq/private$/orders", qm_guid=SENDER_QM,
                             ordinal=7, now_s=1_900_000_000)
    request = build_request(receipt, None, host="machine1",
                            path="/msmq/private$/receipts?SenderStream=XRntV")
    response = await post(client, request)
    assert response.status == 200, await response.text()
    user = _message(RECEIPT_URL, b"hello", ordinal=8)
    response = await post(client, user)
    assert response.status == 200, await response.text()
    stored = await _messages(client, "private$/receipts")
    assert [m["class"] for m in stored] == ["MQMSG_CLASS_ORDER_ACK", "MQMSG_CLASS_NORMAL"]
    for message in stored:
        assert message["properties"]["srmp_query"] == "SenderStream=XRntV"
        assert message["properties"]["srmp_to"] == RECEIPT_URL


async def test_a_stream_receipt_url_leads_to_the_order_queue_with_or_without_its_query(
        make_client: Any, tmp_path: Path) -> None:
    mapping = tmp_path / "mapping"
    mapping.mkdir()
    (mapping / "receipts.xml").write_text(
        '<StreamReceiptSetup xmlns="msmq-streamreceipt-mapping.xml"><setup>'
        "<LogicalAddress>http://partner/msmq/*</LogicalAddress>"
        f"<StreamReceiptURL>{RECEIPT_URL}</StreamReceiptURL>"
        "</setup></StreamReceiptSetup>")
    client = await make_client(mapping__dir=str(mapping))
    for ordinal, to in ((1, RECEIPT_URL), (2, RECEIPT_URL.partition("?")[0])):
        response = await post(client, _message(to, b"ack %d" % ordinal, ordinal=ordinal))
        assert response.status == 200, await response.text()
    assert len(await _messages(client, "private$/order_queue$")) == 2
    assert await _messages(client, "private$/receipts") == []


# ---- item 4: one id to several destinations ---------------------------------------------------

async def test_one_id_sent_to_each_queue_of_a_destination_list_is_stored_in_each(
        make_client: Any) -> None:
    """MSMQ sends a message with DestinationMqf once per destination, with the same id."""
    client = await make_client()
    a, b = "http://machine2/msmq/private$/a", "http://machine2/msmq/private$/b"
    for to in (a, b, b, a):  # each copy, then a resend of each
        request = _message(to, b"to both", ordinal=42, destination_mqf=f"{a} {b}")
        response = await post(client, request)
        assert response.status == 200, await response.text()
    for queue in ("private$/a", "private$/b"):
        [message] = await _messages(client, queue)
        assert message["id"] == "{%s}\\42" % SENDER_QM
    assert await _metric(client, 'entrepot_srmp_messages_total{kind="user",outcome="stored"}'
                         ) == 2
    assert await _metric(client,
                         'entrepot_srmp_messages_total{kind="user",outcome="duplicate"}') == 2


# ---- item 5: expired on arrival -----------------------------------------------------------------

@pytest.mark.parametrize("when", ["19691231T235959", "00010101T000000"])
async def test_a_deadline_before_1970_is_past_and_the_store_goes_on(
        make_client: Any, when: str) -> None:
    """expiresAt (and TTRQ) reach back to year 1. Such a message has already expired: it is
    stored and dead-lettered as any expired one. (Its deadline, negative in ms since 1970,
    once reached the store's record header and stopped every write until a restart.)"""
    client = await make_client()
    request = _message("http://machine2/msmq/private$/a", b"from the past", ordinal=61,
                       expires_at=when, dead_letter=True)
    request = replace(request, body=request.body.replace(
        b"<TTrq>" + format_srmp_time(1_900_000_000 + 4 * 86400).encode() + b"</TTrq>",
        b"<TTrq>" + when.encode() + b"</TTrq>"))
    assert b"<TTrq>" + when.encode() in request.body
    response = await post(client, request)
    assert response.status == 200, await response.text()
    [letter] = await _until(lambda: _messages(client, "system$;deadletter"))
    assert letter["id"] == "{%s}\\61" % SENDER_QM
    assert (await client.get("/readyz")).status == 200
    assert (await client.post("/v1/queues/private$/a/messages", data=b"after")).status == 201


async def test_a_message_expired_on_arrival_is_stored_then_dead_lettered_and_counted(
        make_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Expiry is not checked on receipt ([MC-MQSRM] §3.1.5.1.4): stored, then it expires in the
    queue and goes where MSMQ sends expired messages; never silently gone after a 200."""
    caplog.set_level(logging.INFO, logger="gateway")
    client = await make_client()
    admin = "http://machine1/msmq/private$/admin"
    asks = Services(durable=True, commitment_receipt_to=admin, negative_only=True)
    kept = _message("http://machine2/msmq/private$/a", b"dead-letter me", ordinal=51,
                    expires_at=EXPIRED, services=asks, dead_letter=True)
    plain = _message("http://machine2/msmq/private$/b", b"no copy asked", ordinal=52,
                     expires_at=EXPIRED)
    stream = _message("http://machine2/msmq/private$/orders", b"in a stream", ordinal=53,
                      expires_at=EXPIRED, dead_letter=True,
                      stream=Stream(STREAM_ID, 1, None, "http://machine1/msmq/order_queue$"))
    for request in (kept, plain, stream):
        response = await post(client, request)
        assert response.status == 200, await response.text()

    async def dead() -> list[dict[str, Any]] | None:
        found = (await _messages(client, "system$;deadletter")
                 + await _messages(client, "system$;deadxact"))
        return found if len(found) == 2 else None

    letters = await _until(dead)
    assert sorted(m["id"] for m in letters) == ["{%s}\\51" % SENDER_QM, "{%s}\\53" % SENDER_QM]
    for letter in letters:
        assert letter["properties"]["dead_letter_class"] == "MQMSG_CLASS_NACK_RECEIVE_TIMEOUT"
    [nack] = await _until(lambda: _messages(client, "private$/admin"))
    assert nack["class"] == "MQMSG_CLASS_NACK_RECEIVE_TIMEOUT"
    assert nack["correlation_id"] == "{%s}\\51" % SENDER_QM

    async def counted() -> bool:
        return (await _metric(client, 'entrepot_messages_expired_total{outcome="discarded"}')
                == 1)

    await _until(counted)
    assert await _metric(client,
                         'entrepot_messages_expired_total{outcome="dead_lettered"}') == 2
    assert await _messages(client, "private$/b") == []
    logged = [r for r in caplog.records if "expired in" in r.getMessage()]
    by_id = {r.getMessage().split()[1]: r for r in logged}
    assert by_id["{%s}\\52" % SENDER_QM].levelno == logging.WARNING  # gone without a copy
    assert "private$/b" in by_id["{%s}\\52" % SENDER_QM].getMessage()
    assert by_id["{%s}\\51" % SENDER_QM].levelno == logging.INFO
