"""A front process's application in-process, with a scripted store owner at the other end
of its channel: which requests it answers with commands, and what it sends."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from gateway.fronts import wire
from gateway.fronts.channel import Channel
from gateway.fronts.front import make_front_app
from gateway.fronts.shared_counts import SharedCounts
from gateway.metrics import Metrics
from gateway.settings import Settings


class _Owner:
    """The owner's end: records each command, answers with ``answer(kind, payload)``."""

    def __init__(self, answer: Callable[[int, bytes], Any]) -> None:
        self.commands: list[tuple[int, int, bytes]] = []
        self._answer = answer

    def on_request(self, channel: Channel, request_id: int, kind: int, payload: bytes) -> None:
        self.commands.append((request_id, kind, payload))
        value = self._answer(kind, payload)
        if value is not None:
            channel.send(request_id, wire.Kind.OK, None if value is _NONE else value)


_NONE = object()  # what an _Owner's ``answer`` returns for an answer of None


@pytest.fixture
async def front(aiohttp_client: Any, settings_factory: Callable[..., Settings]
                ) -> AsyncIterator[Callable[[_Owner], Awaitable[Any]]]:
    """Makes a front app (an open gateway's settings) whose channel leads to ``owner``."""
    channels: list[Channel] = []

    async def make(owner: _Owner) -> Any:
        ours, theirs = socket.socketpair()
        loop = asyncio.get_running_loop()
        _, channel = await loop.create_unix_connection(Channel, sock=ours)
        _, other = await loop.create_unix_connection(
            lambda: Channel(on_request=owner.on_request), sock=theirs)
        channels.extend((channel, other))
        app = make_front_app(settings_factory(), Metrics(), channel, SharedCounts.create(2))
        return await aiohttp_client(app)

    yield make
    for channel in channels:
        channel.close()
    await asyncio.sleep(0)  # the transports close on the next pass


async def test_a_receive_is_checked_here_and_run_by_the_owner_as_one_command(
        front: Any) -> None:
    message = {"id": "{g}\\1", "queue": "orders", "seq": 1, "body_base64": "aGk="}
    owner = _Owner(lambda kind, payload: [message] if kind == wire.Kind.RECEIVE else None)
    client = await front(owner)
    response = await client.post("/v1/queues/orders/receive?max=5&wait=0.5",
                                 headers={"Mq-Transaction": "none"})
    assert response.status == 200, await response.text()
    assert (await response.json()) == {"messages": [message]}
    [(_, kind, payload)] = owner.commands
    assert kind == wire.Kind.RECEIVE
    command = wire.receive_command(payload)
    assert (command.queue, command.asked) == ("orders", (5, 0.5, "none"))
    assert command.principal.open  # no credentials configured: an open gateway


@pytest.mark.parametrize(("query", "named"), [("max=0", "max"), ("wait=soon", "wait"),
                                              ("max=1001", "max")])
async def test_a_bad_receive_is_refused_here_naming_the_parameter(
        front: Any, query: str, named: str) -> None:
    owner = _Owner(lambda kind, payload: None)
    client = await front(owner)
    response = await client.post(f"/v1/queues/orders/receive?{query}")
    assert response.status == 400
    assert named in (await response.json())["detail"]
    assert owner.commands == []


@pytest.mark.parametrize("method", ["GET", "HEAD"])
async def test_a_browse_is_checked_here_and_read_by_the_owner_as_one_command(
        front: Any, method: str) -> None:
    page = {"messages": [{"id": "{g}\\3", "queue": "orders", "seq": 3}], "next": 3}
    owner = _Owner(lambda kind, payload: page if kind == wire.Kind.BROWSE else None)
    client = await front(owner)
    response = await client.request(method, "/v1/queues/orders/messages?after=2&limit=7")
    assert response.status == 200, await response.text()
    if method == "GET":
        assert (await response.json()) == page
    [(_, kind, payload)] = owner.commands
    assert (kind, wire.decode(payload)) == (wire.Kind.BROWSE, ("orders", (2, 7)))
    response = await client.get("/v1/queues/orders/messages?limit=0")
    assert response.status == 400 and "limit" in (await response.json())["detail"]
    assert len(owner.commands) == 1


