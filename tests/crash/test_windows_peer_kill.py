"""The spec's vectors replayed against a real ``entrepot serve`` across kill -9: after the
restart the same requests are duplicates (the window survives), each message is kept once,
and the receipts already stored are not made again."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest

from tests.helpers import GatewayProcess, free_port, http_get, http_request
from tests.integration.test_windows_peer import _vectors

pytestmark = pytest.mark.crash

CONFIG = """
[server]
names = ["machine1", "machine2"]

[[queues]]
path = "private$/simpleq"

[[queues]]
path = "private$/receipts"
"""


def _replay(gateway: GatewayProcess, order: list[str]) -> None:
    vectors = dict(_vectors(f"http://127.0.0.1:{free_port()}/"))
    for name in order:
        request = vectors[name]
        path = request.path if request.path.startswith("/") else "/msmq"
        status = http_request(gateway.url + path, body=request.body,
                              headers={"Content-Type": request.headers["Content-Type"]})
        assert status == (400 if name == "D1" else 200), (name, status)


def _ids(gateway: GatewayProcess, queue: str) -> list[str]:
    status, _, raw = http_get(f"{gateway.url}/v1/queues/{queue}/messages?limit=1000")
    assert status == 200, raw
    return sorted(m["id"] for m in json.loads(raw)["messages"])


async def _settled(gateway: GatewayProcess) -> list[str]:
    """simpleq once V01/V02 (no id) and V03 (expired on arrival) have left it."""
    for _ in range(1200):
        ids = _ids(gateway, "private$/simpleq")
        if len(ids) == 2:
            return ids
        await asyncio.sleep(0.05)
    raise AssertionError(f"private$/simpleq never settled: {_ids(gateway, 'private$/simpleq')}")


async def test_vectors_are_duplicates_across_kill_9(tmp_path: Path) -> None:
    config = tmp_path / "entrepot.toml"
    config.write_text(CONFIG)
    gateway = GatewayProcess(tmp_path / "data", extra_args=["--config", str(config)])
    names = ["V01", "V02", "V03", "V05", "V07", "D1", "D2", "D3", "D3+receipt"]
    try:
        gateway.wait_ready()
        _replay(gateway, names)
        kept = await _settled(gateway)
        receipts = _ids(gateway, "private$/receipts")
        gateway.stop(signal.SIGKILL)
        gateway = GatewayProcess(tmp_path / "data", port=gateway.port,
                                 extra_args=["--config", str(config)])
        gateway.wait_ready()
        _replay(gateway, [*reversed(names), *names])  # every one a duplicate now
        assert await _settled(gateway) == kept == [
            "{caf195ea-615c-4264-ae08-11a4e60194c0}\\20503",
            "{caf195ea-615c-4264-ae08-11a4e60194c0}\\20504"]
        assert _ids(gateway, "private$/receipts") == receipts and len(receipts) == 2
    finally:
        gateway.stop()
