"""The REST API for queues and messages, in-process (pytest-aiohttp) on a real store."""

from __future__ import annotations

import asyncio
import base64
import io
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import pytest

from gateway.settings import Settings
from tests.helpers import ready_client

PROBLEM = "application/problem+json"


@pytest.fixture
async def client(aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> Any:
    return await ready_client(aiohttp_client, settings_factory())


async def _problem(response: Any, status: int) -> dict[str, Any]:
    assert response.status == status, await response.text()
    assert response.headers["Content-Type"] == PROBLEM
    body: dict[str, Any] = await response.json(content_type=PROBLEM)
    return body


async def test_system_queues_exist_and_cannot_be_deleted(client: Any) -> None:
    names = {q["path"] for q in (await (await client.get("/v1/queues")).json())["queues"]}
    assert {"system$;deadletter", "system$;deadxact", "system$;journal",
            "private$/order_queue$"} <= names
    for name in ("system$;deadletter", "private$/order_queue$"):
        problem = await _problem(await client.delete(f"/v1/queues/{name}"), 403)
        assert "system queue" in problem["detail"]


async def test_queue_create_update_show_list_delete(client: Any) -> None:
    response = await client.put("/v1/queues/private$/Orders",
                                json={"transactional": False, "quota": "1MiB", "label": "o"})
    assert response.status == 201
    body = await response.json()
    assert body["path"] == "private$/Orders"
    assert body["quota"] == 1 << 20
    response = await client.put("/v1/queues/PRIVATE$/orders", json={"label": "renamed"})
    assert response.status == 200
    shown = await (await client.get("/v1/queues/private$\\ORDERS")).json()
    assert shown["label"] == "renamed"
    assert (shown["messages"], shown["bytes"]) == (0, 0)
    assert (await client.delete("/v1/queues/private$/orders")).status == 204
    await _problem(await client.get("/v1/queues/private$/orders"), 404)


@pytest.mark.parametrize("body, fragment", [
    ({"transactional": "yes"}, "transactional"),
    ({"quota": "lots"}, "quota"),
    ({"colour": "red"}, "unknown queue properties"),
])
async def test_bad_queue_bodies_are_refused(client: Any, body: dict[str, Any],
                                            fragment: str) -> None:
    problem = await _problem(await client.put("/v1/queues/q1", json=body), 400)
    assert fragment in problem["detail"]
    await _problem(await client.get("/v1/queues/q1"), 404)


@pytest.mark.parametrize("name", ["a b", "x" * 125, "private$/", "a,b", "private$", "a;b"])
async def test_bad_queue_names_are_refused(client: Any, name: str) -> None:
    problem = await _problem(await client.put(f"/v1/queues/{name}", json={}), 400)
    assert problem["type"].endswith("MQ_ERROR_ILLEGAL_QUEUE_PATHNAME")


@pytest.mark.parametrize("encoded, char", [("del%7Fq", "'\\x7f'"), ("a%0Ab", "'\\n'"),
                                           ("a%0Db", "'\\r'")])
async def test_control_characters_in_a_queue_name_are_refused_by_name(
        client: Any, encoded: str, char: str) -> None:
    """DEL and line breaks too: the route matches every character, the name rule names it.
    (MS-MQMQ allows DEL in a name: only a new queue is refused one, an existing is served.)"""
    problem = await _problem(await client.put(f"/v1/queues/{encoded}", json={}), 400)
    assert problem["type"].endswith("MQ_ERROR_ILLEGAL_QUEUE_PATHNAME")
    assert char in problem["detail"], problem
    await _problem(await client.get(f"/v1/queues/{encoded}"), 404 if "7F" in encoded else 400)
    listed = (await (await client.get("/v1/queues")).json())["queues"]
    assert not [q["path"] for q in listed if any(c < " " or c == "\x7f" for c in q["path"])]


async def test_send_receive_round_trip_with_properties(client: Any) -> None:
    await client.put("/v1/queues/inbox", json={})
    response = await client.post("/v1/queues/inbox/messages", data=b"hello", headers={
        "Mq-Label": "greeting", "Mq-Priority": "5", "Mq-Correlation-Id": "c-1",
        "Mq-Response-Queue": "private$/replies", "Mq-App-Specific": "42",
        "Content-Type": "text/plain", "Mq-Acknowledge": "MQMSG_ACKNOWLEDGMENT_FULL_RECEIVE"})
    assert response.status == 201
    sent = await response.json()
    assert sent["queue"] == "inbox" and sent["seq"] == 1
    assert sent["id"].startswith("{") and "}\\" in sent["id"]
    got = await (await client.post("/v1/queues/inbox/receive")).json()
    [message] = got["messages"]
    assert base64.b64decode(message["body_base64"]) == b"hello"
    assert (message["id"], message["label"], message["priority"]) == (sent["id"], "greeting", 5)
    assert message["correlation_id"] == "c-1"
    assert message["response_queue"] == "private$/replies"
    assert message["app_specific"] == 42
    assert message["content_type"] == "text/plain"
    assert message["class"] == "MQMSG_CLASS_NORMAL"
    assert message["delivery"] == "recoverable"
    assert message["properties"]["acknowledge"] == 0x0E
    assert message["sent_at"].endswith("Z") and message["arrived_at"].endswith("Z")
    again = await (await client.post("/v1/queues/inbox/receive")).json()
    assert again == {"messages": []}


async def test_priority_then_arrival_order(client: Any) -> None:
    await client.put("/v1/queues/prio", json={})
    for body, priority in ((b"low", 1), (b"high-1", 6), (b"mid", 3), (b"high-2", 6)):
        await client.post("/v1/queues/prio/messages", data=body,
                          headers={"Mq-Priority": str(priority)})
    got = await (await client.post("/v1/queues/prio/receive?max=10")).json()
    assert [base64.b64decode(m["body_base64"]) for m in got["messages"]] == [
        b"high-1", b"high-2", b"mid", b"low"]


async def test_transactional_queue_rules(client: Any) -> None:
    await client.put("/v1/queues/private$/tx", json={"transactional": True})
    await client.put("/v1/queues/plain", json={})
    # Outside an explicit transaction a send to a transactional queue is a single-message one.
    response = await client.post("/v1/queues/private$/tx/messages", data=b"a",
                                 headers={"Mq-Priority": "6"})
    assert response.status == 201
    problem = await _problem(await client.post("/v1/queues/plain/messages", data=b"b",
                                               headers={"Mq-Transaction": "single"}), 400)
    assert problem["class"] == "MQMSG_CLASS_NACK_NOT_TRANSACTIONAL_Q"
    problem = await _problem(await client.post("/v1/queues/private$/tx/messages", data=b"c",
                                               headers={"Mq-Transaction": "none"}), 400)
    assert problem["class"] == "MQMSG_CLASS_NACK_NOT_TRANSACTIONAL_MSG"
    got = await (await client.post("/v1/queues/private$/tx/receive")).json()
    assert got["messages"][0]["priority"] == 0, "transactional messages use priority 0"
    assert got["messages"][0]["properties"]["transactional"] is True


@pytest.mark.parametrize("headers, fragment", [
    ({"Mq-Priority": "9"}, "Mq-Priority"),
    ({"Mq-Priority": "high"}, "Mq-Priority"),
    ({"Mq-Label": "x" * 250}, "Mq-Label"),
    ({"Mq-Delivery": "fast"}, "Mq-Delivery"),
    ({"Mq-Time-To-Be-Received": "-1"}, "Mq-Time-To-Be-Received"),
    ({"Mq-Acknowledge": "SOMETIMES"}, "Mq-Acknowledge"),
    ({"Mq-Journal": "maybe"}, "Mq-Journal"),
    ({"Mq-App-Specific": "99999999999"}, "Mq-App-Specific"),
    ({"Mq-App-Specific": "4294967296"}, "Mq-App-Specific"),
    # Python's int() takes these; a number here is ASCII digits with an optional minus.
    ({"Mq-Priority": "\u0667"}, "Mq-Priority"),
    ({"Mq-App-Specific": "1_000"}, "Mq-App-Specific"),
    ({"Mq-Priority": "+1"}, "Mq-Priority"),
])
async def test_bad_headers_are_refused_and_store_nothing(client: Any, headers: dict[str, str],
                                                         fragment: str) -> None:
    await client.put("/v1/queues/strict", json={})
    problem = await _problem(await client.post("/v1/queues/strict/messages", data=b"x",
                                               headers=headers), 400)
    assert fragment in problem["detail"]
    assert (await (await client.get("/v1/queues/strict")).json())["messages"] == 0


async def test_nobody_sends_to_dead_letter_queues_or_journals(client: Any) -> None:
    for name in ("system$;deadletter", "system$;deadxact", "system$;journal"):
        problem = await _problem(await client.post(f"/v1/queues/{name}/messages", data=b"x"),
                                 403)
        assert problem["type"].endswith("MQ_ERROR_ACCESS_DENIED")


async def test_unknown_queue_and_unknown_transaction(client: Any) -> None:
    problem = await _problem(await client.post("/v1/queues/nowhere/messages", data=b"x"), 404)
    assert problem["type"].endswith("MQ_ERROR_QUEUE_NOT_FOUND")
    await client.put("/v1/queues/q", json={})
    await _problem(await client.post("/v1/queues/q/messages", data=b"x",
                                     headers={"Mq-Transaction": "tx-123"}), 404)


async def test_browse_get_and_delete_by_id(client: Any) -> None:
    await client.put("/v1/queues/b", json={})
    ids = [(await (await client.post("/v1/queues/b/messages", data=b"m%d" % i)).json())["id"]
           for i in range(5)]
    page = await (await client.get("/v1/queues/b/messages?after=0&limit=2")).json()
    assert [m["seq"] for m in page["messages"]] == [1, 2]
    page = await (await client.get(f"/v1/queues/b/messages?after={page['next']}")).json()
    assert [m["seq"] for m in page["messages"]] == [3, 4, 5]
    from urllib.parse import quote

    one = await client.get(f"/v1/queues/b/messages/{quote(ids[2], safe='')}")
    assert base64.b64decode((await one.json())["body_base64"]) == b"m2"
    assert (await client.delete(f"/v1/queues/b/messages/{quote(ids[2], safe='')}")).status == 204
    await _problem(await client.get(f"/v1/queues/b/messages/{quote(ids[2], safe='')}"), 404)
    got = await (await client.post("/v1/queues/b/receive?max=10")).json()
    assert [base64.b64decode(m["body_base64"]) for m in got["messages"]] == [
        b"m0", b"m1", b"m3", b"m4"]


async def test_purge_counts_and_empties(client: Any) -> None:
    await client.put("/v1/queues/p", json={})
    for i in range(7):
        await client.post("/v1/queues/p/messages", data=b"x")
    assert await (await client.post("/v1/queues/p/purge")).json() == {"purged": 7}
    assert (await (await client.get("/v1/queues/p")).json())["messages"] == 0


async def test_receive_waits_for_a_message(client: Any) -> None:
    await client.put("/v1/queues/w", json={})
    waiting = asyncio.create_task(client.post("/v1/queues/w/receive?wait=5"))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    await client.post("/v1/queues/w/messages", data=b"late")
    got = await (await waiting).json()
    assert base64.b64decode(got["messages"][0]["body_base64"]) == b"late"
    empty = await client.post("/v1/queues/w/receive?wait=0.2")
    assert (await empty.json()) == {"messages": []}


async def test_concurrent_receivers_never_share_a_message(client: Any) -> None:
    await client.put("/v1/queues/c", json={})
    for i in range(50):
        await client.post("/v1/queues/c/messages", data=b"%d" % i)
    results = await asyncio.gather(*(client.post("/v1/queues/c/receive?max=3&wait=1")
                                     for _ in range(30)))
    bodies = [base64.b64decode(m["body_base64"]) for r in results
              for m in (await r.json())["messages"]]
    assert sorted(bodies, key=int) == [b"%d" % i for i in range(50)]


async def test_queue_journal_keeps_received_messages(client: Any) -> None:
    await client.put("/v1/queues/j", json={"journal": True})
    await client.post("/v1/queues/j/messages", data=b"keep me")
    await client.post("/v1/queues/j/receive")
    journal = await (await client.get("/v1/queues/j;journal/messages")).json()
    assert [base64.b64decode(m["body_base64"]) for m in journal["messages"]] == [b"keep me"]


async def test_a_full_journal_does_not_block_receives(
        client: Any, caplog: pytest.LogCaptureFixture) -> None:
    """As in MSMQ, a copy the journal has no room for is not made: the message is received
    without it (a message larger than the whole journal quota once blocked its queue, every
    receive answering 507), counted, and a WARNING names the queue."""
    await client.put("/v1/queues/jq", json={"journal": True, "journal_quota": 4096})
    for body in (b"small", bytes(8000), b"after"):
        assert (await client.post("/v1/queues/jq/messages", data=body)).status == 201
    got = []
    for _ in range(3):
        response = await client.post("/v1/queues/jq/receive")
        assert response.status == 200, await response.text()
        got += [base64.b64decode(m["body_base64"]) for m in (await response.json())["messages"]]
    assert got == [b"small", bytes(8000), b"after"]
    journal = await (await client.get("/v1/queues/jq;journal/messages")).json()
    assert [base64.b64decode(m["body_base64"]) for m in journal["messages"]] == [
        b"small", b"after"]
    metrics = await (await client.get("/metrics")).text()
    assert 'entrepot_queue_messages_total{event="not_journaled",queue="jq"} 1.0' in metrics
    warned = [r.getMessage() for r in caplog.records if r.name == "entrepot.queues.journal"]
    assert len(warned) == 1 and "jq" in warned[0]


async def test_source_journaling_copies_to_the_machine_journal(client: Any) -> None:
    await client.put("/v1/queues/s", json={})
    sent = await (await client.post("/v1/queues/s/messages", data=b"x",
                                     headers={"Mq-Journal": "journal"})).json()
    journal = await (await client.get("/v1/queues/system$;journal/messages")).json()
    assert [m["id"] for m in journal["messages"]] == [sent["id"]]


async def test_queue_quota_answers_507_with_retry_after(client: Any) -> None:
    await client.put("/v1/queues/tiny", json={"quota": 2048})
    assert (await client.post("/v1/queues/tiny/messages", data=bytes(1000))).status == 201
    response = await client.post("/v1/queues/tiny/messages", data=bytes(1000))
    problem = await _problem(response, 507)
    assert response.headers["Retry-After"]
    assert problem["class"] == "MQMSG_CLASS_NACK_Q_EXCEED_QUOTA"
    assert "'tiny'" in problem["detail"], "the queue is named as its client knows it"


async def test_a_message_larger_than_the_whole_queue_quota_is_not_told_to_retry(
        client: Any) -> None:
    """It can never be stored there, empty queue or not: 507 without Retry-After, saying
    so, rather than a retry for ever."""
    await client.put("/v1/queues/tiny", json={"quota": 2048})
    response = await client.post("/v1/queues/tiny/messages", data=bytes(4096))
    problem = await _problem(response, 507)
    assert "Retry-After" not in response.headers
    assert problem["class"] == "MQMSG_CLASS_NACK_Q_EXCEED_QUOTA"
    assert "larger than the whole quota" in problem["detail"] and "'tiny'" in problem["detail"]


async def test_methods_not_allowed(client: Any) -> None:
    await client.put("/v1/queues/m", json={})
    response = await client.delete("/v1/queues/m/messages")
    assert response.status == 405
    assert response.headers["Content-Type"] == PROBLEM


async def test_express_messages_are_delivered(client: Any) -> None:
    await client.put("/v1/queues/e", json={})
    await client.post("/v1/queues/e/messages", data=b"fast", headers={"Mq-Delivery": "express"})
    got = await (await client.post("/v1/queues/e/receive")).json()
    assert got["messages"][0]["delivery"] == "express"




async def test_idempotency_key_stores_once_and_returns_the_first_answer(client: Any) -> None:
    await client.put("/v1/queues/idem", json={})
    headers = {"Idempotency-Key": "order-17"}
    first = await client.post("/v1/queues/idem/messages", data=b"same", headers=headers)
    again = await client.post("/v1/queues/idem/messages", data=b"same", headers=headers)
    assert first.status == again.status == 201
    assert await first.json() == await again.json()
    assert (await (await client.get("/v1/queues/idem")).json())["messages"] == 1
    problem = await _problem(await client.post("/v1/queues/idem/messages", data=b"other",
                                               headers=headers), 422)
    assert "order-17" in problem["detail"]
    assert (await (await client.get("/v1/queues/idem")).json())["messages"] == 1
    other = await client.post("/v1/queues/idem/messages", data=b"same",
                              headers={"Idempotency-Key": "order-18"})
    assert other.status == 201
    assert (await (await client.get("/v1/queues/idem")).json())["messages"] == 2


async def test_concurrent_duplicates_are_stored_once(client: Any) -> None:
    await client.put("/v1/queues/race", json={})
    responses = await asyncio.gather(*(client.post(
        "/v1/queues/race/messages", data=b"x", headers={"Idempotency-Key": "k"})
        for _ in range(10)))
    answers = [await r.json() for r in responses]
    assert all(r.status == 201 for r in responses)
    assert all(a == answers[0] for a in answers)
    assert (await (await client.get("/v1/queues/race")).json())["messages"] == 1


async def test_the_duplicate_window_survives_a_restart(aiohttp_client: Any,
                                                       settings_factory: Callable[..., Settings]
                                                       ) -> None:
    settings = settings_factory()
    first = await ready_client(aiohttp_client, settings)
    await first.put("/v1/queues/q", json={})
    answer = await (await first.post("/v1/queues/q/messages", data=b"m",
                                     headers={"Idempotency-Key": "once"})).json()
    await first.post("/v1/queues/q/receive")
    await first.close()
    second = await ready_client(aiohttp_client, settings)
    replay = await second.post("/v1/queues/q/messages", data=b"m",
                               headers={"Idempotency-Key": "once"})
    assert await replay.json() == answer
    assert (await (await second.get("/v1/queues/q")).json())["messages"] == 0
    names = [q["path"] for q in (await (await second.get("/v1/queues")).json())["queues"]]
    assert not any("dedup" in n for n in names), "the window's queue is internal"


async def test_queues_declared_in_the_config_are_created(aiohttp_client: Any,
                                                         tmp_path: Any) -> None:
    from gateway.settings import parse_settings

    settings = parse_settings({"queues": [{"path": "private$/declared", "transactional": True,
                                           "label": "from config"}]},
                              {"store.data_dir": str(tmp_path / "d")})
    test_client = await ready_client(aiohttp_client, settings)
    shown = await (await test_client.get("/v1/queues/private$/declared")).json()
    assert (shown["transactional"], shown["label"]) == (True, "from config")


async def test_integral_json_numbers_are_integers_and_fractions_are_refused(client: Any
                                                                          ) -> None:
    """JSON has one number type: 1024.0 is the integer 1024 (a JavaScript or Python float
    client sends sizes and positions that way); 1.5 bytes is still refused."""
    response = await client.put("/v1/queues/floats", json={"quota": 1024.0})
    assert response.status == 201, await response.text()
    assert (await response.json())["quota"] == 1024
    await _problem(await client.put("/v1/queues/floats", json={"quota": 1.5}), 400)
    assert (await (await client.get("/v1/queues/floats")).json())["quota"] == 1024
    response = await client.post("/v1/batch", json={"messages": [
        {"queue": "floats", "body_base64": "aGk=", "properties": {"priority": 5.0}}]})
    assert response.status == 201, await response.text()
    problem = await _problem(await client.post("/v1/batch", json={"messages": [
        {"queue": "floats", "body_base64": "aGk=", "properties": {"priority": 5.5}}]}), 400)
    assert "Priority" in problem["detail"]
    (received,) = (await (await client.post("/v1/queues/floats/receive")).json())["messages"]
    assert received["priority"] == 5


async def test_head_is_answered_wherever_get_is(client: Any) -> None:
    # Load balancers and monitors probe with HEAD: the queue tree answers it as GET.
    assert (await client.put("/v1/queues/heads", json={})).status == 201
    sent = await client.post("/v1/queues/heads/messages", data=b"x")
    assert sent.status == 201
    message = (await sent.json())["id"]
    for path in ("/v1/queues/heads", "/v1/queues/heads/messages",
                 f"/v1/queues/heads/messages/{quote(message, safe='')}",
                 "/v1/queues/heads/head", "/v1/queues/heads/range?from=1&to=2"):
        got, head = await client.get(path), await client.head(path)
        assert (head.status, await head.read()) == (got.status, b""), path
        assert got.status == 200, path
    wrong = await client.head("/v1/queues/heads/purge")
    assert wrong.status == 405 and "POST" in wrong.headers["Allow"]
    # Where GET is served, HEAD is too, and a 405 says so (as aiohttp's own 405 does).
    for method, path, allow in (
            ("POST", "/v1/queues/heads", "DELETE,GET,HEAD,PUT"),
            ("DELETE", "/v1/queues/heads/messages", "GET,HEAD,POST"),
            ("PUT", f"/v1/queues/heads/messages/{quote(message, safe='')}",
             "DELETE,GET,HEAD")):
        wrong = await client.request(method, path)
        assert (wrong.status, wrong.headers["Allow"]) == (405, allow), path


async def test_one_answer_carries_at_most_16_mib_of_bodies(client: Any) -> None:
    """A thousand messages of the largest size would be gigabytes in one answer: a receive
    or a browse stops before its bodies pass 16 MiB (the first one whatever its size), and
    the rest is there for the next."""
    await client.put("/v1/queues/big", json={})
    await client.put("/v1/queues/private$/big_tx", json={"transactional": True})
    bodies = [bytes([n]) * 4_000_000 for n in range(5)]  # four fit in 16 MiB, not five
    for body in bodies:
        for queue in ("big", "private$/big_tx"):
            sent = await client.post(f"/v1/queues/{queue}/messages", data=io.BytesIO(body))
            assert sent.status == 201, await sent.text()

    def got(page: dict[str, Any]) -> list[bytes]:
        return [base64.b64decode(m["body_base64"]) for m in page["messages"]]

    page = await (await client.get("/v1/queues/big/messages?limit=10")).json()
    assert got(page) == bodies[:4]
    rest = await (await client.get(f"/v1/queues/big/messages?after={page['next']}")).json()
    assert got(rest) == bodies[4:]
    first = await (await client.post("/v1/queues/big/receive?max=10")).json()
    assert got(first) == bodies[:4]
    assert got(await (await client.post("/v1/queues/big/receive?max=10")).json()) == bodies[4:]
    tx = (await (await client.post("/v1/transactions")).json())["id"]
    held = await (await client.post("/v1/queues/private$/big_tx/receive?max=10",
                                    headers={"Mq-Transaction": tx})).json()
    assert got(held) == bodies[:4]


@pytest.mark.parametrize(("path", "key"), [
    ("receive?max=%D9%A3", "max"),  # ARABIC-INDIC DIGIT THREE: int() would take it
    ("receive?wait=1_0", "wait"), ("receive?wait=%2B1", "wait"), ("receive?max=%201", "max"),
    ("receive?max=1.5", "max"), ("receive?wait=1e1", "wait"), ("receive?max=1&max=2", "max"),
    ("messages?limit=%EF%BC%95", "limit"), ("messages?after=-1", "after")])
async def test_numbers_in_a_query_are_plain_ascii_digits(client: Any, path: str,
                                                          key: str) -> None:
    await client.put("/v1/queues/strict", json={})
    method = client.post if path.startswith("receive") else client.get
    problem = await _problem(await method(f"/v1/queues/strict/{path}"), 400)
    assert f"query {key}" in problem["detail"]
    for good in ("receive?max=3&wait=0.01", "messages?after=0&limit=5"):
        method = client.post if good.startswith("receive") else client.get
        assert (await method(f"/v1/queues/strict/{good}")).status == 200
