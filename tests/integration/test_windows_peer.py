"""A Windows peer against the real server on loopback: the spec's vectors replayed in order,
out of order and duplicated, messages sent to a stand-in Windows queue manager, and on
everything that comes back the checks a Windows QM makes: ids ``uuid:N@GUID`` with N 32-bit,
a receipt's Correlation equal to the original id byte for byte, the receipts' element order
of the spec examples (V05, V07), ``http://`` in lower case, the headers Windows sends.

The stand-in parses with lxml, not with the gateway's codec, so the checks do not share the
gateway's reading of the bytes.
"""

from __future__ import annotations

import asyncio
import base64
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from lxml import etree

from gateway.web.app import make_app
from gateway.web.appkeys import STATE_KEY
from gateway.settings import parse_settings
from gateway.srmp.build import build_request
from gateway.srmp.codec import parse_request
from gateway.srmp.model import Services
from tests.helpers import free_port
from tests.srmp_client import STREAM_ID, stream_message
from tests.srmp_vectors import Request, derived, split_request, wire

SE = "{http://schemas.xmlsoap.org/soap/envelope/}"
RP = "{http://schemas.xmlsoap.org/rp/}"
SRMP = "{http://schemas.xmlsoap.org/srmp/}"
MSMQ = "{msmq.namespace.xml}"
_ID = re.compile(r"^uuid:(\d+)@([0-9a-f]{8}-(?:[0-9a-f]{4}-){3}[0-9a-f]{12})$")
ORDINAL_MAX = 0xFFFFFFFF
FAST = {"links.resend": ["1s"], "links.retry_max": "200ms", "links.request_timeout": "5s"}
# The order of the spec's receipts (V05, V07): what a Windows receiver sees from Windows.
RECEIPT_PATH = ["action", "to", "rev", "id"]
RECEIPT_MSMQ = ["Class", "Priority", "Correlation", "App", "BodyType", "HashAlgorithm",
                "SourceQmGuid", "TTrq"]


@dataclass
class Got:
    path: str
    headers: dict[str, str]
    envelope: etree._Element
    envelope_raw: bytes


def objectid(message_id: str) -> bytes:
    """The 20-byte OBJECTID Windows keeps for ``uuid:N@GUID`` (GUID + 32-bit LE counter)."""
    match = _ID.match(message_id)
    assert match is not None, f"{message_id!r} is not uuid:N@GUID"
    ordinal = int(match.group(1))
    assert 1 <= ordinal <= ORDINAL_MAX, f"{message_id}: N does not fit MSMQ's 32 bits"
    return uuid.UUID(match.group(2)).bytes_le + ordinal.to_bytes(4, "little")


def _local(element: etree._Element) -> str:
    return etree.QName(element).localname


def _text(envelope: etree._Element, path: str) -> str:
    found = envelope.find(path)
    assert found is not None, path
    return found.text or ""


class WindowsPeer:
    """A stand-in Windows QM: takes SRMP posts, answers 200 with no body like IIS (V04), and
    keeps what came with its envelope parsed."""

    def __init__(self) -> None:
        self.got: list[Got] = []
        self.arrived = asyncio.Event()

    async def take(self, request: web.Request) -> web.Response:
        raw = await request.read()
        message = parse_request(request.headers["Content-Type"], raw)
        self.got.append(Got(request.path_qs, dict(request.headers),
                            etree.fromstring(message.envelope_raw), message.envelope_raw))
        self.arrived.set()
        return web.Response(status=200)

    async def wait_for(self, count: int) -> list[Got]:
        """Once ``count`` posts came (a generous limit turns a hang into a failure)."""
        async with asyncio.timeout(60):
            while len(self.got) < count:
                self.arrived.clear()
                await self.arrived.wait()
        return list(self.got)


