"""SRMP requests whose messages need nothing but their own record are stored together, those
of one pass of the loop (the store owner's commands, and one process's requests), on a real
application and store; each is answered as one process answers it alone."""

from __future__ import annotations

import asyncio
import base64
import collections
import pickle
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from gateway.auth.principal import NOBODY
from gateway.errors import ProblemError
from gateway.fronts import wire
from gateway.fronts.commands import Commands
from gateway.inbound.parse_pool import parse_answer, parsed_of
from gateway.queues import sending
from gateway.settings import Settings
from gateway.srmp.build import SrmpRequest
from gateway.srmp.eod import VERDICT_HEADER
from gateway.srmp.parsed import ParsedRequest
from gateway.web.srmp_routes import PlainBatch, Sender, deliver_srmp
from store.message_store import MessageStore
from tests.helpers import ready_client
from tests.owner_channel import OwnerChannel
from tests.srmp_client import post, stream_message, user_message

_URL = "http://machine1/msmq/"


def _command(request: SrmpRequest | bytes, remote: str = "127.0.0.1") -> wire.SrmpCommand:
    """The command a front sends for ``request`` (raw bytes: sent as they are)."""
    if isinstance(request, bytes):
        content_type, raw = "text/xml", request
    else:
        content_type = dict(request.headers)["Content-Type"]
        raw = request.body
    return wire.SrmpCommand(remote, NOBODY, content_type, raw, *parse_answer(content_type, raw))


