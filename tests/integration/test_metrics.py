"""``/metrics`` read at scrape time from the gateway's state: queue depth, bytes and age,
dead letters by class, quota, consumers, and the store writer's histograms; the per-queue
message counters, link counters and route labels, with label values bounded."""

from __future__ import annotations

import asyncio
import platform
import re
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

from gateway.settings import Settings
from tests.helpers import free_port, ready_client


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
    for _ in range(3):
        await client.post("/v1/queues/feed/messages", data=b"row")
    [spark] = (await (await client.get("/v1/queues/feed/consumers")).json())["consumers"]
    assert spark["lag"] == 3
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
    assert _value(text, "entrepot_consumer_lag", queue="feed", consumer="spark") == spark["lag"]
    assert _value(text, "entrepot_dead_letters", queue="system$;deadletter",
                  **{"class": "MQMSG_CLASS_NACK_RECEIVE_TIMEOUT"}) == 1
    assert _value(text, "entrepot_store_used_bytes") > 0
    assert _value(text, "entrepot_store_sync_seconds_count") >= 5
    assert _value(text, "entrepot_store_batch_jobs_bucket", le="+Inf") >= 5
    assert "entrepot_queue_messages{queue=\"private$/entrepot_dedup$\"}" not in text


async def _scrape_until(client: Any, done: Callable[[str], bool]) -> str:
    text = ""
    for _ in range(600):  # an upper bound only
        text = await (await client.get("/metrics")).text()
        if done(text):
            break
        await asyncio.sleep(0.05)
    return text


def _types(text: str) -> dict[str, str]:
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