def windows_checks(got: Got, sender_guid: str) -> None:
    """What a Windows QM checks on a message or receipt from this gateway."""
    headers = {k.lower(): v for k, v in got.headers.items()}
    assert "accept-encoding" not in headers, headers  # Windows sends none
    assert headers["soapaction"] == '"MSMQMessage"'
    assert headers["user-agent"].startswith("entrepot/")
    env = got.envelope
    header = env.find(f"{SE}Header")
    assert header is not None
    message_id = _text(header, f"{RP}path/{RP}id")
    objectid(message_id)  # uuid:N@GUID, N 32-bit
    assert message_id.endswith("@" + sender_guid)
    # URLs as in every spec example: lower-case scheme.
    assert b"HTTP://" not in got.envelope_raw and b"HTTPS://" not in got.envelope_raw
    msmq = header.find(f"{MSMQ}Msmq")
    assert msmq is not None
    names = [_local(e) for e in msmq]
    for always in ("Correlation", "App", "HashAlgorithm"):
        assert always in names, names  # written even when zero, as Windows does (V02, V05)
    receipt = [_local(e) for e in header if _local(e) in (
        "deliveryReceipt", "commitmentReceipt", "streamReceipt")]
    if receipt:
        path = header.find(f"{RP}path")
        assert path is not None
        assert [_local(e) for e in path] == RECEIPT_PATH
        assert [_local(e) for e in header] == ["path", "properties", *receipt, "Msmq"]
        assert names == RECEIPT_MSMQ


@pytest.fixture
def gateway_factory(aiohttp_client: Any, tmp_path: Path) -> Callable[..., Any]:
    """A gateway app served on a known loopback port (so it knows its own URL)."""

    async def make(name: str, **overrides: Any) -> tuple[Any, int]:
        port = free_port()
        dotted = {"store.data_dir": str(tmp_path / name), "server.listen": f"127.0.0.1:{port}",
                  "srmp.public_url": f"http://127.0.0.1:{port}",
                  **FAST, **{k.replace("__", "."): v for k, v in overrides.items()}}
        app = make_app(parse_settings({}, dotted))
        client = await aiohttp_client(app, server_kwargs={"port": port})
        while not app[STATE_KEY].ready:
            assert app[STATE_KEY].failure is None, app[STATE_KEY].failure
            await asyncio.sleep(0.01)
        return client, port

    return make


@pytest.fixture
async def peer(aiohttp_server: Any) -> Any:
    stand_in = WindowsPeer()
    app = web.Application()
    app.router.add_post("/{tail:.*}", stand_in.take)
    server = await aiohttp_server(app)
    server.peer = stand_in
    return server


async def _messages(client: Any, queue: str) -> list[dict[str, Any]]:
    response = await client.get(f"/v1/queues/{queue}/messages?limit=1000")
    assert response.status == 200, await response.text()
    return list((await response.json())["messages"])


async def _until(check: Callable[[], Any], limit_s: float = 60.0) -> Any:
    """Polls ``check`` until it is true; a generous limit turns a hang into a failure."""
    deadline = asyncio.get_running_loop().time() + limit_s
    while not (result := await check()):
        assert asyncio.get_running_loop().time() < deadline, f"still not true: {check}"
        await asyncio.sleep(0.05)
    return result


def _windows_delivery_receipt(to: str, original: Got, windows_guid: str, ordinal: int) -> bytes:
    """The delivery receipt a Windows QM sends for ``original`` (the V05 text with this
    exchange's values): Correlation is the original's OBJECTID as Windows holds it."""
    original_id = _text(original.envelope, f"{SE}Header/{RP}path/{RP}id")
    text = wire("V05").body.decode()
    text = text.replace("http://machine1/MSMQ/private$/receipts", to)
    text = text.replace("uuid:34826@ac678228-2dd6-418b-b31f-0539ffeea853",
                        f"uuid:{ordinal}@{windows_guid}")
    text = text.replace("uuid:1@00000000-0000-0000-0000-000000000000", original_id)
    text = text.replace("AAAAAAAAAAAAAAAAAAAAAAEAAAA=",
                        base64.b64encode(objectid(original_id)).decode())
    return text.replace("ac678228-2dd6-418b-b31f-0539ffeea853", windows_guid).encode()


