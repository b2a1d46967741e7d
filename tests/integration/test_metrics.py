"""``/metrics`` read at scrape time from the gateway's state: queue depth, bytes and age,
dead letters by class, quota, consumers, and the store writer's histograms."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

from gateway.settings import Settings
from tests.helpers import ready_client


def _value(text: str, name: str, **labels: str) -> float:
    """The sample ``name`` with exactly these labels (in any order)."""
    for line in text.splitlines():
        match = re.match(r"^([a-z_]+)(?:\{(.*)\})? ([0-9.e+-]+|\+Inf)$", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'([a-z_]+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
        if found == labels:
            return float(match.group(3))
    raise AssertionError(f"{name}{labels} not in the scrape")


async def test_state_metrics(aiohttp_client: Any, settings_factory: Callable[..., Settings]
                             ) -> None:
    client = await ready_client(aiohttp_client, settings_factory())
    await client.put("/v1/queues/orders", json={})
    for _ in range(4):
        await client.post("/v1/queues/orders/messages", data=b"12345678")
    await client.post("/v1/queues/orders/messages", data=b"x", headers={
        "Mq-Time-To-Be-Received": "0.05", "Mq-Journal": "deadletter"})
    await client.put("/v1/queues/feed", json={})
    await client.put("/v1/queues/feed/consumers/spark", json={})
    text = ""
    for _ in range(600):  # an upper bound only
        text = await (await client.get("/metrics")).text()
        if "entrepot_dead_letters{" in text:
            break
        await asyncio.sleep(0.05)
    assert _value(text, "entrepot_queue_messages", queue="orders") == 4
    assert _value(text, "entrepot_queue_bytes", queue="orders") > 0
    assert _value(text, "entrepot_queue_oldest_age_seconds", queue="orders") >= 0
    assert _value(text, "entrepot_consumer_position", queue="feed", consumer="spark") == 1
    assert _value(text, "entrepot_dead_letters", queue="system$;deadletter",
                  **{"class": "MQMSG_CLASS_NACK_RECEIVE_TIMEOUT"}) == 1
    assert _value(text, "entrepot_store_used_bytes") > 0
    assert _value(text, "entrepot_store_sync_seconds_count") >= 5
    assert _value(text, "entrepot_store_batch_jobs_bucket", le="+Inf") >= 5
    assert "entrepot_queue_messages{queue=\"private$/entrepot_dedup$\"}" not in text
