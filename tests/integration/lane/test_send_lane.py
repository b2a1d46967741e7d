"""A front's send lane (gateway.fronts.send_lane) in-process, on a real socket, with a
scripted store owner: it answers the REST sends it takes byte for byte as aiohttp's handlers
do, and leaves every other request, with its connection, to them. SRMP and TLS:
test_send_lane_srmp_tls.py."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest

from gateway.fronts import wire
from tests.lane_harness import (
    ACME,
    GUID,
    HOLD,
    Front,
    Start,
    exchange,
    read_answer,
    send,
    unstamped,
)


@pytest.mark.parametrize("request_bytes, taken, status", [
    (send(), True, 201),
    (send(headers=ACME + "Mq-Label: l\r\nMq-Priority: 5\r\nContent-Type: text/plain\r\n"),
     True, 201),
    (send("nosuch", headers="Authorization: Bearer admin-key\r\n"), True, 404),
    (send(headers=ACME + "Mq-Priority: 9\r\n"), False, 400),
    (send(headers=ACME + "Mq-Label: a\r\nMq-Label: b\r\n"), False, 400),
    (send(headers=ACME + "Mq-Prority: 1\r\n"), False, 400),
    (send("private$/other"), False, 403),
    (send(headers="Authorization: Bearer wrong\r\n"), False, 401),
    (send(headers=""), False, 401),
    (send(headers="Authorization: Bearer slow-key\r\n"), False, 201),  # its rate bucket
    (send(headers=ACME + "Idempotency-Key: k1\r\n"), True, 201),
    (send(headers=ACME + "Mq-Transaction: single\r\n"), True, 201),
    (send(headers=ACME + "Mq-Delivery: express\r\n"), True, 201),
    (send(headers=ACME + "Mq-Response-Queue: acme_in\r\n"), True, 201),
    (send(headers=ACME + "Mq-Transaction: 0123456789abcdef\r\n"), False, 202),
    (send(body=b"x" * (65 << 10)), False, 201),
    (send().replace(b"POST", b"GET"), False, 200),
])
async def test_the_lane_answers_as_aiohttps_handlers_do(
        start: Start, request_bytes: bytes, taken: bool, status: int) -> None:
    laned, plain = await start(), await start(lane=False)
    for front in (laned, plain):  # one send first: the front knows the GUID then
        await exchange(front.port, send("primer", headers="Authorization: Bearer admin-key"
                                          "\r\n"))
        front.owner.commands.clear()
    assert laned.lane is not None
    laned.lane.passed = 0
    [answer] = await exchange(laned.port, request_bytes)
    [expected] = await exchange(plain.port, request_bytes)
    assert answer == expected
    assert answer.startswith(b"HTTP/1.1 %d " % status), answer
    assert laned.lane is not None and laned.lane.passed == (0 if taken else 1)
    if taken:  # the same command as aiohttp's handler sends (PUT or SEND)
        assert laned.owner.kinds() == plain.owner.kinds() and len(laned.owner.kinds()) == 1
        [(_, command)] = laned.owner.commands
        [(_, expected_command)] = plain.owner.commands
        assert unstamped(command) == unstamped(expected_command)


async def test_a_fronts_first_send_goes_whole_while_it_asks_the_guid(start: Start) -> None:
    front = await start()
    [answer] = await exchange(front.port, send())
    assert answer.startswith(b"HTTP/1.1 201 ")
    assert front.owner.kinds() == [wire.Kind.SEND, wire.Kind.IDENTITY]


async def test_a_replayed_send_says_so_as_aiohttp_does(start: Start) -> None:
    laned, plain = await start(), await start(lane=False)
    key = ACME + "Idempotency-Key: k1\r\n"
    for front in (laned, plain):
        await exchange(front.port, send(headers=key))
    [answer] = await exchange(laned.port, send(headers=key))
    [expected] = await exchange(plain.port, send(headers=key))
    assert answer == expected and b"Idempotency-Replayed: true\r\n" in answer
    assert laned.lane is not None and laned.lane.passed == 0


async def test_once_the_guid_is_known_sends_are_stamped_and_encoded_here(start: Start) -> None:
    """As aiohttp's send handler does: the owner takes the record as it comes (PUT)."""
    front = await start()
    answers = [await exchange(front.port, send(body=b"%d" % i)) for i in range(3)]
    assert all(a.startswith(b"HTTP/1.1 201 ") for [a] in answers)
    assert front.owner.kinds() == [wire.Kind.SEND, wire.Kind.IDENTITY, wire.Kind.PUT,
                                   wire.Kind.PUT]
    _, put = front.owner.commands[-1]
    assert put.queue == "acme_in" and put.payload.endswith(b"2")