async def test_ids_fit_msmq_and_delivery_receipts_correlate_to_the_rest_ids(
        gateway_factory: Callable[..., Any], peer: Any) -> None:
    """Issue 31 item 1: messages to queues on a Windows QM (two sends, one transaction) carry
    ids Windows can hold (uuid:N@GUID, N 32-bit, distinct); the delivery receipts Windows
    sends back, which name the originals by their 20-byte OBJECTID, correlate to the ids
    REST gave."""
    client, port = await gateway_factory("a", outbound__allow=[str(peer.make_url("/"))])
    await client.put("/v1/queues/private$/admin", json={})
    guid = client.server.app[STATE_KEY].serving().queue_manager.qm_guid
    sent = {}
    for queue in ("a", "b"):
        response = await client.post("/v1/messages", data=queue.encode(), headers={
            "Mq-Destination": f"DIRECT=HTTP://127.0.0.1:{peer.port}/msmq/private$/{queue}",
            "Mq-Admin-Queue": "private$/admin", "Mq-Acknowledge": "POS_ARRIVAL"})
        assert response.status == 201, await response.text()
        [copy] = (await response.json())["messages"]
        sent[queue] = copy["id"]
    # A third in an explicit transaction: its id is shown at commit.
    tx = (await (await client.post("/v1/transactions")).json())["id"]
    response = await client.post("/v1/messages", data=b"c", headers={
        "Mq-Destination": f"DIRECT=HTTP://127.0.0.1:{peer.port}/msmq/private$/c",
        "Mq-Admin-Queue": "private$/admin", "Mq-Acknowledge": "POS_ARRIVAL",
        "Mq-Transaction": tx})
    assert response.status == 202, await response.text()
    committed = await client.post(f"/v1/transactions/{tx}/commit")
    assert committed.status == 200, await committed.text()
    [copy] = (await committed.json())["messages"]
    sent["c"] = copy["id"]
    def _id(item: Got) -> str:
        return _text(item.envelope, f"{SE}Header/{RP}path/{RP}id")

    async def three() -> dict[str, Got] | None:  # the stream message may come again
        first = {_id(g): g for g in reversed(peer.peer.got)}
        return first if len(first) == 3 else None

    got = list((await _until(three)).values())
    ids = []
    for item in got:
        windows_checks(item, guid)
        ids.append(_text(item.envelope, f"{SE}Header/{RP}path/{RP}id"))
        send_to = _text(item.envelope, f"{SE}Header/{SRMP}services/{SRMP}"
                                       f"deliveryReceiptRequest/{SRMP}sendTo")
        assert send_to == f"http://127.0.0.1:{port}/msmq/private$/admin"
    assert len({objectid(i) for i in ids}) == 3  # distinct as Windows holds them
    windows_guid = str(uuid.uuid4())
    async with aiohttp.ClientSession() as session:
        for n, item in enumerate(got):
            body = _windows_delivery_receipt(f"http://127.0.0.1:{port}/msmq/private$/admin",
                                             item, windows_guid, 100 + n)
            async with session.post(f"http://127.0.0.1:{port}/msmq/private$/admin",
                                    data=body, headers={"Content-Type": "text/xml"}) as answer:
                assert answer.status == 200, await answer.text()
    # REST showed each copy by the id it carries on the wire ({GUID}\N for uuid:N@GUID) ...
    assert {"{%s}\\%s" % (guid, i[len("uuid:"):].split("@")[0]) for i in ids} == set(
        sent.values())
    # ... so what Windows correlates its receipts with is what the REST client holds.
    receipts = await _messages(client, "private$/admin")
    assert sorted(r["correlation_id"] for r in receipts) == sorted(sent.values())


