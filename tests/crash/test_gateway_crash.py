"""kill -9 of the real gateway while clients commit batches: after a restart every batch is
there whole or not at all, and every acknowledged batch is there."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import signal
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from tests.helpers import GatewayProcess, http_get

# Run again in one process (server.workers = 1) by make test (ENTREPOT_TEST_WORKERS).
pytestmark = pytest.mark.workers


async def _client_load(url: str, acked: list[int], started: list[int], stop: asyncio.Event,
                       worker: int) -> None:
    async with aiohttp.ClientSession() as session:
        number = 0
        while not stop.is_set():
            number += 1
            batch_id = worker * 1_000_000 + number
            size = 1 + batch_id % 5
            body = {"messages": [{"queue": "private$/crash",
                                  "body_base64": base64.b64encode(
                                      f"{batch_id}:{i}:{size}".encode()).decode()}
                                 for i in range(size)]}
            started.append(batch_id)
            try:
                async with session.post(url + "/v1/batch", json=body) as response:
                    if response.status == 201:
                        acked.append(batch_id)
            except (aiohttp.ClientError, asyncio.TimeoutError):
                return


def _contents(url: str) -> dict[int, set[int]]:
    batches: dict[int, set[int]] = {}
    after = 0
    while True:
        status, _, raw = http_get(f"{url}/v1/queues/private$/crash/messages?after={after}"
                                  "&limit=1000")
        assert status == 200
        page = json.loads(raw)
        for message in page["messages"]:
            batch, index, size = base64.b64decode(message["body_base64"]).decode().split(":")
            batches.setdefault(int(batch), set()).add(int(index))
            assert int(size) == 1 + int(batch) % 5
        if not page["messages"]:
            return batches
        after = page["next"]


@pytest.mark.crash
@pytest.mark.timeout(300)
def test_batches_survive_kill_9_whole_or_not_at_all(tmp_path: Path) -> None:
    rng = random.Random(20261122)
    acked: list[int] = []
    for cycle in range(3):
        gateway = GatewayProcess(tmp_path / "data")
        gateway.wait_ready()
        if cycle == 0:
            request = urllib.request.Request(gateway.url + "/v1/queues/private$/crash",
                                             data=b'{"transactional": true}', method="PUT")
            urllib.request.urlopen(request, timeout=10).read()

        async def load() -> None:
            stop = asyncio.Event()
            started: list[int] = []
            tasks = [asyncio.create_task(_client_load(gateway.url, acked, started, stop, w))
                     for w in range(cycle * 16 + 1, cycle * 16 + 9)]
            await asyncio.sleep(rng.uniform(0.3, 1.0))
            gateway.proc.send_signal(signal.SIGKILL)
            await asyncio.gather(*tasks)

        asyncio.run(load())
        gateway.stop()
        gateway = GatewayProcess(tmp_path / "data")
        gateway.wait_ready()
        batches = _contents(gateway.url)
        for batch, indexes in batches.items():
            assert indexes == set(range(1 + batch % 5)), f"batch {batch} partly stored"
        missing = [b for b in acked if b not in batches]
        assert not missing, f"acknowledged batches lost: {missing[:5]}"
        assert gateway.stop() == 0
    assert len(acked) > 20, "the clients committed too little for the test to mean anything"