async def test_pipelined_requests_are_aiohttps(start: Start) -> None:
    """Requests written together go to aiohttp with the connection: its parser reads them
    all before answering the first, and one it refuses leaves the others unanswered."""
    front = await start()
    browse = b"GET /v1/queues/acme_in/messages HTTP/1.1\r\nHost: h\r\n" + ACME.encode() + (
        b"\r\n")
    answers = await exchange(front.port, send(body=b"1") + send(body=b"2")
                              + send("nosuch", headers="Authorization: Bearer admin-key\r\n")
                              + browse + send(body=b"3"), answers=5)
    assert [a.split(b" ")[1] for a in answers] == [b"201", b"201", b"404", b"200", b"201"]
    assert b'"seq":1' in answers[0] and b'"seq":2' in answers[1]
    assert front.owner.sends() == ["send"] * 3 + ["browse", "send"]
    assert front.lane is not None and front.lane.passed == 1  # at once


async def test_a_send_followed_by_bytes_aiohttp_refuses_is_not_stored(start: Start) -> None:
    laned, plain = await start(), await start(lane=False)
    data = send(body=b"abc") + b"NOT HTTP\r\n\r\n"
    seen = []
    for front in (laned, plain):
        reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
        writer.write(data)
        seen.append(await asyncio.wait_for(reader.read(), 30))
        writer.close()
    undated = [re.sub(rb"\r\nDate: [^\r]*", b"", answer) for answer in seen]
    assert undated[0] == undated[1] and undated[0].startswith(b"HTTP/1.0 400 "), seen
    assert laned.owner.sends() == [] == plain.owner.sends()


async def _trickle(port: int, head: bytes, rest: bytes, every_s: float) -> bytes:
    """``head`` at once, then ``rest`` a byte at a time, every ``every_s``, while reading
    what comes back: all that came back once the gateway closed the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head)

    async def send() -> None:
        for byte in rest:
            if writer.is_closing() or reader.at_eof():
                return
            writer.write(bytes([byte]))
            await asyncio.sleep(every_s)

    sending = asyncio.create_task(send())
    try:
        return await asyncio.wait_for(reader.read(), 60)
    except ConnectionError:
        return b"(reset)"
    finally:
        sending.cancel()
        writer.close()


@pytest.mark.parametrize("part", ["body", "head"])
async def test_a_request_that_trickles_in_is_timed_out_as_aiohttp_does(
        start: Start, part: str) -> None:
    """However slowly its bytes come, a request not all there within a tick of the lane goes
    to aiohttp: its body time-out (408) or its keep-alive time-out (closed) applies."""
    server = {"body_timeout": "1s", "keepalive_timeout": "1s"}
    laned, plain = await start(**server), await start(lane=False, **server)
    data = send(body=b"x" * 12)
    start_at = len(data) - 12 if part == "body" else 0
    seen = []
    for front in (laned, plain):
        seen.append(await _trickle(front.port, data[:start_at], data[start_at:], 0.4))
    assert laned.owner.sends() == [] == plain.owner.sends()
    if part == "body":
        assert all(b" 408 " in answer for answer in seen), seen
    else:
        assert all(b"HTTP/" not in answer for answer in seen), seen


async def test_a_request_that_comes_in_pieces_is_taken(start: Start) -> None:
    front = await start()
    data = send(body=b"x" * 1000)
    reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
    for piece in (data[:10], data[10:80], data[80:-1], data[-1:]):
        writer.write(piece)
        await writer.drain()
        await asyncio.sleep(0.05)
    assert (await read_answer(reader)).startswith(b"HTTP/1.1 201 ")
    writer.close()
    assert front.lane is not None and front.lane.passed == 0
    assert front.owner.sends() == ["send"]


async def test_a_body_that_stops_coming_goes_to_aiohttp_and_its_time_out(
        start: Start) -> None:
    """Not all there for a whole tick of the lane: aiohttp's server takes the connection,
    and its body time-out answers (408), as for a request it had from the start."""
    front = await start(body_timeout="200ms")
    reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
    writer.write(send()[:-1])
    answer = await asyncio.wait_for(read_answer(reader), 60)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"body-timeout" in answer
    assert front.lane is not None and front.lane.passed == 1
    assert front.owner.kinds() == []
    writer.close()


async def test_a_head_with_lone_line_feeds_goes_to_aiohttp_at_once(start: Start) -> None:
    front = await start()
    [answer] = await exchange(front.port, send().replace(b"\r\n", b"\n"))
    assert answer.startswith(b"HTTP/1.0 400 ") and b"Bad status line" in answer  # aiohttp's
    assert front.lane is not None and front.lane.passed == 1


async def test_a_send_at_the_owner_counts_in_flight_and_in_the_metrics(start: Start) -> None:
    front = await start()
    reader, writer = await _held_send(front)
    assert front.counts.total() == 1 and front.metrics.in_flight_now() == 1
    _owner_answers(front, front.owner.held[0])
    assert (await read_answer(reader)).startswith(b"HTTP/1.1 201 ")
    assert front.counts.total() == 0 and front.metrics.in_flight_now() == 0
    requests, latency = front.metrics.http.snapshot()
    route = "/v1/queues/{path}/messages"
    assert requests == {(route, "POST", 201): 1} and sum(latency[(route, "POST")][:-1]) == 1
    writer.close()


async def _held_send(front: Front) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection whose send the scripted owner holds unanswered."""
    held = len(front.owner.held)
    reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
    writer.write(send(HOLD))
    while len(front.owner.held) == held:
        await asyncio.sleep(0.01)
    return reader, writer