def _vectors(peer_url: str) -> list[tuple[str, Request]]:
    """The spec's vectors as a Windows sender puts them on the wire; V03 (its garbled body
    mended) names the stand-in peer as its admin queues, and D3 is also sent asking for a
    delivery receipt there (its id is a real one, with a Msmq element)."""
    v03 = wire("V03")
    body = v03.body.replace("—MSMQ - SOAP boundary, 95692 are in same message.".encode(),
                            b"--MSMQ - SOAP boundary, 95692--")
    body = body.replace(b"http://machine1/MSMQ/private$/", peer_url.encode() + b"MSMQ/private$/")
    v03 = replace(v03, body=body)
    d3 = split_request(derived("D3"))
    parsed = parse_request(d3.headers["Content-Type"], d3.body)
    asking = replace(parsed.envelope, services=Services(
        durable=True, delivery_receipt_to=peer_url + "msmq/private$/receipts"))
    asking = replace(asking, path=replace(asking.path, id=asking.path.id.replace(
        "uuid:20503@", "uuid:20504@")))
    rebuilt = build_request(asking, parsed.body, host="machine2", path=d3.path,
                            boundary_number=26501)
    d3_asking = Request("POST", rebuilt.path, dict(rebuilt.headers), rebuilt.body)
    return [("V01", wire("V01")), ("V02", wire("V02")), ("V03", v03), ("V05", wire("V05")),
            ("V07", wire("V07")), ("D1", split_request(derived("D1"))),
            ("D2", split_request(derived("D2"))), ("D3", d3), ("D3+receipt", d3_asking)]


async def test_spec_vectors_in_order_out_of_order_and_duplicated(
        gateway_factory: Callable[..., Any], peer: Any) -> None:
    peer_url = str(peer.make_url("/"))
    client, _ = await gateway_factory("p", server__names=["machine1", "machine2"],
                                      outbound__allow=[peer_url])
    for name in ("simpleq", "receipts"):
        await client.put(f"/v1/queues/private$/{name}", json={})
    guid = client.server.app[STATE_KEY].serving().queue_manager.qm_guid
    vectors = _vectors(peer_url)
    # In order, then in reverse order, then each one twice in a row.
    rounds = [*vectors, *reversed(vectors), *(v for v in vectors for _ in range(2))]
    for name, request in rounds:
        headers = {"Content-Type": request.headers["Content-Type"]}
        # D1 came over PGM, whose request line names no path here: posted to /msmq.
        path = request.path if request.path.startswith("/") else "/msmq"
        response = await client.post(path, data=request.body, headers=headers)
        # D1 is multicast (PGM): not served here, refused as SRMP refuses (400).
        assert response.status == (400 if name == "D1" else 200), (name, await response.text())
        if response.status == 200:
            assert await response.read() == b""  # as IIS answers (V04, V06, V08)
    # Ids decide duplicates: V02/D3 (one id) once, each receipt once; V05/V07 went to the
    # local receipts queue (machine1 is this gateway).
    receipts = await _messages(client, "private$/receipts")
    assert sorted(m["class"] for m in receipts) == ["MQMSG_CLASS_ACK_REACH_QUEUE",
                                                    "MQMSG_CLASS_ACK_RECEIVE"]

    last: list[dict[str, Any]] = []

    async def settled() -> list[dict[str, Any]] | None:
        # V01, V02 (4x each, no id: never duplicates) and V03 expired on arrival (2007): they
        # leave; what stays is V02/D3 and D3+receipt, once each.
        found = await _messages(client, "private$/simpleq")
        last[:] = found
        return found if len(found) == 2 else None

    try:
        kept = await _until(settled)
    except AssertionError as exc:
        held = [(m["id"], m.get("label"), m.get("expires_at")) for m in last]
        raise AssertionError(f"{exc}; private$/simpleq holds {held}") from None
    assert sorted(m["id"] for m in kept) == [
        "{caf195ea-615c-4264-ae08-11a4e60194c0}\\20503",
        "{caf195ea-615c-4264-ae08-11a4e60194c0}\\20504"]
    # What came back to the Windows side: V03's delivery receipts (4 arrivals), its negative
    # commitment receipts (expired in the queue), and one delivery receipt for D3+receipt.
    got = await peer.peer.wait_for(9)
    for item in got:
        windows_checks(item, guid)
    wire_ids = [_text(g.envelope, f"{SE}Header/{RP}path/{RP}id") for g in got]
    assert len(set(wire_ids)) == len(wire_ids)  # every receipt its own id
    for item in got:
        header = item.envelope.find(f"{SE}Header")
        assert header is not None
        original = (header.find(f"{SRMP}deliveryReceipt/{SRMP}id")
                    if header.find(f"{SRMP}deliveryReceipt") is not None
                    else header.find(f"{SRMP}commitmentReceipt/{SRMP}id"))
        assert original is not None and original.text is not None
        correlation = base64.b64decode(_text(header, f"{MSMQ}Msmq/{MSMQ}Correlation"))
        if original.text.endswith("@caf195ea-615c-4264-ae08-11a4e60194c0"):
            assert original.text == "uuid:20504@caf195ea-615c-4264-ae08-11a4e60194c0"
            assert correlation == objectid(original.text)  # byte for byte
        else:  # V03 has no <Msmq>: its id is {NULL GUID, 1} ([MC-MQSRM] §2.2.4.3), as V05 says
            assert correlation == base64.b64decode("AAAAAAAAAAAAAAAAAAAAAAEAAAA=")