async def test_queue_message_counters_count_each_event_where_it_happens(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    client = await ready_client(aiohttp_client, settings_factory())
    await client.put("/v1/queues/orders", json={})
    for _ in range(3):
        await client.post("/v1/queues/orders/messages", data=b"x")
    await client.post("/v1/queues/orders/messages", data=b"late", headers={
        "Mq-Time-To-Be-Received": "0.05", "Mq-Journal": "deadletter"})
    taken = await (await client.post("/v1/queues/orders/receive?max=1")).json()
    assert len(taken["messages"]) == 1
    await client.get("/v1/queues/orders/messages")  # a browse takes nothing

    def expired(text: str) -> bool:
        return 'entrepot_queue_messages_total{event="expired",queue="orders"} 1.0' in text

    await _scrape_until(client, expired)
    purged = await (await client.post("/v1/queues/orders/purge")).json()
    assert purged == {"purged": 2}
    text = await (await client.get("/metrics")).text()
    types = _types(text)
    assert types["entrepot_queue_messages_total"] == "counter"
    counts = {event: _value(text, "entrepot_queue_messages_total", queue="orders", event=event)
              for event in ("sent", "received", "expired", "dead_lettered", "purged")}
    assert counts == {"sent": 4, "received": 1, "expired": 1, "dead_lettered": 1, "purged": 2}
    assert _value(text, "entrepot_queue_messages_total", queue="system$;deadletter",
                  event="sent") == 1
    assert "entrepot_" not in "".join(re.findall(r'queue="([^"]*)",?', text)), \
        "internal queues are not counted"
    assert "_created" not in text, "counters come without _created samples"
    assert types["entrepot_mapping_reloads_total"] == "counter"
    assert types["entrepot_mapping_rejected_files_total"] == "counter"
    assert _value(text, "entrepot_mapping_reloads_total") >= 1
    assert _value(text, "entrepot_build_info", version=version("entrepot"),
                  python=platform.python_version()) == 1


async def test_queue_labels_are_bounded(aiohttp_client: Any,
                                        settings_factory: Callable[..., Settings]) -> None:
    client = await ready_client(aiohttp_client, settings_factory(metrics__queues_max=2))
    for name in ("q1", "q2", "q3", "q4"):
        await client.put(f"/v1/queues/{name}", json={})
    await client.put("/v1/queues/q4/consumers/spark", json={})
    for name, sends in (("q1", 1), ("q2", 2), ("q3", 3), ("q4", 4)):
        for _ in range(sends):
            await client.post(f"/v1/queues/{name}/messages", data=b"x")
    text = await (await client.get("/metrics")).text()
    assert _value(text, "entrepot_queue_messages_total", queue="q1", event="sent") == 1
    assert _value(text, "entrepot_queue_messages_total", queue="q2", event="sent") == 2
    assert _value(text, "entrepot_queue_messages_total", queue="_other", event="sent") == 7
    named = set(re.findall(r'^entrepot_queue_messages_total\{[^}]*queue="([^"]*)"', text, re.M))
    assert named == {"q1", "q2", "_other"}
    # The gauges of queues now use the same labels: the rest summed (their ages the largest).
    for gauge in ("entrepot_queue_messages", "entrepot_queue_bytes",
                  "entrepot_queue_oldest_age_seconds"):
        shown = set(re.findall(rf'^{gauge}\{{queue="([^"]*)"\}}', text, re.M))
        assert shown == {"q1", "q2", "_other"}, (gauge, shown)
    assert _value(text, "entrepot_queue_messages", queue="q2") == 2
    assert _value(text, "entrepot_queue_messages", queue="_other") == 7
    assert (_value(text, "entrepot_queue_bytes", queue="_other")
            >= 7 * _value(text, "entrepot_queue_bytes", queue="q1"))
    # A consumer of a queue under _other: one lag, the largest, and no position.
    assert _value(text, "entrepot_consumer_lag", queue="_other", consumer="_other") == 4
    assert "entrepot_consumer_position{" not in text


async def test_dead_letters_of_a_queue_past_the_bound_are_under_other(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    client = await ready_client(aiohttp_client, settings_factory(metrics__queues_max=1))
    await client.put("/v1/queues/q1", json={})
    await client.post("/v1/queues/q1/messages", data=b"x")
    await client.post("/v1/queues/q1/messages", data=b"late", headers={
        "Mq-Time-To-Be-Received": "0.05", "Mq-Journal": "deadletter"})
    text = await _scrape_until(client, lambda text: "entrepot_dead_letters{" in text)
    dead = set(re.findall(r'^entrepot_dead_letters\{[^}]*queue="([^"]*)"', text, re.M))
    assert dead == {"_other"}, dead
    assert _value(text, "entrepot_dead_letters", queue="_other",
                  **{"class": "MQMSG_CLASS_NACK_RECEIVE_TIMEOUT"}) == 1


async def test_route_labels_separate_send_receive_browse_and_purge(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    client = await ready_client(aiohttp_client, settings_factory())
    await client.put("/v1/queues/orders", json={})
    for _ in range(3):
        await client.post("/v1/queues/orders/messages", data=b"x")
    await client.get("/v1/queues/orders/messages")
    for _ in range(2):  # the second waits (a long poll) and finds nothing
        await client.post("/v1/queues/orders/receive?max=5&wait=0.1")
    await client.post("/v1/queues/private$/orders/purge")
    text = await (await client.get("/metrics")).text()
    count = "entrepot_http_request_duration_seconds_count"
    assert _value(text, count, route="/v1/queues/{path}/messages", method="POST") == 3
    assert _value(text, count, route="/v1/queues/{path}/messages", method="GET") == 1
    assert _value(text, count, route="/v1/queues/{path}/receive", method="POST") == 2
    assert _value(text, count, route="/v1/queues/{path}/purge", method="POST") == 1
    assert _value(text, count, route="/v1/queues/{path}", method="PUT") == 1
    assert _value(text, "entrepot_http_requests_total", route="/v1/queues/{path}/receive",
                  method="POST", status="200") == 2
    assert "{tail" not in text


async def test_link_metrics_count_retries_with_bounded_snake_case_labels(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    dead = free_port()  # nothing listens there
    client = await ready_client(aiohttp_client, settings_factory(
        metrics__queues_max=1, outbound__allow=[f"http://127.0.0.1:{dead}"],
        links__retry_max="200ms"))
    for queue in ("a", "b"):
        sent = await client.post("/v1/messages", data=b"x", headers={
            "Mq-Destination": f"DIRECT=HTTP://127.0.0.1:{dead}/msmq/private$/{queue}"})
        assert sent.status == 201, await sent.text()

    async def retried() -> list[dict[str, Any]]:
        links = (await (await client.get("/v1/links")).json())["links"]
        return links if len(links) == 2 and all(x["retries"] >= 2 for x in links) else []

    links: list[dict[str, Any]] = []
    for _ in range(600):  # an upper bound only
        links = await retried()
        if links:
            break
        await asyncio.sleep(0.05)
    assert links, "both links retry"
    text = await (await client.get("/metrics")).text()
    types = _types(text)
    assert types["entrepot_link_retries_total"] == "counter"
    assert types["entrepot_link_acknowledged_total"] == "counter"
    destinations = set(re.findall(r'^entrepot_link_\w+\{[^}]*destination="([^"]*)"', text,
                                  re.M))
    assert len(destinations) == 2 and "_other" in destinations, destinations
    [named] = destinations - {"_other"}
    assert named in {x["destination"] for x in links}
    assert _value(text, "entrepot_link_retries_total", destination=named) >= 2
    assert _value(text, "entrepot_link_retries_total", destination="_other") >= 2
    assert _value(text, "entrepot_link_backlog", destination="_other") == 1
    for destination in (named, "_other"):
        assert _value(text, "entrepot_link_state", destination=destination,
                      state="waiting_to_connect") == 1
    states = set(re.findall(r'^entrepot_link_state\{.*state="([^"]*)"', text, re.M))
    assert states == {"active", "waiting_to_connect", "inactive", "paused"}


async def test_a_transaction_counts_its_sends_and_receives_at_commit_only(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    client = await ready_client(aiohttp_client, settings_factory())
    await client.put("/v1/queues/private$/a", json={"transactional": True})
    await client.put("/v1/queues/private$/b", json={"transactional": True})
    await client.post("/v1/queues/private$/a/messages", data=b"order")
    tx = str((await (await client.post("/v1/transactions")).json())["id"])
    got = await (await client.post("/v1/queues/private$/a/receive",
                                   headers={"Mq-Transaction": tx})).json()
    assert len(got["messages"]) == 1
    sent = await client.post("/v1/queues/private$/b/messages", data=b"reply",
                             headers={"Mq-Transaction": tx})
    assert sent.status == 202
    text = await (await client.get("/metrics")).text()
    name = "entrepot_queue_messages_total"
    assert _value(text, name, queue="private$/a", event="received") == 0
    assert f'{name}{{event="sent",queue="private$/b"}}' not in text
    assert (await client.post(f"/v1/transactions/{tx}/commit")).status == 200
    text = await (await client.get("/metrics")).text()
    assert _value(text, name, queue="private$/a", event="received") == 1
    assert _value(text, name, queue="private$/b", event="sent") == 1


async def test_every_route_label_is_a_path_of_the_openapi_document(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    """Route labels are the templates ``/v1/openapi.json`` names (a transaction's commit,
    abort and prepare apart, SRMP under its virtual directory), or ``unmatched`` for what
    the API does not serve: an unknown action or path never becomes a label value."""
    dead = free_port()  # nothing listens there
    client = await ready_client(aiohttp_client, settings_factory(
        outbound__allow=[f"http://127.0.0.1:{dead}"]))
    spec = set((await (await client.get("/v1/openapi.json")).json())["paths"])
    await client.put("/v1/queues/private$/a", json={"transactional": True})
    for action in ("commit", "abort", "prepare"):
        tx = str((await (await client.post("/v1/transactions")).json())["id"])
        assert (await client.post(f"/v1/transactions/{tx}/{action}")).status == 200
    assert (await client.post(f"/v1/transactions/{tx}/bogus-action")).status == 404
    sent = await client.post("/v1/messages", data=b"x", headers={
        "Mq-Destination": f"DIRECT=HTTP://127.0.0.1:{dead}/msmq/private$/q"})
    assert sent.status == 201, await sent.text()
    [link] = (await (await client.get("/v1/links")).json())["links"]
    for action in ("pause", "resume", "bogus-action"):
        await client.post(f"/v1/links/{link['id']}/{action}")
    srmp = await client.post("/msmq/private$/a", data=b"not an SRMP message",
                             headers={"Content-Type": "text/xml"})
    assert srmp.status < 500
    assert (await client.post("/MSMQ/private$/a", data=b"x")).status < 500
    assert (await client.get("/v1/queues/private$/a/bogus-leaf")).status == 404
    assert (await client.get("/no/such/path")).status == 404
    text = await (await client.get("/metrics")).text()
    routes = set(re.findall(r'^entrepot_http_requests_total\{[^}]*route="([^"]*)"', text, re.M))
    assert routes - spec == {"unmatched"}, routes - spec
    for path in ("/v1/transactions/{id}/commit", "/v1/transactions/{id}/abort",
                 "/v1/transactions/{id}/prepare", "/v1/links/{id}/pause",
                 "/v1/links/{id}/resume", "/msmq/{path}", "/v1/queues/{path}"):
        assert path in routes, path
    count = "entrepot_http_request_duration_seconds_count"
    assert _value(text, count, route="/msmq/{path}", method="POST") == 2
    assert _value(text, count, route="/v1/transactions/{id}/commit", method="POST") == 1
