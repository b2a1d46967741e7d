"""What a client is answered when the disk is full, through the whole application (handlers,
queue domain, middleware) over the store's file seam: 507 with Retry-After and problem+json,
never a 500, for every kind of new data; the store is not stopped, and new data is taken again
once there is room.

Why here as well as on a tmpfs (tests/integration/test_disk_full_serve.py, the torture's
disk-full scenario): those need root to mount and fill a real volume; this one runs anywhere,
and its disk is full at an exact byte count, so each refusal is the store's ``DiskFull`` and
not a timing.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gateway.settings import Settings
from gateway.web.app import make_app
from gateway.web.appkeys import STATE_KEY
from tests.fault.faulty_ops import FaultyFileOps

PROBLEM = "application/problem+json"
QUEUE = "private$/full"
SENDS_MAX = 200  # far more than the room left in the segments made before the disk filled


async def _ready(app: web.Application) -> None:
    for _ in range(3000):  # an upper bound only
        if app[STATE_KEY].ready:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"gateway not ready: {app[STATE_KEY].not_ready_reason()}")


def _body(n: int) -> bytes:
    return json.dumps({"n": n, "pad": "y" * 8000}).encode()


async def _refused(response: Any) -> dict[str, Any]:
    """The problem answer of a refusal for a full disk (asserted)."""
    text = await response.text()
    assert response.status == 507, f"a full disk answered {response.status}: {text}"
    assert response.headers["Content-Type"] == PROBLEM
    assert response.headers["Retry-After"].isdigit()
    problem: dict[str, Any] = json.loads(text)
    assert problem["status"] == 507 and problem["type"].endswith(
        "MQ_ERROR_MESSAGE_STORAGE_FAILED"), problem
    return problem


async def test_a_full_disk_is_507_with_retry_after_for_every_kind_of_new_data(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    ops = FaultyFileOps()
    settings = settings_factory(store__segment_size="64KiB", store__qmlog_size="1MiB",
                                store__group_commit_bytes_max="32KiB")
    app = make_app(settings, file_ops=ops)
    client = await aiohttp_client(app)
    await _ready(app)
    assert (await client.put(f"/v1/queues/{QUEUE}", json={})).status == 201
    assert (await client.put("/v1/queues/private$/full_tx",
                             json={"transactional": True})).status == 201
    ops.free = 0

    acked = []
    for n in range(SENDS_MAX):  # fill the room left in the segments made before
        response = await client.post(f"/v1/queues/{QUEUE}/messages", data=_body(n))
        if response.status != 201:
            await _refused(response)
            break
        acked.append(n)
    else:
        raise AssertionError(f"{SENDS_MAX} sends taken on a full disk")
    await _refused(await client.post(f"/v1/queues/{QUEUE}/messages", data=_body(-1)))
    await _refused(await client.post("/v1/queues/private$/full_tx/messages", data=_body(-2)))
    await _refused(await client.post("/v1/batch", json={"messages": [
        {"queue": QUEUE, "body_base64": base64.b64encode(_body(-3)).decode()},
        {"queue": QUEUE, "body_base64": base64.b64encode(_body(-4)).decode()}]}))
    await _refused(await client.put("/v1/queues/private$/new_on_full", json={}))
    assert ops.full_refusals > 0, "the disk-full seam refused nothing: the test proves nothing"

    # Not a failure of the store: reads go on, the gateway stays ready.
    store = app[STATE_KEY].store
    assert store is not None and store.failed is None, store.failed if store else None
    assert (await client.get("/readyz")).status == 200
    browsed = await (await client.get(f"/v1/queues/{QUEUE}/messages?limit=500")).json()
    assert [json.loads(base64.b64decode(m["body_base64"]))["n"]
            for m in browsed["messages"]] == acked

    ops.free = None  # space freed: new data is taken again, without a restart
    assert (await client.post(f"/v1/queues/{QUEUE}/messages", data=_body(SENDS_MAX))
            ).status == 201
    assert (await client.put("/v1/queues/private$/new_on_full", json={})).status == 201
