"""A front process's application in-process, with a scripted store owner at the other end
of its channel: which requests it answers with commands, and what it sends."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from gateway.fronts import wire
from gateway.fronts.channel import Channel
from gateway.fronts.forward import Forwarder
from gateway.fronts.front import make_front_app
from gateway.fronts.shared_counts import SharedCounts
from gateway.metrics import Metrics
from gateway.settings import Settings
from gateway.web.middlewares import make_middlewares


class _NoForwarding:
    """The front's forwarder, failing the test if a request is forwarded as HTTP."""

    def __init__(self) -> None:
        self.forwarded: list[str] = []

    async def forward(self, request: Any) -> Any:
        self.forwarded.append(request.path)
        raise AssertionError(f"{request.method} {request.path} forwarded as HTTP")


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
                ) -> AsyncIterator[Callable[[_Owner], Awaitable[tuple[Any, _NoForwarding]]]]:
    """Makes a front app (an open gateway's settings) whose channel leads to ``owner``."""
    channels: list[Channel] = []

    async def make(owner: _Owner) -> tuple[Any, _NoForwarding]:
        ours, theirs = socket.socketpair()
        loop = asyncio.get_running_loop()
        _, channel = await loop.create_unix_connection(Channel, sock=ours)
        _, other = await loop.create_unix_connection(
            lambda: Channel(on_request=owner.on_request), sock=theirs)
        channels.extend((channel, other))
        forwarder = _NoForwarding()
        app = make_front_app(settings_factory(), Metrics(), channel,
                             forwarder, SharedCounts.create(2))  # type: ignore[arg-type]
        return await aiohttp_client(app), forwarder

    yield make
    for channel in channels:
        channel.close()
    await asyncio.sleep(0)  # the transports close on the next pass


async def test_a_receive_is_checked_here_and_run_by_the_owner_as_one_command(
        front: Any) -> None:
    message = {"id": "{g}\\1", "queue": "orders", "seq": 1, "body_base64": "aGk="}
    owner = _Owner(lambda kind, payload: [message] if kind == wire.Kind.RECEIVE else None)
    client, forwarder = await front(owner)
    response = await client.post("/v1/queues/orders/receive?max=5&wait=0.5",
                                 headers={"Mq-Transaction": "none"})
    assert response.status == 200, await response.text()
    assert (await response.json()) == {"messages": [message]}
    [(_, kind, payload)] = owner.commands
    assert kind == wire.Kind.RECEIVE
    command = wire.receive_command(payload)
    assert (command.queue, command.asked) == ("orders", (5, 0.5, "none"))
    assert command.principal.open  # no credentials configured: an open gateway
    assert forwarder.forwarded == []


@pytest.mark.parametrize(("query", "named"), [("max=0", "max"), ("wait=soon", "wait"),
                                              ("max=1001", "max")])
async def test_a_bad_receive_is_refused_here_naming_the_parameter(
        front: Any, query: str, named: str) -> None:
    owner = _Owner(lambda kind, payload: None)
    client, _ = await front(owner)
    response = await client.post(f"/v1/queues/orders/receive?{query}")
    assert response.status == 400
    assert named in (await response.json())["detail"]
    assert owner.commands == []


@pytest.mark.parametrize("method", ["GET", "HEAD"])
async def test_a_browse_is_checked_here_and_read_by_the_owner_as_one_command(
        front: Any, method: str) -> None:
    page = {"messages": [{"id": "{g}\\3", "queue": "orders", "seq": 3}], "next": 3}
    owner = _Owner(lambda kind, payload: page if kind == wire.Kind.BROWSE else None)
    client, forwarder = await front(owner)
    response = await client.request(method, "/v1/queues/orders/messages?after=2&limit=7")
    assert response.status == 200, await response.text()
    if method == "GET":
        assert (await response.json()) == page
    [(_, kind, payload)] = owner.commands
    assert (kind, wire.decode(payload)) == (wire.Kind.BROWSE, ("orders", (2, 7)))
    assert forwarder.forwarded == []
    response = await client.get("/v1/queues/orders/messages?limit=0")
    assert response.status == 400 and "limit" in (await response.json())["detail"]
    assert len(owner.commands) == 1


async def test_a_send_in_a_transaction_is_held_by_the_owner_as_one_command(
        front: Any) -> None:
    held = {"transaction": "tx-1", "queue": "private$/orders", "index": 0}
    owner = _Owner(lambda kind, payload: held if kind == wire.Kind.TX_SEND else None)
    client, forwarder = await front(owner)
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
    assert forwarder.forwarded == []


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
    client, forwarder = await front(owner)
    response = await client.request(method, path)
    assert response.status == status, await response.text()
    assert (await response.json()) == answer
    [(_, kind, payload)] = owner.commands
    command = wire.tx_command(payload)
    assert (kind, (command.action, command.transaction)) == (wire.Kind.TX, action)
    assert command.principal.open
    assert forwarder.forwarded == []


