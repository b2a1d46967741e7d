"""The SRMP front door on a real server on loopback: the spec's examples, every refusal of
docs/srmp.md, "Receiver pipeline and status codes" (each storing nothing), duplicates, quotas,
access, redirection."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gateway.queues import local_names
from gateway.queues.seen_ids import SeenIds
from gateway.settings import Settings
from gateway.srmp.model import Services
from gateway.web.appkeys import STATE_KEY
from tests.helpers import ready_client
from tests.srmp_client import SENDER_QM, post, stream_message, user_message
from tests.srmp_vectors import derived, split_request, wire

PROBLEM = "application/problem+json"
SIMPLEQ = "http://machine2/msmq/private$/simpleq"


@pytest.fixture
def make_client(aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> Any:
    async def make(**overrides: Any) -> Any:
        overrides.setdefault("server__names", ["machine1", "machine2", "orderserver"])
        client = await ready_client(aiohttp_client, settings_factory(**overrides))
        for name, tx in (("private$/simpleq", False), ("private$/receipts", False),
                         ("private$/orders", True), ("private$/orderq", False)):
            await client.put(f"/v1/queues/{name}", json={"transactional": tx})
        return client
    return make


async def _messages(client: Any, queue: str) -> list[dict[str, Any]]:
    response = await client.get(f"/v1/queues/{queue}/messages")
    assert response.status == 200, await response.text()
    return list((await response.json())["messages"])


async def _metric(client: Any, kind: str, outcome: str) -> float:
    text = await (await client.get("/metrics")).text()
    for line in text.splitlines():
        if line.startswith(f'entrepot_srmp_messages_total{{kind="{kind}",outcome="{outcome}"}}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_v01_is_stored_and_answered_like_iis(make_client: Any) -> None:
    client = await make_client()
    req = wire("V01")
    # expiresAt (time-to-be-received) 2007-06-09 would expire the message at once.
    req = replace(req, body=req.body.replace(b"20070609T164419", b"20380119T031407"))
    response = await client.post(req.path, data=req.body,
                                 headers={"Content-Type": req.headers["Content-Type"]})
    assert response.status == 200 and await response.read() == b""  # as V04
    [message] = await _messages(client, "private$/simpleq")
    assert message["label"] == "mqsender label"
    assert base64.b64decode(message["body_base64"]) == b"First Message"
    props = message["properties"]
    assert props["front_door"] == "srmp" and props["srmp_to"] == SIMPLEQ
    assert props["srmp_envelope"].startswith("<se:Envelope")
    # The whole MIME message comes back byte for byte from head + body + tail.
    whole = (base64.b64decode(props["srmp_mime_head"]) + b"First Message"
             + base64.b64decode(props["srmp_mime_tail"]))
    assert whole == req.body
    assert message["delivery"] == "express"  # no <durable/>


async def test_ids_chosen_by_senders_are_remembered_within_a_bound(make_client: Any) -> None:
    """A received SRMP message keeps its sender's id; the gateway remembers the latest ids it
    showed (every one of them, forever, before), and finds an older one by reading the
    queue."""
    client = await make_client()
    qm = client.server.app[STATE_KEY].serving().queue_manager
    qm.seen_ids = SeenIds(limit=4)
    ids = ["{" + SENDER_QM + "}\\" + str(n) for n in range(1, 11)]
    for ordinal in range(1, 11):
        # m2's body holds m3's id as its header writes it: the scan must not stop there.
        body = json.dumps(ids[2]).encode() if ordinal == 2 else b"m%d" % ordinal
        request = user_message(SIMPLEQ, body, ordinal=ordinal)
        assert (await post(client, request)).status == 200
    shown = await _messages(client, "private$/simpleq")
    assert [m["id"] for m in shown] == ids
    assert len(qm.seen_ids) == 4
    for n in (1, 3):  # both fell out of the map: found by reading the queue
        found = await client.get(f"/v1/queues/private$/simpleq/messages/{ids[n - 1]}")
        assert found.status == 200
        assert base64.b64decode((await found.json())["body_base64"]) == b"m%d" % n
    response = await client.post("/v1/queues/private$/simpleq/receive?max=10")
    assert len((await response.json())["messages"]) == 10
    assert len(qm.seen_ids) == 4
    gone = await client.get(f"/v1/queues/private$/simpleq/messages/{shown[-1]['id']}")
    assert gone.status == 404


async def test_d3_duplicate_id_is_dropped_but_answered_200(make_client: Any) -> None:
    client = await make_client()
    req = split_request(derived("D3"))
    for _ in range(3):
        response = await client.post(req.path.upper(), data=req.body,  # /MSMQ/PRIVATE$/...
                                     headers={"Content-Type": req.headers["Content-Type"]})
        assert response.status == 200
    [message] = await _messages(client, "private$/simpleq")  # <to> says simpleQ
    assert message["id"] == "{caf195ea-615c-4264-ae08-11a4e60194c0}\\20503"
    assert message["properties"]["source_qm"] == "caf195ea-615c-4264-ae08-11a4e60194c0"
    assert await _metric(client, "user", "duplicate") == 2


async def test_d2_without_msmq_element_is_never_a_duplicate(make_client: Any) -> None:
    """{NULL GUID, 1} means "no id" ([MC-MQSRM] §2.2.4.3): the duplicate check is skipped."""
    client = await make_client()
    req = split_request(derived("D2"))
    for _ in range(2):
        response = await client.post(req.path, data=req.body,
                                     headers={"Content-Type": req.headers["Content-Type"]})
        assert response.status == 200
    # Both stored (its expiresAt of 2007 then expires them: the count is the proof).
    assert await _metric(client, "user", "stored") == 2


@pytest.mark.parametrize("name,klass", [("V05", "MQMSG_CLASS_ACK_REACH_QUEUE"),
                                        ("V07", "MQMSG_CLASS_ACK_RECEIVE")])
async def test_receipts_go_to_the_admin_queue_their_to_names(make_client: Any, name: str,
                                                             klass: str) -> None:
    client = await make_client()
    req = wire(name)
    response = await client.post(req.path, data=req.body,
                                 headers={"Content-Type": "text/xml"})
    assert response.status == 200 and await response.read() == b""  # as V06 / V08
    [receipt] = await _messages(client, "private$/receipts")
    assert receipt["class"] == klass
    assert receipt["correlation_id"] == "{00000000-0000-0000-0000-000000000000}\\1"


def _bad_requests() -> list[tuple[str, bytes, str, str]]:
    good = user_message(SIMPLEQ, b"x", ordinal=1)
    ctype = dict(good.headers)["Content-Type"]
    foreign = user_message("http://elsewhere.example/msmq/private$/simpleq", b"x", ordinal=2)
    unknown = user_message("http://machine2/msmq/private$/nope", b"x", ordinal=3)
    stream_to_plain = stream_message(SIMPLEQ, b"x", 1, receipts_to="http://machine1/msmq/r")
    plain_to_tx = user_message("http://machine2/msmq/private$/orders", b"x", ordinal=4)
    to_deadletter = user_message("http://machine2/msmq/system$;deadletter", b"x", ordinal=5)
    multicast = user_message("MSMQ:MULTICAST=234.1.1.1:8001", b"x", ordinal=1).body
    # This host under a virtual directory it does not serve: no queue of this gateway.
    other_vdir = user_message("http://machine2/zzz/private$/simpleq", b"x", ordinal=6)
    # An id's counter is an OBJECTID's 32-bit uniquifier, from 1: a receipt carries it back.
    counter_0 = user_message(SIMPLEQ, b"x", ordinal=0)
    counter_33_bits = user_message(SIMPLEQ, b"x", ordinal=1 << 32)
    return [
        ("id counter 0", counter_0.body, ctype, "MQ_ERROR_BAD_XML_FORMAT"),
        ("id counter over 32 bits", counter_33_bits.body,
         dict(counter_33_bits.headers)["Content-Type"], "MQ_ERROR_BAD_XML_FORMAT"),
        ("malformed XML", good.body.replace(b"</se:Header>", b"</se:Headr>"), ctype,
         "MQ_ERROR_BAD_XML_FORMAT"),
        ("broken framing", good.body[:-40], ctype, "MQ_ERROR_BAD_XML_FORMAT"),
        ("not SRMP at all", b"{}", "application/json", "MQ_ERROR_BAD_XML_FORMAT"),
        ("foreign host", foreign.body, dict(foreign.headers)["Content-Type"], "no-route"),
        ("unknown queue", unknown.body, dict(unknown.headers)["Content-Type"],
         "MQ_ERROR_QUEUE_NOT_FOUND"),
        ("stream to a non-transactional queue", stream_to_plain.body,
         dict(stream_to_plain.headers)["Content-Type"], "MQMSG_CLASS_NACK_NOT_TRANSACTIONAL_Q"),
        ("plain message to a transactional queue", plain_to_tx.body,
         dict(plain_to_tx.headers)["Content-Type"], "MQMSG_CLASS_NACK_NOT_TRANSACTIONAL_MSG"),
        ("a dead-letter queue", to_deadletter.body, dict(to_deadletter.headers)["Content-Type"],
         "MQ_ERROR_ACCESS_DENIED"),
        ("multicast", multicast, ctype, "MQ_ERROR_ILLEGAL_FORMATNAME"),
        ("an unserved virtual directory", other_vdir.body,
         dict(other_vdir.headers)["Content-Type"], "MQ_ERROR_ILLEGAL_FORMATNAME"),
    ]


@pytest.mark.parametrize("what,body,ctype,slug", _bad_requests(),
                         ids=[b[0] for b in _bad_requests()])
async def test_refusals_are_400_problems_and_store_nothing(make_client: Any, what: str,
                                                           body: bytes, ctype: str,
                                                           slug: str) -> None:
    client = await make_client()
    before = await (await client.get("/v1/queues")).json()
    response = await client.post("/msmq/private$/simpleq", data=body,
                                 headers={"Content-Type": ctype})
    assert response.status == 400, (what, await response.text())
    assert response.content_type == PROBLEM
    assert (await response.json())["type"].endswith(slug), what
    assert await (await client.get("/v1/queues")).json() == before


async def test_only_configured_virtual_directories_serve_srmp(make_client: Any) -> None:
    client = await make_client(srmp__virtual_dirs=["msmq", "partners"])
    req = user_message(SIMPLEQ, b"x", ordinal=1)
    assert (await post(client, req, "/Partners/anything")).status == 200
    assert (await post(client, req, "/other/private$/simpleq")).status in (404, 405)
    # <to> under any of them names a local queue; under another one, none.
    to_partners = user_message("http://machine2/Partners/private$/simpleq", b"x", ordinal=2)
    assert (await post(client, to_partners, "/msmq/private$/simpleq")).status == 200
    to_other = user_message("http://machine2/other/private$/simpleq", b"x", ordinal=3)
    refused = await post(client, to_other, "/msmq/private$/simpleq")
    assert refused.status == 400 and "/other/" in (await refused.json())["detail"]


async def test_the_machines_own_addresses_name_local_queues(
        make_client: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Windows sender names the queue by the address it reaches the machine at: each
    interface address (IPv4 and IPv6, read from /proc/net at start) is one of ours; another
    address still names another host."""
    (tmp_path / "fib_trie").write_text(_FIB_TRIE)
    (tmp_path / "if_inet6").write_text(
        "20010db8000000000000000000000007 02 40 00 80     eth0\n")
    monkeypatch.setattr(local_names, "_PROC_NET", tmp_path)
    client = await make_client()
    for ordinal, host in enumerate(("198.51.100.7", "[2001:db8::7]:8080",
                                    "[2001:DB8:0:0:0:0:0:7]"), start=1):
        req = user_message(f"http://{host}/msmq/private$/simpleq", b"x", ordinal=ordinal)
        response = await post(client, req, "/msmq/private$/simpleq")
        assert response.status == 200, (host, await response.text())
    assert len(await _messages(client, "private$/simpleq")) == 3
    # The network's own address and its broadcast address are not the machine's.
    for ordinal, host in enumerate(("198.51.100.0", "198.51.100.255"), start=4):
        req = user_message(f"http://{host}/msmq/private$/simpleq", b"x", ordinal=ordinal)
        refused = await post(client, req, "/msmq/private$/simpleq")
        assert refused.status == 400 and (await refused.json())["type"].endswith("no-route")


