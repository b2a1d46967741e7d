"""Nothing a sender names can stop the next start: every internal queue name, in every place
a request names a queue or a URL, is refused at the request; the real gateway is then
stopped with SIGTERM and with SIGKILL, starts again, answers /readyz 200 and holds every
message it acknowledged. And a state record that cannot be read is set aside, not fatal."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path

import pytest

from gateway.queues.internal import INTERNAL_QUEUES, OUTGOING_PREFIX, STREAMS_QUEUE
from gateway.srmp.model import Services, Stream
from store.message_store import MessageStore
from store.options import StoreOptions
from store.records import SendSpec
from tests.helpers import GatewayProcess, http_get, http_request
from tests.srmp_client import user_message

pytestmark = pytest.mark.crash

NAMES = [*INTERNAL_QUEUES, OUTGOING_PREFIX + "00000000", "private$/entrepot_later$",
         "private$/entrepot_dedup$;journal"]
ACKS = ("MQMSG_ACKNOWLEDGMENT_FULL_REACH_QUEUE", "MQMSG_ACKNOWLEDGMENT_FULL_RECEIVE")
CONFIG = """
[[queues]]
path = "anon"
anonymous = true

[[queues]]
path = "anon_tx"
anonymous = true
transactional = true
"""


def _request(url: str, method: str = "POST", body: bytes = b"x",
             headers: dict[str, str] | None = None) -> int:
    return http_request(url, method=method, body=body, headers=headers)


def _srmp(base: str, port: int, name: str, ordinal: int) -> list[int]:
    """Each SRMP element that names a queue or a URL, pointed at ``name``."""
    target = f"http://127.0.0.1:{port}/msmq/{name}"
    anon = f"http://127.0.0.1:{port}/msmq/anon"
    statuses = []
    for services, stream, to in (
            (Services(durable=True, delivery_receipt_to=target), None, anon),
            (Services(durable=True, commitment_receipt_to=target), None, anon),
            (None, Stream(f"uid:{ordinal}\\1", 1, None, target), anon + "_tx"),
            (None, None, target)):
        request = user_message(to, b"hostile", ordinal=ordinal, services=services,
                               stream=stream)
        ordinal += 1
        headers = {k: v for k, v in request.headers if k not in ("Host", "Content-Length")}
        statuses.append(_request(base + request.path, body=request.body, headers=headers))
    return statuses


def _attack(gateway: GatewayProcess, name: str, ordinal: int) -> None:
    base = gateway.url
    local = f"DIRECT=HTTP://127.0.0.1:{gateway.port}/msmq/{name}"
    os_name = "DIRECT=OS:.\\" + name.replace("/", "\\")
    for header in ("Mq-Admin-Queue", "Mq-Response-Queue"):
        for value in (name, local, os_name):
            for ack in ACKS:
                status = _request(base + "/v1/queues/anon/messages", headers={
                    header: value, "Mq-Acknowledge": ack, "Mq-Time-To-Be-Received": "1"})
                assert status in (400, 403), (header, value, status)
    for value in (name, local, os_name):
        assert _request(base + "/v1/messages", headers={"Mq-Destination": value}) in (
            400, 403, 422), value
    assert _request(base + f"/v1/queues/{name}/messages") in (400, 403), name
    assert _request(base + f"/v1/queues/{name}", method="PUT", body=b"{}",
                    headers={"Content-Type": "application/json"}) in (400, 403), name
    batch = json.dumps({"messages": [{"queue": name, "body_base64": "eA=="}]}).encode()
    assert _request(base + "/v1/batch", body=batch) in (400, 403), name
    batch = json.dumps({"messages": [{"queue": "anon", "body_base64": "eA==", "properties": {
        "admin_queue": name, "acknowledge": ACKS[0]}}]}).encode()
    assert _request(base + "/v1/batch", body=batch) in (400, 403), name
    for status in _srmp(base, gateway.port, name, ordinal):
        assert status in (400, 403), (name, status)


def _count(gateway: GatewayProcess, queue: str) -> int:
    status, _, body = http_get(f"{gateway.url}/v1/queues/{queue}")
    assert status == 200, body
    return int(json.loads(body)["messages"])


def test_no_request_naming_an_internal_queue_bricks_the_gateway(tmp_path: Path) -> None:
    config = tmp_path / "entrepot.toml"
    config.write_text(CONFIG)
    data = tmp_path / "data"
    gateway = GatewayProcess(data, extra_args=["--config", str(config)])
    acknowledged = 0
    try:
        gateway.wait_ready()
        for index, name in enumerate(NAMES):
            _attack(gateway, name, 100 * (index + 1))
            assert _request(gateway.url + "/v1/queues/anon/messages",
                            body=f"kept {index}".encode()) == 201
            acknowledged += 1
        for sig in (signal.SIGTERM, signal.SIGKILL):
            gateway.stop(sig)
            gateway = GatewayProcess(data, port=gateway.port,
                                     extra_args=["--config", str(config)])
            gateway.wait_ready()
            assert http_get(gateway.url + "/readyz")[0] == 200
            assert _count(gateway, "anon") == acknowledged
            assert _count(gateway, "anon_tx") == 0
    finally:
        gateway.stop()


def _put_garbage(data: Path) -> list[str]:
    """One unreadable record in each internal queue that is read at start."""
    async def put() -> list[str]:
        store = MessageStore.open(data, StoreOptions())
        store.start(asyncio.get_running_loop())
        try:
            by_path = {info.path.lower(): info.queue_id for info in store.registry.all()}
            names = [n for n in INTERNAL_QUEUES if n in by_path]
            for name in names:
                await store.append(SendSpec(by_path[name], b"\xff\xfe not ours"))
            await store.append(SendSpec(by_path[STREAMS_QUEUE], json.dumps(
                {"id": "s", "queue": "anon_tx"}).encode()))  # JSON, fields missing
            return names
        finally:
            store.close()
    return asyncio.run(put())


def test_unreadable_state_records_are_quarantined_not_fatal(tmp_path: Path) -> None:
    config = tmp_path / "entrepot.toml"
    config.write_text(CONFIG)
    data = tmp_path / "data"
    gateway = GatewayProcess(data, extra_args=["--config", str(config)])
    try:
        gateway.wait_ready()
        assert _request(gateway.url + "/v1/queues/anon/messages", body=b"kept") == 201
    finally:
        gateway.stop()
    names = _put_garbage(data)
    assert len(names) >= 4
    gateway = GatewayProcess(data, port=gateway.port, extra_args=["--config", str(config)])
    try:
        gateway.wait_ready()
        assert _count(gateway, "anon") == 1
        assert "quarantined" in gateway.log()
        # The outbox reads its records as it sends them, after the start: wait for it.
        quarantine = data / "quarantine"
        for _ in range(1200):
            if quarantine.is_dir() and len(list(quarantine.iterdir())) > len(names):
                break
            time.sleep(0.05)
    finally:
        gateway.stop()
    quarantined = sorted(p.name for p in (data / "quarantine").iterdir())
    assert len(quarantined) == len(names) + 1, quarantined
    contents = [(data / "quarantine" / name).read_bytes() for name in quarantined]
    assert contents.count(b"\xff\xfe not ours") == len(names)
    # They were removed from their queues: the next start finds nothing to set aside.
    before = gateway.log().count("quarantined")
    gateway = GatewayProcess(data, port=gateway.port, extra_args=["--config", str(config)])
    try:
        gateway.wait_ready()
        assert gateway.log().count("quarantined") == before
    finally:
        gateway.stop()
