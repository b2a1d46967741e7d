"""``entrepot serve --links-paused``: a restored copy of a gateway's store can be served and
inspected without forwarding what waits in its outgoing queues; a link resumed by hand
forwards as usual."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.settings import Settings
from gateway.web.appkeys import STATE_KEY
from tests.helpers import REPO_ROOT, GatewayProcess, http_get, http_request, ready_client


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=120)


def _json(url: str) -> dict[str, object]:
    status, _, body = http_get(url)
    assert status == 200, (url, body)
    doc: dict[str, object] = json.loads(body)
    return doc


def _links(gateway: GatewayProcess) -> list[dict[str, object]]:
    links = _json(gateway.url + "/v1/links")["links"]
    assert isinstance(links, list)
    return [link for link in links if link["kind"] == "messages"]


def _count(gateway: GatewayProcess, queue: str) -> int:
    return int(str(_json(f"{gateway.url}/v1/queues/{queue}")["messages"]))


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[GatewayProcess]:
    """The remote queue manager: another gateway, with the destination queue."""
    proc = GatewayProcess(tmp_path / "peer")
    try:
        proc.wait_ready()
        assert http_request(proc.url + "/v1/queues/orders", method="PUT", body=b"{}",
                            headers={"Content-Type": "application/json"}) == 201
        yield proc
    finally:
        proc.stop()


def test_a_restored_copy_served_with_links_paused_forwards_nothing_until_resumed(
        peer: GatewayProcess, tmp_path: Path) -> None:
    source = GatewayProcess(tmp_path / "source", extra_args=["--links-paused"])
    try:
        source.wait_ready()
        status = http_request(source.url + "/v1/messages", body=b"order 1", headers={
            "Mq-Destination": f"DIRECT=HTTP://127.0.0.1:{peer.port}/msmq/orders"})
        assert status == 201
        [link] = _links(source)
        assert (link["state"], link["backlog"]) == ("paused", 1)
        backup = _cli("backup", str(source.data_dir), str(tmp_path / "bk"))
        assert backup.returncode == 0, backup.stderr
    finally:
        source.stop()
    restored = _cli("restore", str(tmp_path / "bk"), str(tmp_path / "copy"))
    assert restored.returncode == 0, restored.stderr

    copy = GatewayProcess(tmp_path / "copy", extra_args=["--links-paused"])
    try:
        copy.wait_ready()
        [link] = _links(copy)
        assert (link["state"], link["backlog"]) == ("paused", 1)
        assert _count(peer, "orders") == 0
        assert http_request(f"{copy.url}/v1/links/{link['id']}/resume") == 200
        for _ in range(600):  # an upper bound only: the forward is the event waited for
            if _count(peer, "orders") == 1:
                break
            time.sleep(0.05)
        assert _count(peer, "orders") == 1
        [link] = _links(copy)
        assert link["state"] != "paused"
    finally:
        copy.stop()


def test_without_the_flag_links_start_active(peer: GatewayProcess, tmp_path: Path) -> None:
    source = GatewayProcess(tmp_path / "source")
    try:
        source.wait_ready()
        status = http_request(source.url + "/v1/messages", body=b"order 2", headers={
            "Mq-Destination": f"DIRECT=HTTP://127.0.0.1:{peer.port}/msmq/orders"})
        assert status == 201
        for _ in range(600):  # an upper bound only
            if _count(peer, "orders") == 1:
                break
            time.sleep(0.05)
        assert _count(peer, "orders") == 1
    finally:
        source.stop()


async def test_receipt_lanes_start_paused_too(aiohttp_client: Any,
                                              settings_factory: Callable[..., Settings]
                                              ) -> None:
    """Receipts a copy would post for what is received from it wait as well."""
    client = await ready_client(aiohttp_client, settings_factory(links__start_paused=True))
    links = client.server.app[STATE_KEY].serving().links
    lane = links.receipts.lane_for("http://peer.example/msmq/orders")
    assert lane.summary()["state"] == "paused"
    listed = (await (await client.get("/v1/links")).json())["links"]
    assert [(entry["kind"], entry["state"]) for entry in listed] == [("receipts", "paused")]
    assert (await client.post(f"/v1/links/{lane.id}/resume")).status == 200
    assert lane.summary()["state"] == "active"