# /proc/net/fib_trie's shape: a local address is the one followed by "/32 host LOCAL".
_FIB_TRIE = """Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 198.51.100.0/24 2 0 2
        |-- 198.51.100.0
           /24 link UNICAST
        |-- 198.51.100.7
           /32 host LOCAL
        |-- 198.51.100.255
           /32 link BROADCAST
"""


async def test_queue_over_quota_drops_with_dead_letter_and_nack(make_client: Any) -> None:
    client = await make_client()
    await client.put("/v1/queues/private$/small", json={"quota": 8192})
    to = "http://machine2/msmq/private$/small"
    services = Services(durable=True, commitment_receipt_to="http://machine1/msmq/private$/"
                        "receipts", negative_only=True)
    first = await post(client, user_message(to, b"a" * 5000, ordinal=1))
    assert first.status == 200
    dropped = await post(client, user_message(to, b"b" * 5000, ordinal=2, services=services,
                                              dead_letter=True))
    assert dropped.status == 200  # SRMP: the queue quota drops the message, nothing to retry
    assert len(await _messages(client, "private$/small")) == 1
    [dead] = await _messages(client, "system$;deadletter")
    assert dead["class"] == "MQMSG_CLASS_NACK_Q_EXCEED_QUOTA"
    [nack] = await _messages(client, "private$/receipts")
    assert nack["class"] == "MQMSG_CLASS_NACK_Q_EXCEED_QUOTA"
    assert await _metric(client, "user", "quota_dropped") == 1