async def test_stream_receipts_for_a_windows_sender(gateway_factory: Callable[..., Any],
                                                    peer: Any) -> None:
    """A Windows sender's stream (the shape of the spec's 4.4) sent in order, out of order
    and duplicated: each message stored once, in order; the stream receipts go to its
    receipt URL with its query (V09/V10), shaped as the spec's 4.4 receipts."""
    receipts_to = str(peer.make_url("/msmq/private$/receipts")) + "?SenderStream=XRntV"
    client, _ = await gateway_factory("p", server__names=["machine2"],
                                      outbound__allow=[str(peer.make_url("/"))])
    await client.put("/v1/queues/private$/tsimpleq", json={"transactional": True})
    guid = client.server.app[STATE_KEY].serving().queue_manager.qm_guid
    to = "http://machine2/msmq/private$/tsimpleq"
    for current in (1, 3, 2, 2, 1, 3):
        request = stream_message(to, b"m%d" % current, current, receipts_to=receipts_to)
        headers = {k: v for k, v in request.headers if k not in ("Host", "Content-Length")}
        response = await client.post(request.path, data=request.body, headers=headers)
        assert response.status == 200, await response.text()

    async def in_order() -> bool:
        found = await _messages(client, "private$/tsimpleq")
        return [base64.b64decode(m["body_base64"]) for m in found] == [b"m1", b"m2", b"m3"]

    await _until(in_order)

    async def acknowledged() -> bool:
        return any(_text(g.envelope, f"{SE}Header/{SRMP}streamReceipt/{SRMP}lastOrdinal")
                   == "3" for g in peer.peer.got)

    await _until(acknowledged)
    for item in peer.peer.got:
        windows_checks(item, guid)
        assert item.path.endswith("/msmq/private$/receipts?SenderStream=XRntV")
        header = item.envelope.find(f"{SE}Header")
        assert header is not None
        assert _text(header, f"{RP}path/{RP}action") == "MSMQ:QM Ordering Ack"
        assert _text(header, f"{RP}path/{RP}to") == receipts_to
        assert _text(header, f"{SRMP}streamReceipt/{SRMP}streamId") == STREAM_ID
        assert _text(header, f"{MSMQ}Msmq/{MSMQ}Class") == "255"
