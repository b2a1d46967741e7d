"""The status page: its JSON in-process (queues, dead letters by class, recent errors, the
admin credential), and the page itself loaded in a real headless Chromium that runs its
script against a real gateway and shows what the gateway holds."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.logs import server_log
from gateway.settings import Settings
from tests.browser import Browser, find_browser, parse, table_rows
from tests.helpers import GatewayProcess, free_port, ready_client

KEY = "ui-admin-key"
BASIC = {"Authorization": "Basic " + base64.b64encode(f"ops:{KEY}".encode()).decode()}


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


async def test_status_json_and_the_admin_credential(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    client = await ready_client(aiohttp_client, settings_factory(auth__admin_key_sha256=_sha(KEY)))
    refused = await client.get("/ui")
    assert refused.status == 401 and "Basic" in refused.headers["WWW-Authenticate"]
    wrong = {"Authorization": "Basic " + base64.b64encode(b"ops:nope").decode()}
    assert (await client.get("/ui/status.json", headers=wrong)).status == 401
    page = await client.get("/ui", headers=BASIC)
    assert page.status == 200 and "<table id=\"queues\">" in await page.text()
    bearer = {"Authorization": f"Bearer {KEY}"}
    await client.put("/v1/queues/orders", json={}, headers=bearer)
    for _ in range(3):
        await client.post("/v1/queues/orders/messages", data=b"x", headers=bearer)
    await client.post("/v1/queues/orders/messages", data=b"late", headers={
        **bearer, "Mq-Time-To-Be-Received": "0.05", "Mq-Journal": "deadletter"})
    server_log.warning("disk nearly full (test)")
    doc: dict[str, Any] = {}
    for _ in range(600):  # the expiry runs in the background (an upper bound only)
        doc = await (await client.get("/ui/status.json", headers=BASIC)).json()
        if doc["dead_letters"]:
            break
        await asyncio.sleep(0.05)
    queues = {q["path"]: q for q in doc["queues"]}
    assert queues["orders"]["messages"] == 3 and queues["orders"]["oldest_age_s"] >= 0
    assert not any("entrepot_" in path for path in queues), "internal queues stay hidden"
    assert doc["dead_letters"] == [{"queue": "system$;deadletter",
                                    "class": "MQMSG_CLASS_NACK_RECEIVE_TIMEOUT", "messages": 1}]
    # Newest first; under a loaded machine the gateway may have warned of something since.
    assert "disk nearly full (test)" in [e["message"] for e in doc["errors"]]
    assert doc["ready"] and doc["store"]["used_bytes"] > 0


async def test_status_json_has_version_uptime_disk_and_message_rates(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    client = await ready_client(aiohttp_client, settings_factory(auth__admin_key_sha256=_sha(KEY)))
    first = await (await client.get("/ui/status.json", headers=BASIC)).json()
    assert first["version"] == version("entrepot") and first["uptime_s"] >= 0
    assert 0 < first["disk"]["free_bytes"] <= first["disk"]["total_bytes"]
    assert first["queues"] and all(q["sent_per_s"] == 0 for q in first["queues"]), \
        "nothing sent yet: a rate of 0, not a missing one"
    bearer = {"Authorization": f"Bearer {KEY}"}
    await client.put("/v1/queues/orders", json={}, headers=bearer)
    for _ in range(3):
        await client.post("/v1/queues/orders/messages", data=b"x", headers=bearer)
    await client.post("/v1/queues/orders/receive", headers=bearer)
    second = await (await client.get("/ui/status.json", headers=BASIC)).json()
    [orders] = [q for q in second["queues"] if q["path"] == "orders"]
    # Per second since start (under a minute ago; rounded to 3 decimals): both moved, sends
    # thrice as much.
    assert orders["sent_per_s"] > 0 and orders["received_per_s"] > 0
    assert abs(orders["sent_per_s"] - 3 * orders["received_per_s"]) <= 0.005


async def test_one_look_at_the_status_gives_message_rates(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    """A script reading the status once gets rates: per second since start until a sample
    a minute old exists."""
    client = await ready_client(aiohttp_client, settings_factory(auth__admin_key_sha256=_sha(KEY)))
    bearer = {"Authorization": f"Bearer {KEY}"}
    await client.put("/v1/queues/orders", json={}, headers=bearer)
    for _ in range(3):
        await client.post("/v1/queues/orders/messages", data=b"x", headers=bearer)
    await client.post("/v1/queues/orders/receive", headers=bearer)
    doc = await (await client.get("/ui/status.json", headers=BASIC)).json()
    [orders] = [q for q in doc["queues"] if q["path"] == "orders"]
    assert orders["sent_per_s"] > 0 and orders["received_per_s"] > 0, orders
    assert abs(orders["sent_per_s"] - 3 * orders["received_per_s"]) <= 0.005
    # Averaged since start: no more than the messages over the gateway's uptime so far.
    assert orders["sent_per_s"] >= 3 / (doc["uptime_s"] + 1)


@pytest.mark.skipif(find_browser() is None and not os.environ.get("CI"),
                    reason="no Chromium here (CI installs chromium-headless-shell)")
async def test_the_page_in_a_headless_browser(tmp_path: Path) -> None:
    browser = find_browser()
    assert browser is not None, "CI must have a headless Chromium (see .ci/run)"
    config = tmp_path / "entrepot.toml"
    config.write_text(f'[auth]\nadmin_key_sha256 = "{_sha(KEY)}"\n')
    gw = GatewayProcess(tmp_path / "data", extra_args=["--config", str(config)])
    try:
        await asyncio.to_thread(gw.wait_ready)
        bearer = {"Authorization": f"Bearer {KEY}"}
        async with aiohttp.ClientSession(headers=bearer) as http:
            await http.put(f"{gw.url}/v1/queues/browsed", json={})
            for _ in range(7):
                await http.post(f"{gw.url}/v1/queues/browsed/messages", data=b"body")
        async with Browser(browser, tmp_path / "profile") as page:
            await page.open(gw.url + "/ui", bearer)
            await page.wait_for("document.body.dataset.loaded === '1'")
            rows = parse(await page.evaluate(table_rows("queues")))
            assert ["browsed", "7"] == rows[[r[0] for r in rows].index("browsed")][:2]
            assert (await page.evaluate("document.getElementById('summary').className")
                    == "ok")
            assert parse(await page.evaluate(table_rows("links"))) == [["no outgoing links"]]
            async with aiohttp.ClientSession(headers=bearer) as http:  # refreshed live
                await http.post(f"{gw.url}/v1/queues/browsed/messages", data=b"one more")
            await page.wait_for("[...document.querySelectorAll('#queues tbody tr')].some("
                                "r => r.children[0].textContent === 'browsed' && "
                                "r.children[1].textContent === '8')", timeout=10)
    finally:
        gw.stop()


@pytest.mark.skipif(find_browser() is None and not os.environ.get("CI"),
                    reason="no Chromium here (CI installs chromium-headless-shell)")
async def test_the_page_speaks_human_units_and_shows_a_failing_link(tmp_path: Path) -> None:
    """Sizes in KiB/MiB, ages as "... ago", the version, uptime and free disk; a failing
    link highlighted with the id ``link pause`` takes, and its WARNING in recent errors."""
    browser = find_browser()
    assert browser is not None, "CI must have a headless Chromium (see .ci/run)"
    dead = free_port()  # nothing listens there
    config = tmp_path / "entrepot.toml"
    config.write_text(f'[auth]\nadmin_key_sha256 = "{_sha(KEY)}"\n'
                      f'[outbound]\nallow = ["http://127.0.0.1:{dead}"]\n'
                      '[links]\nretry_max = "200ms"\n')
    gw = GatewayProcess(tmp_path / "data", extra_args=["--config", str(config)])
    try:
        await asyncio.to_thread(gw.wait_ready)
        bearer = {"Authorization": f"Bearer {KEY}"}
        async with aiohttp.ClientSession(headers=bearer) as http:
            await http.put(f"{gw.url}/v1/queues/sized", json={})
            await http.post(f"{gw.url}/v1/queues/sized/messages", data=b"x" * 300_000)
            sent = await http.post(f"{gw.url}/v1/messages", data=b"x", headers={
                "Mq-Destination": f"DIRECT=HTTP://127.0.0.1:{dead}/msmq/private$/q"})
            assert sent.status == 201, await sent.text()
            links = (await (await http.get(f"{gw.url}/v1/links")).json())["links"]
        [link] = links
        async with Browser(browser, tmp_path / "profile") as page:
            await page.open(gw.url + "/ui", bearer)
            await page.wait_for("[...document.querySelectorAll('#errors tbody tr')].some("
                                "r => r.textContent.includes('link to'))")
            rows = parse(await page.evaluate(table_rows("queues")))
            sized = rows[[r[0] for r in rows].index("sized")]
            assert sized[1] == "1" and sized[2].endswith(" KiB"), sized
            assert sized[3].endswith(" ago"), sized
            summary = await page.evaluate("document.getElementById('summary').textContent")
            assert f"entrepot {version('entrepot')}" in summary, summary
            assert " up " in summary and " free" in summary and "iB" in summary, summary
            await page.wait_for("document.querySelector('#links tbody tr.bad') !== null")
            failing = parse(await page.evaluate(
                "JSON.stringify([...document.querySelector('#links tbody tr.bad').children]"
                ".map(c => c.textContent))"))
            assert failing[0] == link["id"], (failing, link)
            assert link["destination"] in failing and "waiting to connect" in failing
    finally:
        gw.stop()