@pytest.fixture
async def client(aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> Any:
    test_client = await ready_client(aiohttp_client, settings_factory(
        server__names=["machine1"], store__segment_size="64KiB",
        store__group_commit_bytes_max="64KiB"))
    for name, settings in (("feed", {}), ("small", {"quota": "1KiB"}),
                           ("orders", {"transactional": True})):
        response = await test_client.put(f"/v1/queues/{name}", json=settings)
        assert response.status == 201, await response.text()
    return test_client


@pytest.fixture
def stored_together(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many records each ``sending.commit_each`` call was given."""
    calls: list[int] = []
    real = sending.commit_each

    async def commit_each(store: MessageStore, sends: Sequence[sending.Send],
                          arrived: Any) -> list[Any]:
        calls.append(len(sends))
        return await real(store, sends, arrived)

    monkeypatch.setattr(sending, "commit_each", commit_each)
    return calls


async def _metrics(client: Any) -> collections.Counter[str]:
    """SRMP messages counted, by "kind outcome"."""
    text = await (await client.get("/metrics")).text()
    counts: collections.Counter[str] = collections.Counter()
    for line in text.splitlines():
        if line.startswith("entrepot_srmp_messages_total{"):
            kind = line.split('kind="')[1].split('"')[0]
            outcome = line.split('outcome="')[1].split('"')[0]
            counts[f"{kind} {outcome}"] = int(float(line.rsplit(" ", 1)[1]))
    return counts


async def _bodies(client: Any, queue: str) -> list[bytes]:
    answer = await (await client.get(f"/v1/queues/{queue}/messages",
                                     params={"max": 100})).json()
    return sorted(base64.b64decode(m["body_base64"]) for m in answer["messages"])


async def test_the_srmp_requests_of_one_pass_are_each_answered_by_what_became_of_it(
        client: Any, stored_together: list[int]) -> None:
    """Plain messages of one pass go to the store in one call; a duplicate (of a message
    stored before, or of one in the same pass), a queue over its quota, refusals, and the
    messages that take the whole way (express, a stream) each get their own answer."""
    before = user_message(_URL + "feed", b"before", ordinal=9)
    assert (await post(client, before)).status == 200
    stored_together.clear()
    requests: list[tuple[SrmpRequest | bytes, str]] = [
        (user_message(_URL + "feed", b"one", ordinal=1), "127.0.0.1"),
        (user_message(_URL + "feed", b"one", ordinal=1), "127.0.0.1"),  # the same, again
        (user_message(_URL + "small", b"s" * 2048, ordinal=2), "127.0.0.1"),  # over quota
        (user_message(_URL + "nowhere", b"n", ordinal=3), "127.0.0.1"),
        (b"<not an envelope", "127.0.0.1"),
        (user_message(_URL + "feed", b"express", ordinal=4, durable=False), "127.0.0.1"),
        (user_message(_URL + "feed", b"five", ordinal=5), "127.0.0.1"),
        (user_message(_URL + "orders", b"not in a stream", ordinal=6), "127.0.0.1"),
        (user_message(_URL + "feed", b"stranger", ordinal=7), "192.0.2.7"),  # not trusted
        (before, "127.0.0.1"),
        (user_message(_URL + "feed", b"L" * (100 << 10), ordinal=8), "127.0.0.1"),  # 413
        (stream_message(_URL + "orders", b"streamed", 1,
                        receipts_to="http://sender.example/msmq/order_queue$"), "127.0.0.1"),
    ]
    commands, channel = Commands(client.app), OwnerChannel()
    for request_id, (request, remote) in enumerate(requests):  # all in this one pass
        channel.put(commands, request_id, wire.Kind.SRMP, _command(request, remote))
    answers = [await channel.answer(i) for i in range(len(requests))]
    fates = [answer.status if kind == wire.Kind.PROBLEM else "ok" for kind, answer in answers]
    assert fates == ["ok", "ok", "ok", 400, 400, "ok", "ok", 400, 403, "ok", 413, "ok"], fates
    assert answers[11][1] == {VERDICT_HEADER: "stored"}
    # The plain ones (the first of the two alike, the one over quota, "five", the one too
    # large for a segment) in one call.
    assert stored_together == [4], stored_together
    assert await _bodies(client, "feed") == [b"before", b"express", b"five", b"one"]
    assert await _bodies(client, "small") == []
    assert await _bodies(client, "orders") == [b"streamed"]
    assert await _metrics(client) == {"user stored": 5, "user duplicate": 2,
                                      "user quota_dropped": 1, "user rejected": 4,
                                      "unknown rejected": 1}


async def test_a_duplicate_of_a_message_being_stored_waits_for_its_answer(
        client: Any, stored_together: list[int]) -> None:
    """A message whose id is being stored by a pass before takes the whole way: it waits
    for the first one's fate, and is then a duplicate (not stored twice)."""
    commands, channel = Commands(client.app), OwnerChannel()
    message = user_message(_URL + "feed", b"once", ordinal=11)
    for request_id in range(2):
        channel.put(commands, request_id, wire.Kind.SRMP, _command(message))
        await asyncio.sleep(0)  # the first pass's store call starts: the id is being stored
    answers = [await channel.answer(i) for i in range(2)]
    assert [kind for kind, _ in answers] == [wire.Kind.OK] * 2
    assert await _bodies(client, "feed") == [b"once"]
    assert (await _metrics(client))["user duplicate"] == 1


async def test_one_process_stores_the_plain_messages_of_a_pass_together(
        client: Any, stored_together: list[int]) -> None:
    """In one process too, the plain SRMP requests in flight in one pass of the loop are
    stored with one store call, each answered by its own fate (one too large for a
    segment: 413)."""
    app = client.app
    plain = PlainBatch(app)
    sender = Sender("127.0.0.1", NOBODY, "")
    requests = [user_message(_URL + "feed", b"m%d" % i, ordinal=20 + i) for i in range(4)]
    requests += [requests[0], user_message(_URL + "nowhere", b"n", ordinal=30),
                 user_message(_URL + "feed", b"L" * (100 << 10), ordinal=31)]  # 413

    async def deliver(request: SrmpRequest) -> object:
        command = _command(request)

        async def parse() -> ParsedRequest:
            return parsed_of(command.parse_kind, pickle.loads(command.parse),
                             command.content_type, command.raw)

        try:
            return await deliver_srmp(app, sender, parse, plain)
        except ProblemError as exc:
            return exc.status_hint

    answers = await asyncio.gather(*(deliver(request) for request in requests))
    assert answers == [None, None, None, None, None, 400, 413], answers
    assert stored_together == [5], stored_together
    assert await _bodies(client, "feed") == [b"m0", b"m1", b"m2", b"m3"]
    assert (await _metrics(client))["user duplicate"] == 1