@pytest.mark.parametrize("key", [None, "k-1"])
async def test_a_batch_is_checked_here_and_stored_by_the_owner_as_one_command(
        front: Any, key: str | None) -> None:
    answer = {"ids": ["a", "b"], "messages": [{"id": "a", "queue": "q1", "seq": 1},
                                              {"id": "b", "queue": "q2", "seq": 1}]}
    owner = _Owner(lambda kind, payload: (answer, False) if kind == wire.Kind.BATCH else None)
    client, forwarder = await front(owner)
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
    assert forwarder.forwarded == []
    bad = await client.post("/v1/batch", data=b'{"messages": [{"queue": "q1"}]}')
    assert bad.status == 400 and "body_base64" in (await bad.json())["detail"]
    assert len(owner.commands) == 1


async def test_a_command_the_owner_may_have_done_is_not_answered_as_failed(
        front: Any) -> None:
    """The owner goes away with a receive in hand (it may have taken the message): the
    client gets no answer, as from a gateway that crashed, not a 503 saying nothing was
    done. A request after that, never sent to the owner, is 503."""
    channels: list[Channel] = []

    class _Vanishing(_Owner):
        def on_request(self, channel: Channel, request_id: int, kind: int,
                       payload: bytes) -> None:
            super().on_request(channel, request_id, kind, payload)
            channel.close()  # gone before answering
            channels.append(channel)

    client, _ = await front(_Vanishing(lambda kind, payload: None))
    with pytest.raises(aiohttp.ClientError):
        response = await client.post("/v1/queues/orders/receive")
        await response.read()
    later = await client.post("/v1/queues/orders/receive")
    assert later.status == 503 and later.headers["Retry-After"] == "1"
    assert len(channels) == 1


async def test_a_forwarded_request_the_owner_dropped_is_not_answered_as_failed(
        aiohttp_client: Any, settings_factory: Callable[..., Settings],
        tmp_path: Path) -> None:
    """Forwarded HTTP too: an owner that took the request and went away (it may have done
    it) leaves the client without an answer; one that cannot be reached is 503."""
    socket_path = tmp_path / "owner.sock"

    async def vanish(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")  # the whole request head, then gone
        writer.transport.abort()

    server = await asyncio.start_unix_server(vanish, path=str(socket_path))
    forwarder = Forwarder(settings_factory(), str(socket_path))
    await forwarder.start()
    app = web.Application(middlewares=make_middlewares(
        Metrics(), concurrent_requests_max=10, unmatched=forwarder.forward))
    app.router.add_get("/v1/links", forwarder.forward)
    client = await aiohttp_client(app)
    try:
        with pytest.raises(aiohttp.ClientError):
            response = await client.get("/v1/links")
            await response.read()
        server.close()
        await server.wait_closed()
        socket_path.unlink()
        response = await client.get("/v1/links")
        assert response.status == 503 and response.headers["Retry-After"] == "1"
    finally:
        await forwarder.close()


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
    client, forwarder = await front(owner)
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
    assert forwarder.forwarded == []


async def test_a_range_the_owner_cuts_ends_without_its_end(front: Any) -> None:
    """A record removed while the answer is sent (``MORE`` answers None): the client gets
    what was sent and a closed connection, as one process does; the cursor is the owner's
    to forget, so no ``DROP`` follows."""
    def answer(kind: int, payload: bytes) -> object:
        if kind == wire.Kind.LOG:
            return (200, None, {"Content-Type": "x/records"}, b"first", 3)
        return _NONE if kind == wire.Kind.MORE else None

    owner = _Owner(answer)
    client, _ = await front(owner)
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
    client, forwarder = await front(owner)
    response = await client.request(method, path, data=body)
    assert response.status == status, await response.text()
    if status != 204:
        assert (await response.json()) == answer
    [(_, kind, payload)] = owner.commands
    command = wire.log_command(payload)
    assert (kind, command.queue, command.rest, command.method, command.body) == (
        wire.Kind.LOG, "feed", rest, method, body)
    assert forwarder.forwarded == []


async def test_the_list_of_transactions_is_the_owners_for_the_principal(front: Any) -> None:
    listed = {"transactions": [{"id": "tx-1", "state": "active"}]}
    owner = _Owner(lambda kind, payload: listed if kind == wire.Kind.TX_LIST else None)
    client, forwarder = await front(owner)
    response = await client.get("/v1/transactions")
    assert response.status == 200, await response.text()
    assert (await response.json()) == listed
    [(_, kind, payload)] = owner.commands
    assert kind == wire.Kind.TX_LIST and wire.principal_of(wire.decode(payload)).open
    assert forwarder.forwarded == []
