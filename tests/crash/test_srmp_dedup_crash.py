"""kill -9 of the real gateway right after SRMP messages were stored, some of them already
received: every resend is answered 200 and none is stored again (a received one does not come
back; a queued one is there once). The window's entries are then on disk either in the
messages themselves or written before their removal (gateway.queues.dedup)."""

from __future__ import annotations

import asyncio
import base64
import json
import signal
from pathlib import Path

import aiohttp
import pytest

from tests.helpers import GatewayProcess, http_get
from tests.srmp_client import user_message

QUEUE = "private$/dd"


async def _send(session: aiohttp.ClientSession, url: str, ordinal: int) -> int:
    request = user_message(f"{url}/msmq/{QUEUE}", f"m{ordinal}".encode(), ordinal=ordinal)
    headers = {k: v for k, v in request.headers if k not in ("Host", "Content-Length")}
    async with session.post(f"{url}/msmq/{QUEUE}", data=request.body,
                            headers=headers) as response:
        return response.status


async def _first_life(url: str, received: list[bytes]) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.put(f"{url}/v1/queues/{QUEUE}", json={}) as response:
            assert response.status == 201
        for ordinal in range(1, 42):  # the last one is killed with its entry most likely held
            assert await _send(session, url, ordinal) == 200
            if ordinal % 2 == 0:  # a consumer takes one at once, before any periodic flush
                async with session.post(f"{url}/v1/queues/{QUEUE}/receive") as response:
                    assert response.status == 200
                    [message] = (await response.json())["messages"]
                    received.append(base64.b64decode(message["body_base64"]))


async def _resend_all(url: str) -> list[int]:
    async with aiohttp.ClientSession() as session:
        return [await _send(session, url, ordinal) for ordinal in range(1, 42)]


def _queued(url: str) -> list[bytes]:
    status, _, raw = http_get(f"{url}/v1/queues/{QUEUE}/messages?limit=1000")
    assert status == 200
    return [base64.b64decode(m["body_base64"]) for m in json.loads(raw)["messages"]]


@pytest.mark.crash
@pytest.mark.timeout(120)
def test_srmp_resends_after_kill_9_are_not_stored_again(tmp_path: Path) -> None:
    gateway = GatewayProcess(tmp_path / "data")
    gateway.wait_ready()
    received: list[bytes] = []
    asyncio.run(_first_life(gateway.url, received))
    gateway.proc.send_signal(signal.SIGKILL)
    gateway.stop()
    assert len(received) == 20

    gateway = GatewayProcess(tmp_path / "data")
    gateway.wait_ready()
    try:
        assert asyncio.run(_resend_all(gateway.url)) == [200] * 41
        queued = _queued(gateway.url)
        sent = {f"m{n}".encode() for n in range(1, 42)}
        assert sorted(queued) == sorted(sent - set(received)), "a resend was stored again"
    finally:
        assert gateway.stop() == 0