async def test_a_send_in_a_transaction_is_held_by_the_owner_as_one_command(
        front: Any) -> None:
    held = {"transaction": "tx-1", "queue": "private$/orders", "index": 0}
    owner = _Owner(lambda kind, payload: held if kind == wire.Kind.TX_SEND else None)
    client = await front(owner)
    response = await client.post("/v1/queues/private$/orders/messages", data=b"in tx",
                                 headers={"Mq-Transaction": "tx-1", "Mq-Label": "l"})
    assert response.status == 202, await response.text()
    assert (await response.json()) == held
    [(_, kind, payload)] = owner.commands
    command = wire.tx_send_command(payload)
    assert (kind, command.transaction, command.queue, command.body,
            command.properties.label) == (wire.Kind.TX_SEND, "tx-1", "private$/orders",
                                          b"in tx", "l")
    assert command.principal.open


@pytest.mark.parametrize(("method", "path", "action", "status"), [
    ("POST", "/v1/transactions", ("begin", ""), 201),
    ("GET", "/v1/transactions/tx-1", ("show", "tx-1"), 200),
    ("POST", "/v1/transactions/tx-1/prepare", ("prepare", "tx-1"), 200),
    ("POST", "/v1/transactions/tx-1/commit", ("commit", "tx-1"), 200),
    ("POST", "/v1/transactions/tx-1/abort", ("abort", "tx-1"), 200)])
async def test_a_transactions_actions_are_run_by_the_owner_as_commands(
        front: Any, method: str, path: str, action: tuple[str, str], status: int) -> None:
    answer = {"id": "tx-1", "state": "x"}
    owner = _Owner(lambda kind, payload: (status, answer) if kind == wire.Kind.TX else None)
    client = await front(owner)
    response = await client.request(method, path)
    assert response.status == status, await response.text()
    assert (await response.json()) == answer
    [(_, kind, payload)] = owner.commands
    command = wire.tx_command(payload)
    assert (kind, (command.action, command.transaction)) == (wire.Kind.TX, action)
    assert command.principal.open


@pytest.mark.parametrize("key", [None, "k-1"])
async def test_a_batch_is_checked_here_and_stored_by_the_owner_as_one_command(
        front: Any, key: str | None) -> None:
    answer = {"ids": ["a", "b"], "messages": [{"id": "a", "queue": "q1", "seq": 1},
                                              {"id": "b", "queue": "q2", "seq": 1}]}
    owner = _Owner(lambda kind, payload: (answer, False) if kind == wire.Kind.BATCH else None)
    client = await front(owner)
    body = json.dumps({"messages": [
        {"queue": "q1", "body_base64": "aGk=", "properties": {"label": "one"}},
        {"queue": "q2", "body_base64": ""}]}).encode()
    response = await client.post("/v1/batch", data=body,
                                 headers={"Idempotency-Key": key} if key else {})
    assert response.status == 201, await response.text()
    assert (await response.json()) == answer
    [(_, kind, payload)] = owner.commands
    command = wire.batch_command(payload)
    assert kind == wire.Kind.BATCH
    assert [(q, b, p.label) for q, b, p in command.items] == [("q1", b"hi", "one"),
                                                              ("q2", b"", "")]
    # With a key, the owner gets the body its digest covers, and the key in its space.
    assert (command.key is None, command.raw) == ((True, b"") if key is None
                                                  else (False, body))
    bad = await client.post("/v1/batch", data=b'{"messages": [{"queue": "q1"}]}')
    assert bad.status == 400 and "body_base64" in (await bad.json())["detail"]
    assert len(owner.commands) == 1


@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/queues/orders/receive"),
                                            ("DELETE", "/v1/queues/orders")])
async def test_a_command_the_owner_may_have_done_is_not_answered_as_failed(
        front: Any, method: str, path: str) -> None:
    """The owner goes away with a receive in hand (it may have taken the message), or a
    management operation (it may have done it): the client gets no answer, as from a
    gateway that crashed, not a 503 saying nothing was done. A request after that, never
    sent to the owner, is 503."""
    channels: list[Channel] = []

    class _Vanishing(_Owner):
        def on_request(self, channel: Channel, request_id: int, kind: int,
                       payload: bytes) -> None:
            super().on_request(channel, request_id, kind, payload)
            channel.close()  # gone before answering
            channels.append(channel)

    client = await front(_Vanishing(lambda kind, payload: None))
    with pytest.raises(aiohttp.ClientError):
        response = await client.request(method, path)
        await response.read()
    later = await client.request(method, path)
    assert later.status == 503 and later.headers["Retry-After"] == "1"
    assert len(channels) == 1