async def test_machine_quota_full_is_503_with_retry_after(make_client: Any) -> None:
    client = await make_client(store__machine_quota="1MiB", store__segment_size="64KiB",
                               store__group_commit_bytes_max="64KiB")
    status = 200
    for ordinal in range(1, 200):
        response = await post(client, user_message(SIMPLEQ, b"z" * 30_000, ordinal=ordinal))
        status = response.status
        if status != 200:
            break
    assert status == 503 and response.headers["Retry-After"]
    assert response.content_type == PROBLEM


async def test_senders_outside_allowed_networks_reach_only_anonymous_queues(
        make_client: Any) -> None:
    client = await make_client(srmp__allow_networks=["10.0.0.0/8"])
    await client.put("/v1/queues/private$/open", json={"anonymous": True})
    refused = await post(client, user_message(SIMPLEQ, b"x", ordinal=1))
    assert refused.status == 403 and refused.content_type == PROBLEM
    assert await _messages(client, "private$/simpleq") == []
    to = "http://machine2/msmq/private$/open"
    assert (await post(client, user_message(to, b"x", ordinal=2))).status == 200
    assert len(await _messages(client, "private$/open")) == 1


async def test_logical_address_lands_in_the_physical_queue(make_client: Any,
                                                            tmp_path: Path) -> None:
    """Inbound redirection: an SRMP message posted to an M01-style logical URL lands in the
    queue the redirection names."""
    mapping = tmp_path / "mapping"
    mapping.mkdir()
    (mapping / "m01.xml").write_text(
        '<redirections xmlns="msmq-queue-redirections.xml"><redirection>'
        "<from>https://www.northwindtraders.com/msmq/orderq</from>"
        "<to>https://OrderServer/msmq/private$/orderq</to></redirection></redirections>")
    client = await make_client(mapping__dir=str(mapping))
    req = user_message("https://www.northwindtraders.com/msmq/orderq", b"order", ordinal=1)
    response = await post(client, req, "/msmq/orderq")
    assert response.status == 200, await response.text()
    [message] = await _messages(client, "private$/orderq")
    assert base64.b64decode(message["body_base64"]) == b"order"
    # Without the rule the same host is foreign.
    other = user_message("https://www.northwindtraders.com/msmq/other", b"x", ordinal=2)
    assert (await post(client, other, "/msmq/other")).status == 400


