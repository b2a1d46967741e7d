"""A prepared transaction waits for its coordinator for ever, holding what it received and
its queues' range head: the operator sees when it was prepared (``prepared_at``, kept across
restarts) and the oldest one's age in ``/metrics``."""

from __future__ import annotations

import asyncio
import calendar
import hashlib
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.queues.tx_names import FILE_NAME
from gateway.settings import Settings, parse_settings
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


async def _stopped_with_entry(aiohttp_client: Any, settings: Settings, field: str,
                              value: object) -> tuple[str, Path, str]:
    """(The id of a prepared transaction, the file of its stopped gateway, the file's text)
    once the entry's ``field`` is set to ``value`` there."""
    first = await ready_client(aiohttp_client, settings)
    tx, _, _ = await _prepared(first)
    await first.close()
    path = Path(settings.store.data_dir) / FILE_NAME
    doc = json.loads(path.read_bytes())
    [entry] = doc["prepared"].values()
    entry[field] = value
    path.write_text(json.dumps(doc))  # NaN and Infinity as Python's json writes them
    return tx, path, path.read_text()


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
                                 float("nan"), float("inf"), [1], 32503680000.0],
                         ids=["text", "null", "negative", "huge-int", "huge-float", "bool",
                              "nan", "inf", "list", "year-3000"])
async def test_an_entry_without_a_time_gets_the_time_it_was_found(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], bad: object) -> None:
    """An entry written before times were kept (or with one that is not a time, or a time
    after now: a clock set back): the transaction keeps its id, and its age counts from the
    start that found it, not hidden as 0 by a time to come."""
    settings = settings_factory()
    tx, path, _ = await _stopped_with_entry(aiohttp_client, settings, "prepared_at", bad)

    started = int(time.time())
    second = await ready_client(aiohttp_client, settings)
    [listed] = (await (await second.get("/v1/transactions")).json())["transactions"]
    assert listed["id"] == tx
    assert started <= _epoch(listed["prepared_at"]) <= time.time()
    [kept] = json.loads(path.read_bytes())["prepared"].values()
    assert started <= kept["prepared_at"] <= time.time(), "recorded for the next start"


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


def _set_aside(path: Path) -> list[str]:
    return [p.read_text() for p in path.parent.glob(FILE_NAME + ".damaged-*")]


@pytest.mark.parametrize("damage", ["deep", "truncated", "duplicate"])
async def test_a_damaged_file_does_not_stop_the_start_and_is_kept_aside(
        aiohttp_client: Any, settings_factory: Callable[..., Settings], damage: str) -> None:
    """A file the start cannot use whole (nested past the parser's depth, cut short, an entry
    given twice: which one is meant is not known) leaves the gateway serving, the prepared
    transaction for the admin under a new id, and the file as found copied aside: the start
    rewrites the file, and the ids the coordinators hold are not lost with it."""
    settings = settings_factory()
    first = await ready_client(aiohttp_client, settings)
    tx, _, _ = await _prepared(first)
    await first.close()
    path = Path(settings.store.data_dir) / FILE_NAME
    whole = path.read_text()
    number, entry = next(iter(json.loads(whole)["prepared"].items()))
    text = {"deep": "[" * 100_000 + "]" * 100_000, "truncated": whole[:len(whole) // 2],
            "duplicate": json.dumps({"prepared": {number: entry}})[:-2]
            + f', "{number}": ' + json.dumps({**entry, "owner": "partner:mallory"}) + "}}"
            }[damage]
    path.write_text(text)

    second = await ready_client(aiohttp_client, settings)
    [listed] = (await (await second.get("/v1/transactions")).json())["transactions"]
    assert listed["id"] != tx and listed["owner"] is None and listed["state"] == "prepared"
    assert _set_aside(path) == [text]
    assert (await second.post(f"/v1/transactions/{listed['id']}/abort")).status == 200


async def test_an_entry_with_a_bad_owner_keeps_its_id(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    """The id is what the coordinator holds: an owner that is not text leaves the
    transaction under its id, the admin's to resolve."""
    settings = settings_factory()
    tx, path, found = await _stopped_with_entry(aiohttp_client, settings, "owner", 5)

    second = await ready_client(aiohttp_client, settings)
    [listed] = (await (await second.get("/v1/transactions")).json())["transactions"]
    assert (listed["id"], listed["owner"]) == (tx, None)
    assert _set_aside(path) == [found]


async def test_a_prepare_that_cannot_be_recorded_names_no_path(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    """The 503 says why (the system's words) but not where: the data directory's path is
    the operator's, in the log, not a partner's to read."""
    settings = settings_factory()
    client = await ready_client(aiohttp_client, settings)
    await client.put("/v1/queues/private$/a", json={"transactional": True})
    tx = (await (await client.post("/v1/transactions")).json())["id"]
    (Path(settings.store.data_dir) / (FILE_NAME + ".tmp")).mkdir()  # no file can be made
    refused = await client.post(f"/v1/transactions/{tx}/prepare")
    assert refused.status == 503
    detail = (await refused.json())["detail"]
    assert "cannot be recorded" in detail and str(settings.store.data_dir) not in detail
    assert FILE_NAME not in detail
    shown = await (await client.get(f"/v1/transactions/{tx}")).json()
    assert shown["state"] == "active", "not prepared"


@pytest.mark.parametrize(("owner", "warned"), [("partner:gone", True), ("partner:a", False),
                                                ("admin", False)])
async def test_an_owner_no_longer_configured_is_logged(
        aiohttp_client: Any, settings_factory: Callable[..., Settings],
        caplog: pytest.LogCaptureFixture, owner: str, warned: bool) -> None:
    """A partner removed from the configuration while its transaction was prepared: only
    the admin can resolve it now, and the start says so."""
    settings = settings_factory()
    tx, _, _ = await _stopped_with_entry(aiohttp_client, settings, "owner", owner)
    keyed = parse_settings({
        "store": {"data_dir": settings.store.data_dir},
        "auth": {"admin_key_sha256": hashlib.sha256(b"admin-key").hexdigest()},
        "partners": [{"name": "a", "api_key_sha256": hashlib.sha256(b"a-key").hexdigest(),
                      "send": ["private$/a"]}]})
    caplog.set_level(logging.WARNING, logger="gateway")
    second = await ready_client(aiohttp_client, keyed)
    seen = [r.getMessage() for r in caplog.records if "not configured" in r.getMessage()]
    assert seen == ([f"prepared transaction {tx} belongs to partner 'gone', which is not "
                     "configured: only the admin can commit or abort it"] if warned else [])
    admin = {"Authorization": "Bearer admin-key"}
    [listed] = (await (await second.get("/v1/transactions", headers=admin)).json())[
        "transactions"]
    assert listed["id"] == tx, "kept under its id, for the admin"
