"""Range reads and registered consumers over REST, in-process on a real store: the contract
the Spark source relies on (same bytes every time, retention only past every consumer, 410
for a trimmed range, a head that never shows a sequence that could still change)."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Callable
from typing import Any

import pytest

from gateway.range_wire import CONTENT_TYPE, columns_of, decode_records
from gateway.settings import Settings
from tests.helpers import ready_client

PROBLEM = "application/problem+json"
Q = "/v1/queues/private$/feed"


@pytest.fixture
async def client(aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> Any:
    client = await ready_client(aiohttp_client, settings_factory())
    assert (await client.put(Q, json={})).status == 201
    return client


async def _send(client: Any, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        response = await client.post(f"{Q}/messages", data=f"m{i}".encode(),
                                     headers={"Mq-Label": f"l{i}", "Mq-Priority": "5",
                                              "Mq-Correlation-Id": f"c{i}"})
        assert response.status == 201, await response.text()


async def _range(client: Any, start: int, stop: int) -> tuple[bytes, Any]:
    response = await client.get(f"{Q}/range", params={"from": start, "to": stop})
    assert response.status == 200, await response.text()
    assert response.headers["Content-Type"] == CONTENT_TYPE
    return await response.read(), response.headers


async def _problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status == status, await response.text()
    assert response.headers["Content-Type"] == PROBLEM
    body: dict[str, Any] = await response.json(content_type=PROBLEM)
    return body


async def _count(client: Any, settled: int | None = None) -> int:
    """The queue's message count; with ``settled``, once retention (which runs behind the
    commits) has brought it there, within 30 s (an upper bound only)."""
    for _ in range(3000):
        count: int = (await (await client.get(Q)).json())["messages"]
        if settled is None or count == settled:
            return count
        await asyncio.sleep(0.01)
    return count


async def test_range_read_returns_the_same_records_every_time(client: Any) -> None:
    head = await (await client.get(f"{Q}/head")).json()
    assert (head["first"], head["next"], head["consumers"]) == (1, 1, {})
    await _send(client, 5)
    first, headers = await _range(client, 1, 6)
    again, _ = await _range(client, 1, 6)
    assert first == again
    assert headers["Entrepot-Next"] == "6"
    records = decode_records(first)
    assert [r.seq for r in records] == [1, 2, 3, 4, 5]
    assert [r.body for r in records] == [b"m0", b"m1", b"m2", b"m3", b"m4"]
    label, priority, cls, correlation, sent, arrived, ctype, others = columns_of(records[2].meta)
    assert (label, priority, cls, correlation) == ("l2", 5, "MQMSG_CLASS_NORMAL", "c2")
    assert 0 < sent <= arrived and ctype == "application/octet-stream"
    shown = await (await client.get(f"{Q}/messages/{records[2].message_id}")).json()
    assert shown["seq"] == 3, "the id in the range is the message's id"
    # A range beyond the head ends at the head and says so.
    partial, headers = await _range(client, 4, 50)
    assert [r.seq for r in decode_records(partial)] == [4, 5]
    assert headers["Entrepot-Next"] == "6"
    as_json = await (await client.get(f"{Q}/range?from=2&to=4&format=json")).json()
    assert [m["seq"] for m in as_json["messages"]] == [2, 3] and as_json["next"] == 4


async def test_consumers_hold_retention_and_trimmed_ranges_are_gone(client: Any) -> None:
    await _send(client, 10)
    response = await client.put(f"{Q}/consumers/spark", json={"start": "earliest"})
    assert response.status == 201
    assert (await response.json())["position"] == 1
    again = await client.put(f"{Q}/consumers/spark", json={"start": "latest"})
    assert again.status == 200 and (await again.json())["position"] == 1, "registration is idempotent"
    late = await (await client.put(f"{Q}/consumers/audit", json={"start": 4})).json()
    assert late["position"] == 4

    # A log now: receives and deletes are refused, nothing changes.
    problem = await _problem(await client.post(f"{Q}/receive"), 409)
    assert "range consumers" in problem["detail"]
    assert await _count(client) == 10

    committed = await (await client.post(f"{Q}/consumers/spark/commit",
                                         json={"position": 8})).json()
    assert committed["position"] == 8 and committed["first"] == 4, "audit still holds 4"
    assert await _count(client, 7) == 7
    await client.post(f"{Q}/consumers/audit/commit", json={"position": 6})
    assert await _count(client, 5) == 5, "retention follows the slowest consumer"
    # What retention removed is the log's outflow.
    metrics = await (await client.get("/metrics")).text()
    assert 'entrepot_queue_messages_total{event="consumed",queue="private$/feed"} 5.0' \
        in metrics
    problem = await _problem(await client.get(f"{Q}/range?from=2&to=9"), 410)
    assert "[2, 6)" in problem["detail"] and problem["first"] == 6
    body, _ = await _range(client, 6, 11)
    assert [r.seq for r in decode_records(body)] == [6, 7, 8, 9, 10]
    # A late commit below the position changes nothing; one beyond the head is refused.
    stale = await (await client.post(f"{Q}/consumers/spark/commit", json={"position": 7})).json()
    assert stale["position"] == 8
    await _problem(await client.post(f"{Q}/consumers/spark/commit", json={"position": 99}), 409)
    listed = await (await client.get(f"{Q}/consumers")).json()
    assert listed["consumers"] == [{"name": "audit", "position": 6, "lag": 5},
                                   {"name": "spark", "position": 8, "lag": 3}]
    # Unregistering both makes it a queue again.
    assert (await client.delete(f"{Q}/consumers/audit")).status == 204
    assert (await client.delete(f"{Q}/consumers/spark")).status == 204
    received = await (await client.post(f"{Q}/receive")).json()
    assert received["messages"][0]["seq"] == 6


async def test_purge_raises_the_floor(client: Any) -> None:
    await _send(client, 4)
    await client.put(f"{Q}/consumers/spark", json={})
    assert (await (await client.post(f"{Q}/purge")).json())["purged"] == 4
    await _send(client, 2, start=4)
    head = await (await client.get(f"{Q}/head")).json()
    assert (head["first"], head["next"]) == (5, 7)
    problem = await _problem(await client.get(f"{Q}/range?from=1&to=7"), 410)
    assert "[1, 5)" in problem["detail"]


async def test_prepared_transaction_holds_the_head(client: Any) -> None:
    await client.put("/v1/queues/private$/txq", json={"transactional": True})
    tx = (await (await client.post("/v1/transactions")).json())["id"]
    await client.post("/v1/queues/private$/txq/messages", data=b"held",
                      headers={"Mq-Transaction": tx})
    await client.post(f"/v1/transactions/{tx}/prepare")
    await client.post("/v1/queues/private$/txq/messages", data=b"later")
    head = await (await client.get("/v1/queues/private$/txq/head")).json()
    assert head["next"] == 1, "seq 1 is prepared: nothing at or after it may be read yet"
    await client.post(f"/v1/transactions/{tx}/commit")
    head = await (await client.get("/v1/queues/private$/txq/head")).json()
    assert head["next"] == 3
    response = await client.get("/v1/queues/private$/txq/range?from=1&to=3")
    assert [r.body for r in decode_records(await response.read())] == [b"held", b"later"]


async def test_positions_and_floors_survive_a_restart(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    settings = settings_factory()
    first = await ready_client(aiohttp_client, settings)
    await first.put(Q, json={})
    await _send(first, 6)
    await first.put(f"{Q}/consumers/spark", json={})
    await first.post(f"{Q}/consumers/spark/commit", json={"position": 4})
    await first.close()
    second = await ready_client(aiohttp_client, settings)
    head = await (await second.get(f"{Q}/head")).json()
    assert {k: head[k] for k in ("queue", "first", "next", "consumers", "messages")} == {
        "queue": "private$/feed", "first": 4, "next": 7, "consumers": {"spark": 4},
        "messages": 3}
    assert head["average_bytes"] > 0
    await _problem(await second.post(f"{Q}/receive"), 409)


@pytest.mark.parametrize("query, fragment", [
    ("to=5", "from is required"),
    ("from=1", "to is required"),
    ("from=x&to=5", "from='x'"),
    ("from=-1&to=5", "from='-1'"),
    ("from=5&to=2", "below from"),
    ("from=1&to=100002", "wider than 100000"),  # one over the limit
    ("from=2&to=100003", "wider than 100000"),
    ("from=0&to=5", "from='0' is not a sequence number: they start at 1"),
    ("from=9223372036854775808&to=9223372036854775808",  # 2**63: past every sequence
     "from='9223372036854775808' is not a sequence number: they end at 9223372036854775807"),
    ("from=1&to=5&max_byte=1", "unknown query parameters: max_byte (a range takes format, "
     "from, max_bytes, to)"),
    ("from=1&to=2&format=csv", "format"),
    ("from=1&to=2&format=", "format='': expected records or json"),
    ("from=1&from=2&to=5", "from is given 2 times"),
    ("from=1&to=5&to=6", "to is given 2 times"),
    ("from=1&to=2&format=json&format=json", "format is given 2 times"),
])
async def test_bad_range_queries_are_refused(client: Any, query: str, fragment: str) -> None:
    problem = await _problem(await client.get(f"{Q}/range?{query}"), 400)
    assert fragment in problem["detail"]


async def test_the_last_sequence_number_is_beyond_the_head(client: Any) -> None:
    """The largest sequence (2**63 - 1, a Java long's) is a sequence like any other."""
    top = 2**63 - 1
    problem = await _problem(await client.get(f"{Q}/range?from={top}&to={top}"), 409)
    assert problem["type"].endswith("beyond-head") and problem["next"] == 1


async def test_a_range_as_wide_as_the_limit_is_served(client: Any) -> None:
    await _send(client, 3)
    data, _ = await _range(client, 1, 100_001)  # [1, 100001): 100,000 sequences, the limit
    assert [r.body for r in decode_records(data)] == [b"m0", b"m1", b"m2"]


@pytest.mark.parametrize("method, path, body, status", [
    ("PUT", "consumers/bad%20name", {}, 400),
    ("PUT", "consumers/a%0A", {}, 400),
    ("PUT", "consumers/spark", {"start": "middle"}, 400),
    ("PUT", "consumers/spark", {"start": 99}, 409),
    ("PUT", "consumers/spark", {"start": 0}, 400),
    ("POST", "consumers/ghost/commit", {"position": 1}, 404),
    ("GET", "consumers/ghost", None, 404),
    ("DELETE", "consumers/ghost", None, 404),
    ("POST", "head", None, 405),
    ("PUT", "consumers/spark", {"start": "earliest", "x": 1}, 400),
])
async def test_bad_consumer_requests_change_nothing(client: Any, method: str, path: str,
                                                    body: Any, status: int) -> None:
    response = await client.request(method, f"{Q}/{path}",
                                    data=json.dumps(body) if body is not None else None)
    assert response.status == status, await response.text()
    assert (await (await client.get(f"{Q}/consumers")).json())["consumers"] == []


async def test_a_record_removed_while_the_answer_is_written_cuts_it(
        client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Records are read from the store between the answer's writes, and a write lets other
    requests run: one removed meanwhile must not be read (its space may be reused), so the
    answer is cut and the reader sees no end marker. Records untouched need no second look."""
    import aiohttp
    from aiohttp import web

    from gateway.range_wire import END_OF_RANGE
    from gateway.web import rest_range
    from gateway.web.appkeys import STATE_KEY

    await _send(client, 6)
    state = client.app[STATE_KEY]
    qm = state.serving().queue_manager
    queue_id = qm.queue("private$/feed").queue_id
    monkeypatch.setattr(rest_range, "_FLUSH_BYTES", 1)  # a write after every record
    real_write = web.StreamResponse.write
    writes = 0

    async def write(self: web.StreamResponse, data: bytes) -> None:
        nonlocal writes
        writes += 1
        if writes == 2:  # the first record is out: another request takes the last one
            await qm.store.remove([qm.store.record(queue_id, 6)])
        await real_write(self, data)

    monkeypatch.setattr(web.StreamResponse, "write", write)
    response = await client.get(f"{Q}/range", params={"from": 1, "to": 7})
    assert response.status == 200
    try:
        data = await response.read()
    except aiohttp.ClientError:  # the connection is closed mid-answer
        data = b""
    assert not data.endswith(END_OF_RANGE)
    monkeypatch.setattr(web.StreamResponse, "write", real_write)
    async with aiohttp.ClientSession() as session:  # a new connection: that one was cut
        async with session.get(client.make_url(f"{Q}/range"),
                               params={"from": 1, "to": 7}) as again:
            data = await again.read()
    assert data.endswith(END_OF_RANGE)  # without a removal meanwhile: whole, 5 records
    assert [r.seq for r in decode_records(data)] == [1, 2, 3, 4, 5]


async def test_a_commit_with_an_unknown_field_is_refused_naming_it(client: Any) -> None:
    await _send(client, 2)
    assert (await client.put(f"{Q}/consumers/spark", json={"start": 1})).status == 201
    problem = await _problem(await client.post(f"{Q}/consumers/spark/commit",
                                               json={"position": 2, "extra": 1}), 400)
    assert "extra" in problem["detail"]
    assert (await (await client.get(f"{Q}/consumers/spark")).json())["position"] == 1


@pytest.mark.parametrize("method, path, allow", [
    ("POST", "range?from=1&to=2", "GET,HEAD"), ("PUT", "head", "GET,HEAD"),
    ("POST", "consumers", "GET,HEAD"), ("POST", "consumers/spark", "DELETE,GET,HEAD,PUT"),
    ("GET", "consumers/spark/commit", "POST")])
async def test_a_method_not_served_is_405_with_every_allowed_one(
        client: Any, method: str, path: str, allow: str) -> None:
    """HEAD wherever GET, as aiohttp's own 405 on the other routes says."""
    response = await client.request(method, f"{Q}/{path}")
    assert (response.status, response.headers["Allow"]) == (405, allow)
    problem = await _problem(response, 405)
    assert problem["type"].endswith("/method-not-allowed")
    assert problem["detail"] == f"method {method} is not served here (allowed: {allow})"


async def test_a_range_stops_after_max_bytes_and_says_where(client: Any) -> None:
    """``max_bytes`` bounds an answer by its records' size (one record at least, however
    large); ``Entrepot-Next`` says where it stopped, and asking on from there reads every
    record once."""
    for i in range(5):
        assert (await client.post(f"{Q}/messages", data=bytes([i]) * 1000)).status == 201
    read, start, nexts = [], 1, []
    while start < 6:
        response = await client.get(f"{Q}/range", params={"from": start, "to": 6,
                                                          "max_bytes": 2500})
        assert response.status == 200, await response.text()
        read += decode_records(await response.read())
        start = int(response.headers["Entrepot-Next"])
        nexts.append(start)
    assert nexts == [3, 5, 6]
    assert [(r.seq, r.body) for r in read] == [(i + 1, bytes([i]) * 1000) for i in range(5)]
    data, headers = await _range(client, 1, 6)  # without it: the whole range
    assert len(decode_records(data)) == 5 and headers["Entrepot-Next"] == "6"
    one = await client.get(f"{Q}/range", params={"from": 2, "to": 6, "max_bytes": 1})
    assert [r.seq for r in decode_records(await one.read())] == [2]
    assert one.headers["Entrepot-Next"] == "3"
    for bad in ("0", "-1", "1e3", "x"):
        problem = await _problem(await client.get(
            f"{Q}/range", params={"from": 1, "to": 6, "max_bytes": bad}), 400)
        assert "max_bytes" in problem["detail"]


async def test_a_json_range_stops_after_8_mib(client: Any) -> None:
    """A JSON answer is built whole in memory: it stops after 8 MiB of records (one record
    at least), as ``max_bytes`` would, and says where; a smaller ``max_bytes`` still holds."""
    for _ in range(4):
        sent = await client.post(f"{Q}/messages", data=io.BytesIO(b"j" * (3 << 20)))
        assert sent.status == 201, await sent.text()
    response = await client.get(f"{Q}/range", params={"from": 1, "to": 5, "format": "json"})
    assert response.status == 200, await response.text()
    answer = await response.json()
    assert [m["seq"] for m in answer["messages"]] == [1, 2]
    assert answer["next"] == 3 and response.headers["Entrepot-Next"] == "3"
    smaller = await (await client.get(f"{Q}/range", params={
        "from": 3, "to": 5, "format": "json", "max_bytes": 1})).json()
    assert [m["seq"] for m in smaller["messages"]] == [3] and smaller["next"] == 4


async def test_a_range_from_beyond_next_is_refused(client: Any) -> None:
    """An answer that ended at a ``from`` beyond ``next`` would have its reader skip what
    arrives between them: 409, naming ``next`` (``from = next`` is an empty answer)."""
    await _send(client, 3)
    problem = await _problem(await client.get(f"{Q}/range?from=9&to=12"), 409)
    assert "from=9 is beyond the queue's next sequence 4" in problem["detail"]
    assert problem["next"] == 4
    data, headers = await _range(client, 4, 9)
    assert decode_records(data) == [] and headers["Entrepot-Next"] == "4"


async def test_a_start_outside_the_queue_is_refused_as_a_range_or_a_commit_is(
        client: Any) -> None:
    await _send(client, 3)
    beyond = await _problem(await client.put(f"{Q}/consumers/late", json={"start": 5}), 409)
    assert beyond["type"].endswith("/beyond-head") and beyond["next"] == 4
    assert "start 5" in beyond["detail"]
    at_head = await client.put(f"{Q}/consumers/late", json={"start": 4})
    assert at_head.status == 201 and (await at_head.json())["position"] == 4
    await client.put(f"{Q}/consumers/spark", json={"start": 1})
    await client.post(f"{Q}/consumers/spark/commit", json={"position": 3})
    await client.post(f"{Q}/consumers/late/commit", json={"position": 4})
    assert await _count(client, 1) == 1
    gone = await _problem(await client.put(f"{Q}/consumers/early", json={"start": 1}), 410)
    assert gone["first"] == 3
    listed = await (await client.get(f"{Q}/consumers")).json()
    assert [c["name"] for c in listed["consumers"]] == ["late", "spark"], "nothing registered"
