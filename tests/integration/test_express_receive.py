"""Express messages (held in memory) received together with what their removal causes —
acknowledgements, receipts, journal copies — in one commit: the commit is durable, the
express messages leave memory (before, the commit refused them: 409 message-gone)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from gateway.settings import parse_settings
from gateway.srmp.model import Services
from tests.helpers import ready_client
from tests.srmp_client import post, user_message


def _settings(tmp_path: Path) -> Any:
    return parse_settings({"store": {"data_dir": str(tmp_path / "data")},
                           "outbound": {"allow": ["http://127.0.0.1:9/"]},
                           "queues": [{"path": "private$/q2"}, {"path": "acks"}]})


async def test_a_batch_of_express_messages_asking_for_acks_is_received(
        aiohttp_client: Any, tmp_path: Path) -> None:
    client = await ready_client(aiohttp_client, _settings(tmp_path))
    express = {"Mq-Delivery": "express"}
    assert (await client.post("/v1/queues/private$/q2/messages", data=b"a",
                              headers=express)).status == 201
    assert (await client.post("/v1/queues/private$/q2/messages", data=b"b", headers={
        **express, "Mq-Admin-Queue": "acks",
        "Mq-Acknowledge": "MQMSG_ACKNOWLEDGMENT_FULL_RECEIVE"})).status == 201
    response = await client.post("/v1/queues/private$/q2/receive?max=10")
    assert response.status == 200, await response.text()
    got = sorted(base64.b64decode(m["body_base64"]) for m in (await response.json())["messages"])
    assert got == [b"a", b"b"]
    acks = await (await client.get("/v1/queues/acks/messages")).json()
    assert [m["class"] for m in acks["messages"]] == ["MQMSG_CLASS_ACK_RECEIVE"]
    shown = await (await client.get("/v1/queues/private$/q2")).json()
    assert shown["messages"] == 0


async def test_express_srmp_messages_asking_for_commitment_receipts(aiohttp_client: Any,
                                                                    tmp_path: Path) -> None:
    client = await ready_client(aiohttp_client, _settings(tmp_path))
    to = "http://localhost/msmq/private$/q2"
    receipts = Services(durable=False, positive_only=True,
                        delivery_receipt_to="http://127.0.0.1:9/msmq/private$/r",
                        commitment_receipt_to="http://127.0.0.1:9/msmq/private$/r")
    assert (await post(client, user_message(to, b"a", ordinal=1, durable=False))).status == 200
    assert (await post(client, user_message(to, b"b", ordinal=2, durable=False,
                                            services=receipts))).status == 200
    response = await client.post("/v1/queues/private$/q2/receive?max=10")
    assert response.status == 200, await response.text()
    assert len((await response.json())["messages"]) == 2
