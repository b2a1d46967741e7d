"""The store owner's side of the commands fronts send, on a real application and store:
a range answer is a cursor the owner holds between pieces, and no cursor outlives its
reader."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from typing import Any

import pytest

from gateway.auth.principal import OPEN
from gateway.fronts import wire
from gateway.fronts.commands import Commands
from gateway.settings import Settings
from gateway.web.calls import OPERATIONS, Call
from gateway.web.rest_codec import parse_send_headers
from tests.helpers import ready_client
from tests.owner_channel import OwnerChannel

Q = "/v1/queues/feed"
_BODY = bytes(range(256)) * 400  # 100 KiB: a range of 8 is several pieces


def _range(queue: str = "feed") -> wire.LogCommand:
    return wire.LogCommand(queue, ["range"], "GET", [("from", "1"), ("to", "9")], b"", None)


@pytest.fixture
async def owner(aiohttp_client: Any, settings_factory: Callable[..., Settings]
                ) -> tuple[Any, Commands]:
    client = await ready_client(aiohttp_client, settings_factory(
        server__concurrent_requests_max=2))
    assert (await client.put(Q, json={})).status == 201
    for _ in range(8):
        assert (await client.post(f"{Q}/messages", data=_BODY)).status == 201
    return client, Commands(client.app)


async def test_a_range_comes_in_pieces_that_make_the_one_process_answer(
        owner: tuple[Any, Commands]) -> None:
    client, commands = owner
    channel = OwnerChannel()
    kind, (status, body, headers, piece, cursor) = await channel.call(
        commands, 1, wire.Kind.LOG, _range())
    assert (kind, status, body, headers["Entrepot-Next"]) == (wire.Kind.OK, 200, None, "9")
    assert cursor and piece
    received, request_id = [piece], 2
    while piece:
        kind, piece = await channel.call(commands, request_id, wire.Kind.MORE, cursor)
        assert kind == wire.Kind.OK
        received.append(piece)
        request_id += 1
    assert len(received) > 3  # several pieces, then b"" for the end
    whole = await client.get(f"{Q}/range", params={"from": 1, "to": 9})
    assert b"".join(received) == await whole.read()
    # The owner is done with the cursor: it is not there to ask any more.
    kind, problem = await channel.call(commands, request_id, wire.Kind.MORE, cursor)
    assert (kind, problem.status) == (wire.Kind.PROBLEM, 404)


async def test_a_dropped_or_orphaned_range_frees_its_place(
        owner: tuple[Any, Commands]) -> None:
    """At most ``server.concurrent_requests_max`` (2 here) range answers are held; a front
    whose reader went away drops its cursor, and a front that went away has its cursors
    forgotten, so their places come back."""
    _, commands = owner
    channel, gone = OwnerChannel(), OwnerChannel()

    async def start(on: OwnerChannel, request_id: int) -> tuple[int, Any]:
        kind, answer = await on.call(commands, request_id, wire.Kind.LOG, _range())
        return kind, answer[4] if kind == wire.Kind.OK else answer.status

    assert (await start(channel, 1))[0] == wire.Kind.OK
    _, held = await start(gone, 1)
    assert await start(channel, 2) == (wire.Kind.PROBLEM, 503)  # both places taken
    gone.lost = True  # its front process went away
    kind, cursor = await start(channel, 3)
    assert kind == wire.Kind.OK
    assert await start(channel, 4) == (wire.Kind.PROBLEM, 503)
    commands.on_request(channel, 5, wire.Kind.DROP,  # type: ignore[arg-type]
                        wire.encode(0, wire.Kind.DROP, cursor)[wire.HEAD.size:])
    assert (await start(channel, 6))[0] == wire.Kind.OK
    assert held != cursor


async def test_a_method_the_resource_does_not_serve_is_answered_405_with_allow(
        owner: tuple[Any, Commands]) -> None:
    """As one process's middleware answers it: the owner's answer must cross the channel
    (aiohttp's header names are not plain strings)."""
    client, commands = owner
    kind, problem = await OwnerChannel().call(commands, 1, wire.Kind.LOG, wire.LogCommand(
        "feed", ["range"], "POST", [("from", "1"), ("to", "2")], b"", None))
    assert (kind, problem.status, problem.headers) == (wire.Kind.PROBLEM, 405,
                                                       {"Allow": "GET,HEAD"})
    one = await client.post(f"{Q}/range", params={"from": 1, "to": 2})
    assert (one.status, one.headers["Allow"]) == (405, "GET,HEAD")
    assert (await one.json())["detail"] == problem.detail


async def test_an_answer_that_cannot_be_sent_is_answered_500(
        owner: tuple[Any, Commands], monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever goes wrong, every command gets an answer: a front waits for it."""
    from gateway.queues.range_consumers import RangeConsumers

    _, commands = owner
    monkeypatch.setattr(RangeConsumers, "head", lambda self, queue, owner: {"odd": object()})
    kind, problem = await OwnerChannel().call(commands, 1, wire.Kind.LOG, wire.LogCommand(
        "feed", ["head"], "GET", [], b"", None))
    assert (kind, problem.status) == (wire.Kind.PROBLEM, 500)


def _send(queue: str, body: bytes, key: str | None = None, *,
          express: bool = False) -> wire.SendCommand:
    headers = {"Mq-Delivery": "express"} if express else {}
    properties = parse_send_headers(headers, now_ms=int(time.time() * 1000)).properties
    return wire.SendCommand(queue, body, properties, None, key)


async def test_the_sends_of_one_pass_are_each_answered_by_what_became_of_it(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    """Sends that reach the owner in one pass of its loop are stored together (those that
    need nothing but their own record); each is answered by its own fate, and one refused
    costs the others nothing. Those that need more (an Idempotency-Key, a transactional
    queue, express) take the whole way beside them."""
    client = await ready_client(aiohttp_client, settings_factory(
        store__segment_size="64KiB", store__group_commit_bytes_max="64KiB"))
    for name, settings in (("feed", {}), ("small", {"quota": "3KiB"}),
                           ("orders", {"transactional": True})):
        assert (await client.put(f"/v1/queues/{name}", json=settings)).status == 201
    sends = [_send("feed", b"a"), _send("nowhere", b"b"), _send("feed", b"c" * (100 << 10)),
             *[_send("small", bytes([i]) * 1000) for i in range(5)], _send("orders", b"e"),
             _send("feed", b"f", "key-1"), _send("feed", b"x", express=True), _send("feed", b"g")]
    commands, channel = Commands(client.app), OwnerChannel()
    for request_id, send in enumerate(sends):  # all in this one pass
        channel.put(commands, request_id, wire.Kind.SEND, send)
    answers = [await channel.answer(i) for i in range(len(sends))]

    def fate(kind: int, answer: Any) -> object:
        return answer.status if kind == wire.Kind.PROBLEM else "ok"

    fates = [fate(*answer) for answer in answers]
    small = fates[3:8]
    assert (fates[:3], fates[8:]) == (["ok", 404, 413], ["ok"] * 4), fates
    assert "ok" in small and 507 in small, small
    assert small == sorted(small, key=lambda f: f != "ok"), small  # admitted in order
    # What was answered stored is stored, under the ids and sequence numbers answered.
    stored = await (await client.get("/v1/queues/feed/messages")).json()
    answered = {(a["id"], a["seq"]) for kind, (a, _) in (answers[i] for i in (0, 9, 10, 11))}
    assert {(m["id"], m["seq"]) for m in stored["messages"]} == answered
    assert {base64.b64decode(m["body_base64"]) for m in stored["messages"]} == {
        b"a", b"f", b"x", b"g"}
    for name, count in (("small", small.count("ok")), ("orders", 1)):
        assert (await (await client.get(f"/v1/queues/{name}")).json())["messages"] == count


async def test_a_send_the_front_encoded_is_stored_as_one_process_stores_it(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    """A send a front stamped and encoded (``PUT``, with the GUID the owner gave it) is the
    message the same send makes in one process: its properties, stamps and id; a queue that
    makes it transactional takes it the whole way (a single-message transaction)."""
    from gateway.queues.plain_sends import stamp_and_encode

    client = await ready_client(aiohttp_client, settings_factory())
    for name, settings in (("feed", {}), ("orders", {"transactional": True})):
        assert (await client.put(f"/v1/queues/{name}", json=settings)).status == 201
    commands, channel = Commands(client.app), OwnerChannel()
    kind, guid = await channel.call(commands, 1, wire.Kind.IDENTITY, None)
    assert kind == wire.Kind.OK
    headers = {"Mq-Label": "L", "Mq-Priority": "5", "Mq-Correlation-Id": "c",
               "Mq-App-Specific": "7", "Mq-Time-To-Be-Received": "3600",
               "Content-Type": "text/plain"}

    def put(queue: str, body: bytes, transaction: str | None = None) -> wire.PutCommand:
        props = parse_send_headers(headers, now_ms=int(time.time() * 1000)).properties
        return wire.PutCommand(queue, stamp_and_encode(props, body, guid), props.priority,
                               props.receive_by_ms, transaction)

    answers = [await channel.call(commands, 2 + i, wire.Kind.PUT, command) for i, command in
               enumerate([put("feed", b"a"), put("orders", b"b"),
                          put("orders", b"c", "none"), put("nowhere", b"d")])]
    assert [k for k, _ in answers[:2]] == [wire.Kind.OK] * 2
    one = await client.post("/v1/queues/feed/messages", data=b"z", headers=headers)
    assert one.status == 201
    refused = await client.post("/v1/queues/orders/messages", data=b"c",
                                headers={**headers, "Mq-Transaction": "none"})
    assert [(k, p.status) for k, p in answers[2:]] == [
        (wire.Kind.PROBLEM, refused.status), (wire.Kind.PROBLEM, 404)]
    put_id = answers[0][1][0]["id"]
    assert put_id.startswith("{" + guid + "}")
    stored = (await (await client.get("/v1/queues/feed/messages")).json())["messages"]
    by_body = {base64.b64decode(m["body_base64"]): m for m in stored}
    encoded, plain = by_body[b"a"], by_body[b"z"]
    assert encoded["id"] == put_id and encoded["properties"]["source_qm"] == guid
    for field in ("sent_at", "arrived_at", "id", "seq", "body_base64"):
        encoded.pop(field), plain.pop(field)
    for message in (encoded, plain):
        message["properties"].pop("time_to_be_received_deadline")
    assert encoded == plain
    [held] = (await (await client.get("/v1/queues/orders/messages")).json())["messages"]
    assert (held["priority"], held["properties"]["transactional"]) == (0, True)


def _call(op: str, method: str, match: dict[str, str], body: bytes = b"", *,
          headers: list[tuple[str, str]] | None = None) -> Call:
    return Call(op, method, match, [], headers or [], body, OPEN, True)


async def test_an_operation_answers_as_the_same_request_in_one_process(
        owner: tuple[Any, Commands]) -> None:
    """A management operation a front sends (``CALL``) is what one process does with the
    same request: its status, body and headers; a refusal is the same problem."""
    client, commands = owner
    channel = OwnerChannel()
    kind, (status, made, _) = await channel.call(commands, 1, wire.Kind.CALL, _call(
        "queue", "PUT", {"tail": "fresh"}, b'{"label": "L", "quota": "1MiB"}'))
    assert (kind, status) == (wire.Kind.OK, 201)
    assert json.loads(made) == await (await client.get("/v1/queues/fresh")).json()
    cases = [(_call("queue", "GET", {"tail": "feed"}), Q),
             (_call("queues", "GET", {}), "/v1/queues"),
             (_call("links", "GET", {}), "/v1/links"),
             (_call("readyz", "GET", {}), "/readyz")]
    for request_id, (call, path) in enumerate(cases, 2):
        kind, (status, answer, headers) = await channel.call(commands, request_id,
                                                             wire.Kind.CALL, call)
        one = await client.get(path)
        assert (kind, status) == (wire.Kind.OK, one.status), call
        assert headers["Content-Type"] == one.headers["Content-Type"]
        assert json.loads(answer) == await one.json(), call
    kind, problem = await channel.call(commands, 9, wire.Kind.CALL,
                                       _call("queue", "GET", {"tail": "nowhere"}))
    one = await client.get("/v1/queues/nowhere")
    assert (kind, problem.status) == (wire.Kind.PROBLEM, one.status)
    assert problem.detail == (await one.json())["detail"]
    kind, problem = await channel.call(commands, 10, wire.Kind.CALL,
                                       _call("queue", "POST", {"tail": "feed/messages/x/y"}))
    assert (kind, problem.status) == (wire.Kind.PROBLEM, 404)
    kind, problem = await channel.call(commands, 11, wire.Kind.CALL, _call("nothing", "GET", {}))
    assert (kind, problem.status) == (wire.Kind.PROBLEM, 500)


async def test_the_owner_checks_the_reply_addresses_of_a_send_and_a_batch(
        owner: tuple[Any, Commands]) -> None:
    """A send or batch naming reply addresses comes with its sender (``replies_of``): the
    owner checks them against its state and refuses as one process does, naming the
    header; the same send without them is stored."""
    client, commands = owner
    channel = OwnerChannel()
    elsewhere = "DIRECT=HTTP://elsewhere.example/msmq/private$/acks"
    properties = parse_send_headers({"Mq-Admin-Queue": elsewhere},
                                    now_ms=int(time.time() * 1000)).properties
    kind, problem = await channel.call(commands, 1, wire.Kind.SEND, wire.SendCommand(
        "feed", b"r", properties, None, None, OPEN))
    one = await client.post(f"{Q}/messages", data=b"r", headers={"Mq-Admin-Queue": elsewhere})
    assert (kind, problem.status, one.status) == (wire.Kind.PROBLEM, 403, 403)
    assert problem.detail == (await one.json())["detail"]
    kind, problem = await channel.call(commands, 2, wire.Kind.BATCH, wire.BatchCommand(
        [("feed", b"a", properties)], None, b"", OPEN))
    assert (kind, problem.status) == (wire.Kind.PROBLEM, 403)
    assert "messages[0].properties.Mq-Admin-Queue" in problem.detail
    kind, problem = await channel.call(commands, 3, wire.Kind.TX_SEND, wire.TxSendCommand(
        "tx-none", "feed", b"a", properties, OPEN))
    assert (kind, problem.status) == (wire.Kind.PROBLEM, 403)
    local = parse_send_headers({"Mq-Response-Queue": "feed"},
                               now_ms=int(time.time() * 1000)).properties
    kind, (answer, _) = await channel.call(commands, 4, wire.Kind.SEND, wire.SendCommand(
        "feed", b"r", local, None, None, OPEN))
    assert kind == wire.Kind.OK and answer["queue"] == "feed"


async def test_an_operation_that_fails_is_logged_naming_it_and_answered_500(
        owner: tuple[Any, Commands], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    async def failing(app: Any, call: Call) -> Any:
        raise ValueError("embedded null byte")

    monkeypatch.setitem(OPERATIONS, "failing", failing)
    _, commands = owner
    kind, problem = await OwnerChannel().call(commands, 1, wire.Kind.CALL,
                                          _call("failing", "POST", {}))
    assert (kind, problem.status) == (wire.Kind.PROBLEM, 500)
    assert "embedded null byte" not in problem.detail  # the log has it, not the client
    [record] = [r for r in caplog.records if "unhandled error in operation" in r.getMessage()]
    assert "failing method=POST" in record.getMessage() and record.exc_info is not None