def _owner_answers(front: Front, request_id: int) -> None:
    """The scripted owner stores a held send now."""
    assert front.owner.channel is not None
    front.owner.channel.send(request_id, wire.Kind.OK, (
        {"id": f"{{{GUID}}}\\9", "queue": HOLD, "seq": 9}, False))


async def test_a_partner_over_its_share_is_refused_by_aiohttp(start: Start) -> None:
    """concurrent_requests_max 4: each partner's share is one request in flight."""
    front = await start(concurrent_requests_max=4)
    reader, writer = await _held_send(front)
    [answer] = await exchange(front.port, send())
    assert answer.startswith(b"HTTP/1.1 503 ") and b"already 1 requests" in answer
    assert front.lane is not None and front.lane.passed == 1
    _owner_answers(front, front.owner.held[0])
    assert (await read_answer(reader)).startswith(b"HTTP/1.1 201 ")
    [answer] = await exchange(front.port, send())  # its place is given back
    assert answer.startswith(b"HTTP/1.1 201 ")
    writer.close()


async def test_the_owner_going_away_cuts_the_connection(start: Start) -> None:
    """The send may have been stored: no answer at all, as aiohttp's handler does."""
    front = await start()
    reader, writer = await _held_send(front)
    front.channel.connection_lost(None)  # as when the owner's end closes
    assert await asyncio.wait_for(reader.read(), 30) == b""
    writer.close()


async def test_an_idle_connection_closes_after_the_keepalive_timeout(start: Start) -> None:
    front = await start(keepalive_timeout="1s")
    reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
    writer.write(send())
    assert (await read_answer(reader)).startswith(b"HTTP/1.1 201 ")
    assert await asyncio.wait_for(reader.read(), 60) == b""
    assert front.lane is not None and front.lane.passed == 0
    writer.close()


async def test_lane_connections_count_against_the_cap(start: Start) -> None:
    """connections_max 16 with one process: the 17th connection is closed at once."""
    front = await start(connections_max=16)
    held = [await asyncio.open_connection("127.0.0.1", front.port) for _ in range(16)]
    while front.lane is not None and len(front.lane.connections) < 16:
        await asyncio.sleep(0.01)
    reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
    assert await asyncio.wait_for(reader.read(), 30) == b""
    writer.close()
    for _, w in held:
        w.close()


