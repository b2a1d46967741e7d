"""A prepared transaction waits for its coordinator for ever, holding what it received and
its queues' range head: the operator sees when it was prepared (``prepared_at``, kept across
restarts) and the oldest one's age in ``/metrics``."""

from __future__ import annotations

import asyncio
import calendar
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.queues.tx_names import FILE_NAME
from gateway.settings import Settings
from tests.helpers import ready_client
from tests.integration.test_metrics import _value


def _epoch(iso: str) -> int:
    return calendar.timegm(time.strptime(iso, "%Y-%m-%dT%H:%M:%SZ"))


async def _prepared(client: Any) -> tuple[str, float, float]:
    """A transaction that sent one message, prepared; with the times around its prepare."""
    await client.put("/v1/queues/private$/a", json={"transactional": True})
    begun = await (await client.post("/v1/transactions")).json()
    assert begun["prepared_at"] is None, "an active transaction is not prepared"
    tx = begun["id"]
    sent = await client.post("/v1/queues/private$/a/messages", data=b"m",
                             headers={"Mq-Transaction": tx})
    assert sent.status == 202
    before = time.time()
    prepared = await client.post(f"/v1/transactions/{tx}/prepare")
    after = time.time()
    assert prepared.status == 200
    assert int(before) <= _epoch((await prepared.json())["prepared_at"]) <= after
    return tx, before, after


async def test_prepared_at_is_shown_and_kept_across_a_restart(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    settings = settings_factory()
    first = await ready_client(aiohttp_client, settings)
    tx, _, _ = await _prepared(first)
    shown = (await (await first.get(f"/v1/transactions/{tx}")).json())["prepared_at"]
    await first.close()
    while int(time.time()) <= _epoch(shown):  # a restart's own time would show otherwise
        await asyncio.sleep(0.1)

    second = await ready_client(aiohttp_client, settings)
    [listed] = (await (await second.get("/v1/transactions")).json())["transactions"]
    assert (listed["id"], listed["prepared_at"]) == (tx, shown)


@pytest.mark.parametrize("bad", ["yesterday", None, -1, 10 ** 400, 1e300, True,
                                 float("nan"), float("inf"), [1]],
                         ids=["text", "null", "negative", "huge-int", "huge-float", "bool",
                              "nan", "inf", "list"])
async def test_an_entry_without_a_time_gets_the_time_it_was_found(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], bad: object) -> None:
    """An entry written before times were kept (or with one that is not a time of this
    era): the transaction keeps its id, and its age counts from the start that found it."""
    settings = settings_factory()
    first = await ready_client(aiohttp_client, settings)
    tx, _, _ = await _prepared(first)
    await first.close()
    path = Path(settings.store.data_dir) / FILE_NAME
    doc = json.loads(path.read_bytes())
    [entry] = doc["prepared"].values()
    entry["prepared_at"] = bad
    path.write_text(json.dumps(doc))  # NaN and Infinity as Python's json writes them

    started = int(time.time())
    second = await ready_client(aiohttp_client, settings)
    [listed] = (await (await second.get("/v1/transactions")).json())["transactions"]
    assert listed["id"] == tx
    assert _epoch(listed["prepared_at"]) >= started
    [kept] = json.loads(path.read_bytes())["prepared"].values()
    assert kept["prepared_at"] >= started, "the time found is recorded for the next start"


async def test_metrics_count_transactions_and_age_the_oldest_prepared(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    client = await ready_client(aiohttp_client, settings_factory())
    text = await (await client.get("/metrics")).text()
    assert _value(text, "entrepot_transactions", state="prepared") == 0
    assert _value(text, "entrepot_transaction_prepared_oldest_age_seconds") == 0

    _, before, after = await _prepared(client)
    await client.post("/v1/transactions")  # one more, active
    while time.time() < after + 1:  # the prepared one is a second old at least
        await asyncio.sleep(0.1)
    text = await (await client.get("/metrics")).text()
    scraped = time.time()
    assert _value(text, "entrepot_transactions", state="active") == 1
    assert _value(text, "entrepot_transactions", state="prepared") == 1
    # Prepared within [before, after], scraped after ``after + 1``.
    assert 1 <= _value(text, "entrepot_transaction_prepared_oldest_age_seconds") <= (
        scraped - before)


async def test_a_purge_passes_a_prepared_transaction(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    """A purge removes every message the queue holds when it starts, those after a prepared
    transaction's too; the transaction's own messages are not the queue's yet, and stay
    (across a restart as well) for its commit."""
    settings = settings_factory()
    first = await ready_client(aiohttp_client, settings)
    single = {"Mq-Transaction": "single"}
    await first.put("/v1/queues/private$/a", json={"transactional": True})
    assert (await first.post("/v1/queues/private$/a/messages", data=b"before",
                             headers=single)).status == 201
    tx, _, _ = await _prepared(first)  # sends "m" to private$/a
    assert (await first.post("/v1/queues/private$/a/messages", data=b"after",
                             headers=single)).status == 201
    await first.close()

    second = await ready_client(aiohttp_client, settings)
    purged = await (await second.post("/v1/queues/private$/a/purge")).json()
    assert purged == {"purged": 2}
    assert (await second.post(f"/v1/transactions/{tx}/commit")).status == 200
    page = await (await second.get("/v1/queues/private$/a/messages")).json()
    assert [m["body_base64"] for m in page["messages"]] == ["bQ=="]  # "m"