def _dsa_signer(directory: Path) -> Any:
    """A DSA key and its self-signed certificate as <SENDER_QM>.pem in ``directory``."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import dsa
    from cryptography.x509.oid import NameOID

    key = dsa.generate_private_key(2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sender qm")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(1)
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    directory.mkdir(exist_ok=True)
    (directory / f"{SENDER_QM}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return key


async def test_signed_messages_and_authenticated_queues(make_client: Any,
                                                        tmp_path: Path) -> None:
    key = _dsa_signer(tmp_path / "signers")
    client = await make_client(srmp__signers_dir=str(tmp_path / "signers"))
    await client.put("/v1/queues/private$/secure", json={"authenticate": True})
    secure = "http://machine2/msmq/private$/secure"
    response = await post(client, user_message(secure, b"signed", ordinal=1, signer=key))
    assert response.status == 200, await response.text()
    [message] = await _messages(client, "private$/secure")
    assert message["properties"]["authenticated"] == "xmldsig"
    unsigned = await post(client, user_message(secure, b"plain", ordinal=2))
    assert unsigned.status == 400
    assert (await unsigned.json())["type"].endswith("MQMSG_CLASS_NACK_BAD_SIGNATURE")
    tampered = user_message(secure, b"signed", ordinal=3, signer=key)
    tampered = replace(tampered, body=tampered.body.replace(b"signed--", b"SIGNED--"))
    bad = await post(client, tampered)
    assert bad.status == 400 and "does not match" in (await bad.json())["detail"]
    # A bad signature is refused on any queue; an unsigned message to a plain queue is fine.
    plain_tampered = user_message(SIMPLEQ, b"signed", ordinal=5, signer=key)
    plain_tampered = replace(plain_tampered,
                             body=plain_tampered.body.replace(b"signed--", b"SIGNED--"))
    assert (await post(client, plain_tampered)).status == 400
    assert (await post(client, user_message(SIMPLEQ, b"plain", ordinal=4))).status == 200
    assert len(await _messages(client, "private$/secure")) == 1


async def test_duplicate_ids_are_remembered_across_a_restart(make_client: Any,
                                                             aiohttp_client: Any,
                                                             settings_factory: Any) -> None:
    client = await make_client()
    durable = user_message(SIMPLEQ, b"once", ordinal=42)
    express = user_message(SIMPLEQ, b"express", ordinal=43, durable=False)
    for request in (durable, express):
        assert (await post(client, request)).status == 200
    await client.close()  # a clean stop writes the window
    again = await ready_client(aiohttp_client, settings_factory(
        server__names=["machine1", "machine2"]))
    for request in (durable, express):
        assert (await post(again, request)).status == 200
    bodies = [base64.b64decode(m["body_base64"])
              for m in await _messages(again, "private$/simpleq")]
    # The durable one is known as a duplicate; the express one was lost with the restart,
    # so its resend is taken.
    assert sorted(bodies) == [b"express", b"once"]
    assert await _metric(again, "user", "duplicate") == 1