async def test_a_stop_answers_the_send_at_the_owner_and_closes_idle_connections(
        start: Start) -> None:
    front = await start()
    assert front.lane is not None
    idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", front.port)
    idle_writer.write(send())
    assert (await read_answer(idle_reader)).startswith(b"HTTP/1.1 201 ")
    reader, writer = await _held_send(front)
    front.lane.stop()
    assert await asyncio.wait_for(idle_reader.read(), 30) == b""
    _owner_answers(front, front.owner.held[0])
    assert (await read_answer(reader)).startswith(b"HTTP/1.1 201 ")
    assert await asyncio.wait_for(reader.read(), 30) == b""
    await front.lane.stopped(30)
    assert front.lane.in_flight == 0
    idle_writer.close()
    writer.close()


_NAMES = ["Mq-Label", "Mq-Priority", "Mq-Delivery", "Mq-Journal", "Mq-Acknowledge",
          "Mq-Time-To-Be-Received", "Mq-Time-To-Reach-Queue", "Mq-Correlation-Id",
          "Mq-App-Specific", "Mq-Transaction", "Mq-Sent-Time", "Mq-Label-Encoding",
          "Mq-Response-Queue", "Mq-Admin-Queue", "Mq-Prority", "Mq-Destination",
          "Idempotency-Key", "Content-Type", "Content-Encoding", "Authorization", "X-Other",
          "Connection", "Expect", "mq-label", "MQ-PRIORITY"]
_VALUES = ["", " ", "1", "7", "8", "-1", "express", "recoverable", "journal", "deadletter",
           "none", "single", "0x2", "2.5", "99999999999", "a%20b", "%zz", "label",
           "Bearer acme-key", "Bearer slow-key", "Bearer admin-key", "Bearer nope", "Basic x",
           "text/plain", "gzip", "keep-alive", "close", "100-continue", "acme_in",
           "DIRECT=HTTP://h/msmq/q", "2026-01-01T00:00:00Z", "MQMSG_ACKNOWLEDGMENT_FULL_REACH_QUEUE"]


async def test_random_sends_are_answered_alike(start: Start,
                                               caplog: pytest.LogCaptureFixture) -> None:
    """A differential check with a fixed seed: sends with random headers from a vocabulary
    of good and bad names and values get the same bytes from a laned front as from
    aiohttp's handlers, and the same commands reach the owner."""
    import random

    rng = random.Random(20261128)
    laned, plain = await start(), await start(lane=False)
    for front in (laned, plain):
        await exchange(front.port, send("primer", headers="Authorization: Bearer admin-key"
                                          "\r\n"))
        front.owner.commands.clear()
    taken = 0
    for _ in range(300):
        headers = "".join(f"{rng.choice(_NAMES)}: {rng.choice(_VALUES)}\r\n"
                          for _ in range(rng.randint(0, 4)))
        if "Authorization" not in headers and rng.random() < 0.8:
            headers += ACME
        queue = rng.choice(["acme_in", "acme_out", "private$/acme_x", "other", "nosuch"])
        data = send(queue, headers=headers, body=rng.randbytes(rng.randint(0, 64)))
        assert laned.lane is not None
        passed = laned.lane.passed
        [answer] = await exchange(laned.port, data)
        [expected] = await exchange(plain.port, data)
        assert answer == expected, data
        taken += laned.lane.passed == passed
    assert [unstamped(c) for _, c in laned.owner.commands if c is not None] == [
        unstamped(c) for _, c in plain.owner.commands if c is not None]
    assert taken > 20  # the lane took its share, and answered those alike
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # refusals: quiet


@pytest.mark.parametrize("cut", [10, -1])  # in the head, in the body
async def test_a_request_cut_by_the_end_of_input_is_closed_as_aiohttp_closes_it(
        start: Start, cut: int) -> None:
    laned, plain = await start(), await start(lane=False)
    seen = []
    for front in (laned, plain):
        reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
        writer.write(send()[:cut])
        writer.write_eof()
        seen.append(await asyncio.wait_for(reader.read(), 30))
        writer.close()
    assert seen == [b"", b""]
    assert laned.owner.commands == [] == plain.owner.commands


async def test_a_body_over_request_body_max_is_aiohttps_413(start: Start) -> None:
    laned, plain = await start(request_body_max="1KiB"), await start(
        lane=False, request_body_max="1KiB")
    data = send(body=b"x" * 1025)
    [answer] = await exchange(laned.port, data)
    assert answer == (await exchange(plain.port, data))[0]
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert laned.lane is not None and laned.lane.passed == 1