async def test_a_range_is_read_by_the_owner_piece_by_piece(front: Any) -> None:
    """``LOG`` answers with the headers and the first piece; each next piece is asked for
    (``MORE``) once the one before is written, until the owner says the end (b"")."""
    pieces = [b"one-", b"two-", b""]
    headers = {"Entrepot-Next": "9", "Entrepot-First": "1", "Content-Type": "x/records"}

    def answer(kind: int, payload: bytes) -> object:
        if kind == wire.Kind.LOG:
            return (200, None, headers, b"zero-", 7)
        return pieces.pop(0) if kind == wire.Kind.MORE else None

    owner = _Owner(answer)
    client = await front(owner)
    response = await client.get("/v1/queues/private$/feed/range?from=1&to=9")
    assert response.status == 200, await response.text()
    assert await response.read() == b"zero-one-two-"
    assert response.headers["Entrepot-Next"] == "9"
    kinds = [kind for _, kind, _ in owner.commands]
    assert kinds == [wire.Kind.LOG, wire.Kind.MORE, wire.Kind.MORE, wire.Kind.MORE]
    command = wire.log_command(owner.commands[0][2])
    assert (command.queue, command.rest, command.method, command.query, command.body) == (
        "private$/feed", ["range"], "GET", [("from", "1"), ("to", "9")], b"")
    assert [wire.decode(p) for _, k, p in owner.commands[1:]] == [7, 7, 7]


async def test_a_range_the_owner_cuts_ends_without_its_end(front: Any) -> None:
    """A record removed while the answer is sent (``MORE`` answers None): the client gets
    what was sent and a closed connection, as one process does; the cursor is the owner's
    to forget, so no ``DROP`` follows."""
    def answer(kind: int, payload: bytes) -> object:
        if kind == wire.Kind.LOG:
            return (200, None, {"Content-Type": "x/records"}, b"first", 3)
        return _NONE if kind == wire.Kind.MORE else None

    owner = _Owner(answer)
    client = await front(owner)
    response = await client.get("/v1/queues/feed/range?from=1&to=9")
    with pytest.raises(aiohttp.ClientPayloadError):
        await response.read()
    assert [kind for _, kind, _ in owner.commands] == [wire.Kind.LOG, wire.Kind.MORE]


@pytest.mark.parametrize(("method", "path", "body", "rest"), [
    ("GET", "/v1/queues/feed/head", b"", ["head"]),
    ("GET", "/v1/queues/feed/consumers", b"", ["consumers"]),
    ("PUT", "/v1/queues/feed/consumers/spark", b'{"start": 1}', ["consumers", "spark"]),
    ("POST", "/v1/queues/feed/consumers/spark/commit", b'{"position": 4}',
     ["consumers", "spark", "commit"]),
    ("DELETE", "/v1/queues/feed/consumers/spark", b"", ["consumers", "spark"])])
async def test_a_queues_head_and_consumers_are_answered_by_the_owner(
        front: Any, method: str, path: str, body: bytes, rest: list[str]) -> None:
    answer = {"name": "spark", "position": 4}
    status = 204 if method == "DELETE" else 201 if method == "PUT" else 200
    owner = _Owner(lambda kind, payload: (status, None if status == 204 else answer, {},
                                          None, 0) if kind == wire.Kind.LOG else None)
    client = await front(owner)
    response = await client.request(method, path, data=body)
    assert response.status == status, await response.text()
    if status != 204:
        assert (await response.json()) == answer
    [(_, kind, payload)] = owner.commands
    command = wire.log_command(payload)
    assert (kind, command.queue, command.rest, command.method, command.body) == (
        wire.Kind.LOG, "feed", rest, method, body)


async def test_the_list_of_transactions_is_the_owners_for_the_principal(front: Any) -> None:
    listed = {"transactions": [{"id": "tx-1", "state": "active"}]}
    owner = _Owner(lambda kind, payload: listed if kind == wire.Kind.TX_LIST else None)
    client = await front(owner)
    response = await client.get("/v1/transactions")
    assert response.status == 200, await response.text()
    assert (await response.json()) == listed
    [(_, kind, payload)] = owner.commands
    assert kind == wire.Kind.TX_LIST and wire.principal_of(wire.decode(payload)).open


def _answers(kind: int, payload: bytes) -> object:
    """An owner's answers to sends and operations."""
    if kind == wire.Kind.CALL:
        return (207, b"made by the owner", {"Content-Type": "x/owner", "Entrepot-X": "1"})
    if kind == wire.Kind.IDENTITY:
        return "{5e3b0f6a-9a51-4f3e-8f0c-1d2e3f405162}"
    sent = {"id": "{g}\\1", "queue": "orders", "seq": 1}
    return (sent, False) if kind in (wire.Kind.SEND, wire.Kind.PUT) else None


