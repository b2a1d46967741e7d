"""The frames and the channel between fronts and the store owner (gateway.fronts)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from gateway.auth.principal import ADMIN, NOBODY, Principal
from gateway.errors import ProblemError
from gateway.fronts import front as front_process
from gateway.fronts import wire
from gateway.fronts.channel import Channel, ChannelLost, Overloaded
from gateway.msmq.message import MessageProperties


def _properties() -> MessageProperties:
    """Every field away from its default, so that a field dropped or moved shows."""
    return MessageProperties(
        label="l", priority=5, recoverable=False, message_class=2, reach_queue_by_ms=11,
        receive_by_ms=12, correlation_id="c", response_queue="r", admin_queue="a", ack=4,
        journal="dead", app_specific=7, content_type="text/plain", transactional=True,
        sent_at_ms=13, arrived_at_ms=14, source_qm="q", message_id="m", extra={"x": "y"})


def test_a_send_command_comes_out_as_it_went_in() -> None:
    command = wire.SendCommand("private$/orders", b"\x00body\xff", _properties(), "single",
                               "partner:p\0key")
    frame = wire.encode(7, wire.Kind.SEND, command)
    (head, payload), = wire.reader().feed(frame)
    assert head == (len(payload), 7, wire.Kind.SEND)
    assert wire.send_command(payload) == command


@pytest.mark.parametrize("principal", [
    NOBODY, Principal("acme", send=("orders", "in_*"), receive=("out",)), ADMIN])
def test_an_srmp_command_comes_out_as_it_went_in(principal: Principal) -> None:
    command = wire.SrmpCommand("10.0.0.1", principal, "multipart/related; boundary=b",
                               b"\x00raw\xff", 1, b"\x80pickle")
    (_, payload), = wire.reader().feed(wire.encode(9, wire.Kind.SRMP, command))
    again = wire.srmp_command(payload)
    assert again == command
    # The owner tells an anonymous sender apart by identity (srmp_routes).
    assert (again.principal is NOBODY) == (principal is NOBODY)


def test_a_problem_answer_comes_out_as_the_error_it_was() -> None:
    error = ProblemError(429, "over the rate", type_slug="rate-limited", title="t",
                         headers={"Retry-After": "2"}, extra={"n": [1, "x"]})
    frame = wire.encode(3, wire.Kind.PROBLEM, wire.ProblemAnswer.of(error))
    (_, payload), = wire.reader().feed(frame)
    again = wire.problem_answer(payload).error()
    assert (again.status_hint, again.detail, again.type_slug, again.title, again.headers,
            again.extra) == (429, "over the rate", "rate-limited", "t", {"Retry-After": "2"},
                             {"n": [1, "x"]})


def test_frames_split_anywhere_are_read_whole_and_in_order() -> None:
    stream = b"".join(wire.encode(n, wire.Kind.OK, ({"n": n, "pad": "x" * n}, False))
                      for n in range(40))
    for size in (1, 2, 7, 64, 1000):
        reader = wire.reader()
        frames = []
        for start in range(0, len(stream), size):
            frames += reader.feed(stream[start:start + size])
        assert [wire.decode(p)[0]["n"] for _, p in frames] == list(range(40))


async def _pair(in_flight_max: int = 100) -> tuple[Channel, Channel]:
    """A front's channel and the owner's, over a socket pair; the owner answers each request
    with its value doubled."""
    ours, theirs = socket.socketpair()
    loop = asyncio.get_running_loop()

    def answer(channel: Channel, request_id: int, kind: int, payload: bytes) -> None:
        channel.send(request_id, wire.Kind.OK, wire.decode(payload) * 2)

    _, front = await loop.create_unix_connection(
        lambda: Channel(in_flight_max=in_flight_max), sock=ours)
    _, owner = await loop.create_unix_connection(lambda: Channel(on_request=answer),
                                                 sock=theirs)
    return front, owner


async def test_requests_are_answered_by_id_and_leave_together() -> None:
    front, owner = await _pair()
    answers = await asyncio.gather(*(front.call(wire.Kind.SEND, n) for n in range(50)))
    assert [kind for kind, _ in answers] == [wire.Kind.OK] * 50
    assert [wire.decode(payload) for _, payload in answers] == [2 * n for n in range(50)]
    # Fifty requests made in one pass of the loop went out in one write; the answers too.
    assert front.writes == 1 and owner.writes <= 2, (front.writes, owner.writes)
    front.close()
    owner.close()


async def test_a_request_beyond_the_limit_is_refused_at_once() -> None:
    front, owner = await _pair(in_flight_max=2)
    owner._on_request = lambda *_: None  # never answers
    waiting = [asyncio.ensure_future(front.call(wire.Kind.SEND, n)) for n in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(Overloaded):
        await front.call(wire.Kind.SEND, 3)
    owner.close()
    for call in waiting:
        with pytest.raises(ChannelLost):
            await call


async def test_waiting_requests_fail_when_the_owner_goes_and_later_ones_at_once() -> None:
    lost: list[bool] = []
    ours, theirs = socket.socketpair()
    loop = asyncio.get_running_loop()
    _, front = await loop.create_unix_connection(
        lambda: Channel(on_lost=lambda: lost.append(True)), sock=ours)
    call = asyncio.ensure_future(front.call(wire.Kind.SEND, 1))
    await asyncio.sleep(0)
    theirs.close()
    with pytest.raises(ChannelLost):
        await call
    assert lost == [True]
    with pytest.raises(ChannelLost):
        await front.call(wire.Kind.SEND, 2)


async def test_a_request_whose_caller_gives_up_is_cancelled_at_the_other_end() -> None:
    front, owner = await _pair()
    seen: list[tuple[int, int]] = []
    owner._on_request = lambda _, request_id, kind, __: seen.append((request_id, kind))

    async def frames(count: int) -> None:
        while len(seen) < count:
            await asyncio.sleep(0.01)

    call = asyncio.ensure_future(front.call(wire.Kind.RECEIVE, None))
    await asyncio.wait_for(frames(1), 30)  # upper bounds only
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await asyncio.wait_for(frames(2), 30)
    [(request_id, first), (cancelled, second)] = seen
    assert (first, second, cancelled) == (wire.Kind.RECEIVE, wire.Kind.CANCEL, request_id)
    front.close()
    owner.close()


async def test_a_front_pushes_its_counts_unasked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``_PUSH_S`` seconds (here 10 ms), so that a front killed loses only the counts
    of its last interval."""
    monkeypatch.setattr(front_process, "_PUSH_S", 0.01)
    front, owner = await _pair()
    pushed: list[tuple[int, int, object]] = []
    owner._on_request = lambda _, request_id, kind, payload: pushed.append(
        (request_id, kind, wire.decode(payload)))
    total = iter(range(1, 1000))
    pushing = asyncio.ensure_future(front_process._push_counts(front, lambda: next(total)))

    async def pushes(count: int) -> None:
        while len(pushed) < count:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(pushes(3), 30)  # an upper bound only
    assert pushed[:3] == [(0, wire.Kind.COUNTS, 1), (0, wire.Kind.COUNTS, 2),
                          (0, wire.Kind.COUNTS, 3)]
    owner.close()
    await asyncio.wait_for(pushing, 30)  # ends once the owner is gone
    front.close()
