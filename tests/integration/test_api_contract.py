"""The REST answers' contract (issue 35): strict batch items, ``Location`` on a created
message, one answer shape for sends by format name, numbers as numbers, replayed
``Idempotency-Key`` answers marked."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import pytest

from gateway.settings import Settings
from tests.helpers import ready_client

PROBLEM = "application/problem+json"


@pytest.fixture
async def client(aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> Any:
    test_client = await ready_client(aiohttp_client, settings_factory())
    for name, tx in (("plain", False), ("other", False), ("private$/tx", True)):
        response = await test_client.put(f"/v1/queues/{name}", json={"transactional": tx})
        assert response.status == 201, await response.text()
    return test_client


async def _count(client: Any, queue: str) -> int:
    return int((await (await client.get(f"/v1/queues/{queue}")).json())["messages"])


# ---- POST /v1/batch: every item key known, a body required ----------------------------------

@pytest.mark.parametrize(("item", "named"), [
    ({"queue": "plain", "body": "text"}, "messages[1].body"),
    ({"queue": "plain", "body_base64": "eA==", "lable": "x"}, "messages[1].lable"),
    ({"queue": "plain", "body_base64": "eA==", "properties": {"lable": "x"}},
     "messages[1].properties.lable"),
    ({"queue": "plain", "body_base64": "eA==", "properties": {"transaction": "single"}},
     "messages[1].properties.transaction"),
    ({"queue": "plain"}, "messages[1].body_base64"),
    ({"queue": "plain", "body_base64": None}, "messages[1].body_base64"),
])
async def test_a_batch_item_with_an_unknown_key_or_no_body_is_refused(
        client: Any, item: dict[str, object], named: str) -> None:
    good = {"queue": "other", "body_base64": "eA=="}
    response = await client.post("/v1/batch", json={"messages": [good, item]})
    assert response.status == 400, await response.text()
    assert response.content_type == PROBLEM
    assert named in (await response.json())["detail"]
    assert await _count(client, "plain") == 0 and await _count(client, "other") == 0


@pytest.mark.parametrize(("properties", "named"), [
    ({"label": {"nested": {"deep": 1}}}, "messages[1].properties.label"),
    ({"correlation_id": {"x": 1}}, "messages[1].properties.correlation_id"),
    ({"label": ["a"]}, "messages[1].properties.label"),
    ({"label": None}, "messages[1].properties.label"),
    ({"priority": True}, "messages[1].properties.priority"),
    ({"priority": 1.5}, "messages[1].properties.priority"),
    ({"label": "a\u0000b"}, "messages[1].properties.label"),
    ({"correlation_id": "a\u001fb"}, "messages[1].properties.correlation_id"),
    ({"label": "a\u007fb"}, "messages[1].properties.label"),
    ({"response_queue": "q\r\nx"}, "messages[1].properties.response_queue"),
])
async def test_a_batch_property_of_the_wrong_type_or_with_a_control_character_is_refused(
        client: Any, properties: dict[str, object], named: str) -> None:
    """As the OpenAPI schema says (a string or an integer), and with the characters a send
    header can carry: a header value holds no control character but tab."""
    good = {"queue": "other", "body_base64": "eA=="}
    response = await client.post("/v1/batch", json={"messages": [good, {
        "queue": "plain", "body_base64": "eA==", "properties": properties}]})
    assert response.status == 400, await response.text()
    assert response.content_type == PROBLEM
    assert named in (await response.json())["detail"]
    assert await _count(client, "plain") == 0 and await _count(client, "other") == 0


async def test_batch_properties_take_strings_integers_and_tabs_as_headers_do(
        client: Any) -> None:
    response = await client.post("/v1/batch", json={"messages": [{
        "queue": "plain", "body_base64": "eA==", "properties": {
            "label": "a\tb \u00e9", "priority": 5, "app_specific": -7,
            "time_to_be_received": 60, "correlation_id": 42}}]})
    assert response.status == 201, await response.text()
    [message] = (await (await client.get("/v1/queues/plain/messages")).json())["messages"]
    assert (message["label"], message["priority"], message["app_specific"],
            message["correlation_id"]) == ("a\tb \u00e9", 5, -7, "42")


async def test_an_unknown_top_level_batch_key_is_refused_by_name(client: Any) -> None:
    response = await client.post("/v1/batch", json={
        "messages": [{"queue": "plain", "body_base64": "eA=="}], "extra": 1})
    assert response.status == 400, await response.text()
    assert response.content_type == PROBLEM
    assert "extra" in (await response.json())["detail"]
    assert await _count(client, "plain") == 0


async def test_an_empty_body_is_sent_as_an_empty_string(client: Any) -> None:
    response = await client.post("/v1/batch", json={"messages": [
        {"queue": "plain", "body_base64": ""},
        {"queue": "plain", "body_base64": base64.b64encode(b"two").decode(),
         "properties": {"label": "l", "content_type": "text/plain"}}]})
    assert response.status == 201, await response.text()
    browsed = await (await client.get("/v1/queues/plain/messages")).json()
    assert [m["body_base64"] for m in browsed["messages"]] == ["", "dHdv"]


# ---- Location: the created message's own resource -------------------------------------------

async def _follow(client: Any, response: Any) -> dict[str, Any]:
    location = response.headers.get("Location")
    assert location is not None, await response.text()
    got = await client.get(location)
    assert got.status == 200, (location, await got.text())
    message: dict[str, Any] = await got.json()
    return message


async def test_a_send_to_a_queue_answers_with_the_location_of_the_message(client: Any) -> None:
    response = await client.post("/v1/queues/plain/messages", data=b"hello",
                                 headers={"Mq-Label": "first"})
    assert response.status == 201
    created = await response.json()
    message = await _follow(client, response)
    assert (message["id"], message["label"]) == (created["id"], "first")
    assert base64.b64decode(message["body_base64"]) == b"hello"


async def test_a_send_by_format_name_answers_with_the_location_of_the_message(
        client: Any) -> None:
    response = await client.post("/v1/messages", data=b"hi",
                                 headers={"Mq-Destination": "DIRECT=OS:.\\private$\\tx"})
    assert response.status == 201
    [created] = (await response.json())["messages"]
    message = await _follow(client, response)
    assert (message["id"], message["queue"]) == (created["id"], "private$/tx")


async def test_a_batch_of_one_answers_with_its_location_and_of_several_without(
        client: Any) -> None:
    one = await client.post("/v1/batch", json={"messages": [
        {"queue": "plain", "body_base64": "eA=="}]})
    assert one.status == 201
    assert (await _follow(client, one))["id"] == (await one.json())["messages"][0]["id"]
    several = await client.post("/v1/batch", json={"messages": [
        {"queue": "plain", "body_base64": "eA=="}, {"queue": "other", "body_base64": "eA=="}]})
    assert several.status == 201 and "Location" not in several.headers


async def test_a_send_held_in_a_transaction_has_no_location(client: Any) -> None:
    tx = (await (await client.post("/v1/transactions")).json())["id"]
    response = await client.post("/v1/queues/private$/tx/messages", data=b"x",
                                 headers={"Mq-Transaction": tx})
    assert response.status == 202 and "Location" not in response.headers


# ---- one answer shape for one and several destinations --------------------------------------

async def test_one_and_several_destinations_answer_in_the_same_shape(client: Any) -> None:
    one = await client.post("/v1/messages", data=b"x",
                            headers={"Mq-Destination": "DIRECT=OS:.\\plain"})
    several = await client.post("/v1/messages", data=b"x",
                                headers={"Mq-Destination": "DIRECT=OS:.\\plain,"
                                         "DIRECT=OS:.\\other"})
    assert one.status == several.status == 201
    single, multiple = await one.json(), await several.json()
    assert set(single) == set(multiple) == {"messages", "dead_lettered"}
    assert [m["queue"] for m in single["messages"]] == ["plain"]
    assert [m["queue"] for m in multiple["messages"]] == ["plain", "other"]
    assert single["dead_lettered"] == multiple["dead_lettered"] == []
    assert isinstance(single["messages"][0]["seq"], int)


# ---- numbers are numbers --------------------------------------------------------------------

async def test_a_dead_letters_time_is_a_number(client: Any) -> None:
    response = await client.post("/v1/messages", data=b"x", headers={
        "Mq-Destination": "DIRECT=OS:.\\private$\\tx,DIRECT=OS:.\\plain"})
    assert response.status == 201, await response.text()
    assert (await response.json())["dead_lettered"] == [
        {"queue": "plain", "class": "MQMSG_CLASS_NACK_NOT_TRANSACTIONAL_Q"}]
    dead = await (await client.get("/v1/queues/system$;deadxact/messages")).json()
    [letter] = dead["messages"]
    at = letter["properties"]["dead_lettered_at_ms"]
    assert isinstance(at, int) and not isinstance(at, bool), at
    assert letter["sent_at"] is not None and at >= 1_000_000_000_000


# ---- a replayed Idempotency-Key says so -----------------------------------------------------

@pytest.mark.parametrize(("path", "headers"), [
    ("/v1/queues/plain/messages", {}),
    ("/v1/messages", {"Mq-Destination": "DIRECT=OS:.\\plain"}),
    ("/v1/messages", {"Mq-Destination": "DIRECT=OS:.\\plain,DIRECT=OS:.\\other"}),
])
async def test_a_replayed_idempotency_key_says_so(client: Any, path: str,
                                                  headers: dict[str, str]) -> None:
    headers = {**headers, "Idempotency-Key": "order-17"}
    first = await client.post(path, data=b"x", headers=headers)
    again = await client.post(path, data=b"x", headers=headers)
    assert first.status == again.status == 201, await again.text()
    assert "Idempotency-Replayed" not in first.headers
    assert again.headers.get("Idempotency-Replayed") == "true"
    assert await again.json() == await first.json()
    assert await _count(client, "plain") == 1


async def test_a_replayed_batch_idempotency_key_says_so_and_stores_once(client: Any) -> None:
    batch = {"messages": [{"queue": "plain", "body_base64": "eA=="},
                          {"queue": "other", "body_base64": "eQ=="}]}
    headers = {"Idempotency-Key": "batch-17"}
    first = await client.post("/v1/batch", json=batch, headers=headers)
    again = await client.post("/v1/batch", json=batch, headers=headers)
    assert first.status == again.status == 201, await again.text()
    assert "Idempotency-Replayed" not in first.headers
    assert again.headers.get("Idempotency-Replayed") == "true"
    assert await again.json() == await first.json()
    assert (await _count(client, "plain"), await _count(client, "other")) == (1, 1)
    other = await client.post("/v1/batch", json={"messages": batch["messages"][:1]},
                              headers=headers)
    assert other.status == 422, await other.text()
    assert (await _count(client, "plain"), await _count(client, "other")) == (1, 1)


@pytest.mark.parametrize("path", ["/v1/queues/plain/messages", "/v1/batch"])
async def test_a_reused_key_is_shown_as_the_client_sent_it(client: Any, path: str) -> None:
    def send(text: str) -> Any:
        if path == "/v1/batch":
            return client.post(path, headers={"Idempotency-Key": "k-123"}, json={
                "messages": [{"queue": "plain", "body_base64": base64.b64encode(
                    text.encode()).decode()}]})
        return client.post(path, data=text.encode(), headers={"Idempotency-Key": "k-123"})

    assert (await send("one")).status == 201
    response = await send("two")
    assert response.status == 422, await response.text()
    detail = (await response.json(content_type=PROBLEM))["detail"]
    assert "Idempotency-Key 'k-123' " in detail, detail