@pytest.mark.parametrize(("method", "path", "body", "op", "match"), [
    ("GET", "/v1/links", b"", "links", {}),
    ("POST", "/v1/links/L1/pause", b"{}", "link", {"id": "L1", "action": "pause"}),
    ("POST", "/v1/admin/backup", b'{"dest": "/b"}', "backup", {}),
    ("GET", "/readyz", b"", "readyz", {}),
    ("GET", "/metrics", b"", "metrics", {}),
    ("GET", "/ui/status.json", b"", "status", {}),
    ("GET", "/v1/queues", b"", "queues", {}),
    ("PUT", "/v1/queues/private$/orders", b'{"quota": 5}', "queue",
     {"tail": "private$/orders"}),
    ("GET", "/v1/queues/orders", b"", "queue", {"tail": "orders"}),
    ("DELETE", "/v1/queues/orders/messages/%7Bg%7D%5C1", b"", "queue",
     {"tail": "orders/messages/{g}\\1"}),
    ("POST", "/v1/queues/orders/purge", b"", "queue", {"tail": "orders/purge"}),
    # Percent-encoded: the route's decoding, as one process has it.
    ("POST", "/v1/queues/or%64ers/messages", b"hi", "", {}),
    ("POST", "/v1/messages", b"hi", "send_by_format_name", {})])
async def test_management_is_run_by_the_owner_as_one_operation(
        front: Any, method: str, path: str, body: bytes, op: str,
        match: dict[str, str]) -> None:
    """Every route whose work is the store's goes to the owner as a command: management as
    one ``CALL`` (the request as its operation sees it), whose reply is the answer as the
    owner made it."""
    owner = _Owner(_answers)
    client = await front(owner)
    destination = {"Mq-Destination": "DIRECT=OS:.\\orders"} if op == "send_by_format_name" else {}
    response = await client.request(method, path, data=body, headers=destination)
    if not op:  # a send to a queue named with an escape is a send all the same
        assert response.status == 201, await response.text()
        assert [kind for _, kind, _ in owner.commands] == [wire.Kind.IDENTITY, wire.Kind.PUT]
        assert wire.put_command(owner.commands[1][2]).queue == "orders"
        return
    [(_, kind, payload)] = owner.commands
    assert (response.status, await response.read()) == (207, b"made by the owner")
    assert (response.headers["Content-Type"], response.headers["Entrepot-X"]) == (
        "x/owner", "1")
    assert kind == wire.Kind.CALL
    call = wire.call_command(payload)
    assert (call.op, call.method, call.match, call.body) == (op, method, match, body)
    assert call.principal.open and call.local
    assert (op != "send_by_format_name"
            or ("Mq-Destination", "DIRECT=OS:.\\orders") in call.headers)


async def test_management_refused_at_the_edge_never_reaches_the_owner(front: Any) -> None:
    """Who may ask is the front's to decide, as one process's edge does: a page of another
    site is no local client of an open gateway; a method a queue resource does not serve,
    and a path no route serves, are refused whoever asks."""
    owner = _Owner(_answers)
    client = await front(owner)
    foreign = {"Origin": "https://elsewhere.example"}
    for method, path in (("GET", "/v1/links"), ("POST", "/v1/admin/backup"),
                         ("GET", "/ui/status.json"), ("PUT", "/v1/queues/orders")):
        response = await client.request(method, path, headers=foreign, data=b"{}")
        assert response.status == 403, (path, await response.text())
    response = await client.patch("/v1/queues/orders")
    assert response.status == 405 and "GET" in response.headers["Allow"]
    response = await client.get("/v1/nowhere")
    assert response.status == 404
    assert response.content_type == "application/problem+json"
    assert owner.commands == []


async def test_a_send_naming_reply_addresses_has_the_owner_check_them(front: Any) -> None:
    """Reply addresses are checked against the owner's state (its links, its mapping):
    the send goes as a command with the sender, for the owner to check them."""
    owner = _Owner(_answers)
    client = await front(owner)
    response = await client.post("/v1/queues/orders/messages", data=b"hi",
                                 headers={"Mq-Response-Queue": "private$/replies"})
    assert response.status == 201, await response.text()
    [(_, kind, payload)] = owner.commands
    command = wire.send_command(payload)
    assert kind == wire.Kind.SEND and command.replies_of is not None
    assert command.replies_of.open and command.properties.response_queue == "private$/replies"
    plain = await client.post("/v1/queues/orders/messages", data=b"hi",
                              headers={"Mq-Label": "no replies"})
    assert plain.status == 201
    assert [kind for _, kind, _ in owner.commands[1:]] == [wire.Kind.IDENTITY, wire.Kind.PUT]

