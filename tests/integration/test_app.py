"""The application in-process (pytest-aiohttp): health, readiness, metrics, problem answers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gateway.web.app import make_app
from gateway.web.appkeys import STATE_KEY
from gateway.settings import Settings


async def _wait_ready(app: web.Application) -> None:
    for _ in range(3000):  # an upper bound only
        if app[STATE_KEY].ready:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("store never became ready")


async def test_healthz_readyz_metrics(aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    app = make_app(settings_factory())
    client = await aiohttp_client(app)
    response = await client.get("/healthz")
    assert response.status == 200
    assert (await response.json()) == {"status": "alive"}
    await _wait_ready(app)
    response = await client.get("/readyz")
    assert response.status == 200
    response = await client.get("/metrics")
    assert response.status == 200
    assert response.headers["Content-Type"].startswith("text/plain")
    text = await response.text()
    assert "# TYPE entrepot_http_requests_total counter" in text
    assert 'entrepot_http_requests_total{method="GET",route="/healthz",status="200"} 1.0' in text
    assert "# TYPE entrepot_http_request_duration_seconds histogram" in text
    assert "process_resident_memory_bytes" in text
    assert "entrepot_ready 1.0" in text


async def test_readyz_is_503_while_the_store_is_locked_elsewhere(
    aiohttp_client: Any, settings_factory: Callable[..., Settings]
) -> None:
    from pathlib import Path

    from store.datadir import lock_data_dir

    settings = settings_factory()
    held = lock_data_dir(Path(settings.store.data_dir))
    try:
        app = make_app(settings)
        client = await aiohttp_client(app)
        for _ in range(3000):  # an upper bound only
            if app[STATE_KEY].failure:
                break
            await asyncio.sleep(0.01)
        response = await client.get("/readyz")
        assert response.status == 503
        assert response.headers["Content-Type"] == "application/problem+json"
        body = json.loads(await response.text())
        assert "in use by another entrepot process" in body["detail"]
        assert (await client.get("/healthz")).status == 200
    finally:
        held.release()


async def test_unknown_route_is_problem_json(aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    client = await aiohttp_client(make_app(settings_factory()))
    response = await client.get("/no/such/route")
    assert response.status == 404
    assert response.headers["Content-Type"] == "application/problem+json"
    body = await response.json(content_type="application/problem+json")
    assert body["status"] == 404
    assert body["instance"] == "/no/such/route"
    response = await client.post("/healthz")
    assert response.status == 405
    assert "GET" in response.headers["Allow"]


async def test_concurrency_cap_answers_503(aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    gate = asyncio.Event()
    entered = asyncio.Event()
    app = make_app(settings_factory(server__concurrent_requests_max=1))

    async def slow(request: web.Request) -> web.Response:
        entered.set()
        await gate.wait()
        return web.Response(text="done")

    app.router.add_get("/slow", slow)
    client = await aiohttp_client(app)
    first = asyncio.create_task(client.get("/slow"))
    await asyncio.wait_for(entered.wait(), 10)  # the one slot is taken
    second = await client.get("/v1/queues")
    assert second.status == 503
    assert second.headers["Retry-After"] == "1"
    # Never refused by the cap (/readyz may still say the store is not open yet).
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/metrics")).status == 200
    ready = await client.get("/readyz")
    assert ready.status == 200 or "overloaded" not in await ready.text()
    gate.set()
    assert (await first).status == 200


async def test_readyz_is_503_once_the_store_fail_stops(
    aiohttp_client: Any, settings_factory: Callable[..., Settings]
) -> None:
    import pytest

    from store.errors import StoreFailed
    from store.records import SendSpec
    from tests.fault.faulty_ops import FaultyFileOps

    ops = FaultyFileOps()
    app = make_app(settings_factory(), file_ops=ops)
    client = await aiohttp_client(app)
    await _wait_ready(app)
    store = app[STATE_KEY].store
    assert store is not None
    assert (await client.put("/v1/queues/q", json={})).status == 201
    queue_id = app[STATE_KEY].serving().queue_manager.queue("q").queue_id
    await store.append(SendSpec(queue_id, b"ok"))
    assert (await client.get("/readyz")).status == 200
    assert "entrepot_ready 1.0" in await (await client.get("/metrics")).text()
    ops.eio_on_fdatasync = True
    with pytest.raises(StoreFailed):
        await store.append(SendSpec(queue_id, b"fails"))
    response = await client.get("/readyz")
    assert response.status == 503
    body = await response.json(content_type="application/problem+json")
    assert "stopped all writes" in body["detail"]
    assert (await client.get("/healthz")).status == 200
    # The metric and the status page say what /readyz says.
    assert "entrepot_ready 0.0" in await (await client.get("/metrics")).text()
    status = await (await client.get("/ui/status.json")).json()
    assert status["ready"] is False and "stopped all writes" in status["reason"]
    ops.eio_on_fdatasync = False
