"""A front's send lane (gateway.fronts.send_lane) in-process, on a real socket, with a
scripted store owner: it answers the sends it takes byte for byte as aiohttp's handlers do,
and leaves every other request, with its connection, to them."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import re
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gateway.auth.principal import NOBODY
from gateway.errors import ProblemError
from gateway.fronts import wire
from gateway.fronts.channel import Channel
from gateway.fronts.front import make_front_app, serve
from gateway.fronts.send_lane import SendLane
from gateway.fronts.shared_counts import SharedCounts
from gateway.metrics import Metrics
from gateway.settings import Settings, parse_settings
from gateway.web.http_server import app_runner
from gateway.web.listener import bind, tls_context
from tests.srmp_vectors import wire as wire_vector

GUID = "5f41afcd-531b-4207-8d99-27576b656bc4"
ACME = "Authorization: Bearer acme-key\r\n"
HOLD = "held"  # a queue whose sends the scripted owner leaves unanswered


def _sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def _settings(tmp_path: Path, **server: object) -> Settings:
    return parse_settings({
        "store": {"data_dir": str(tmp_path / "data")},
        "server": {"workers": 2, **server},
        "auth": {"admin_key_sha256": _sha("admin-key")},
        "partners": [
            {"name": "acme", "api_key_sha256": _sha("acme-key"), "send": ["acme_*", HOLD],
             "receive": ["acme_*"]},
            {"name": "slow", "api_key_sha256": _sha("slow-key"), "send": ["*"], "rate": 100},
            {"name": "certy", "cert_subject": "CN=certy,O=entrepot development",
             "send": ["acme_*"]},
        ],
    })


@dataclass
class _Owner:
    """The owner's end: records each command, answers sends as the owner would."""

    commands: list[tuple[int, Any]] = field(default_factory=list)
    held: list[int] = field(default_factory=list)
    seq: int = 0
    channel: Channel | None = None  # its end, once a command came
    keys: dict[str, object] = field(default_factory=dict)  # the first answer of each key

    def on_request(self, channel: Channel, request_id: int, kind: int, payload: bytes) -> None:
        self.channel = channel
        if kind in (wire.Kind.PUT, wire.Kind.SEND):
            command: Any = (wire.put_command(payload) if kind == wire.Kind.PUT
                            else wire.send_command(payload))
            self.commands.append((kind, command))
            if command.queue == HOLD:
                self.held.append(request_id)
            elif command.queue == "nosuch":
                channel.send(request_id, wire.Kind.PROBLEM, wire.ProblemAnswer.of(ProblemError(
                    404, "no queue 'nosuch'", type_slug="MQ_ERROR_QUEUE_NOT_FOUND")))
            else:
                key = getattr(command, "dedup_key", None)
                if key in self.keys:
                    channel.send(request_id, wire.Kind.OK, (self.keys[key], True))
                    return
                self.seq += 1
                answer = {"id": f"{{{GUID}}}\\{self.seq}", "queue": command.queue,
                          "seq": self.seq}
                if key is not None:
                    self.keys[key] = answer
                channel.send(request_id, wire.Kind.OK, (answer, False))
            return
        if kind == wire.Kind.SRMP:
            srmp = wire.srmp_command(payload)
            self.commands.append((kind, srmp))
            if b"private$/denied" in srmp.raw:
                channel.send(request_id, wire.Kind.PROBLEM, wire.ProblemAnswer.of(ProblemError(
                    403, "not allowed", type_slug="MQ_ERROR_ACCESS_DENIED")))
            else:
                channel.send(request_id, wire.Kind.OK, None)
            return
        self.commands.append((kind, None))
        answers = {wire.Kind.IDENTITY: GUID, wire.Kind.BROWSE: {"messages": [], "next": 0},
                   wire.Kind.TX_SEND: {"transaction": "t", "queue": "acme_in", "index": 0}}
        channel.send(request_id, wire.Kind.OK, answers.get(kind))

    def kinds(self) -> list[int]:
        return [kind for kind, _ in self.commands]

    def sends(self) -> list[str]:
        """The commands but IDENTITY, a send (PUT or SEND) as "send"."""
        sends = (wire.Kind.PUT, wire.Kind.SEND)
        return ["send" if kind in sends else "browse" if kind == wire.Kind.BROWSE else str(kind)
                for kind, _ in self.commands if kind != wire.Kind.IDENTITY]


@dataclass
class _Front:
    port: int
    owner: _Owner
    lane: SendLane | None
    metrics: Metrics
    counts: SharedCounts
    channel: Channel


Start = Callable[..., Awaitable[_Front]]


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    """Starts a front (with its lane, or with aiohttp's server alone) on a free port, over
    TLS when the server settings say so."""
    cleanups: list[Callable[[], Awaitable[None]]] = []

    async def make(*, lane: bool = True, **server: object) -> _Front:
        settings = _settings(tmp_path, **server)
        owner = _Owner()
        ours, theirs = socket.socketpair()
        loop = asyncio.get_running_loop()
        _, channel = await loop.create_unix_connection(Channel, sock=ours)
        _, other = await loop.create_unix_connection(
            lambda: Channel(on_request=owner.on_request), sock=theirs)
        metrics, counts = Metrics(), SharedCounts.create(2)
        app = make_front_app(settings, metrics, channel, counts)
        runner = app_runner(app, settings, handler_cancellation=True, sharing=1)
        await runner.setup()
        sock = bind("127.0.0.1", 0, reuse_port=True)
        port = sock.getsockname()[1]
        found = None
        context = tls_context(settings)
        if lane:
            found = await serve(app, runner, sock, context)
            assert found is not None
        else:
            await web.SockSite(runner, sock, ssl_context=context).start()

        async def cleanup() -> None:
            if found is not None:
                found.stop()
            await runner.cleanup()
            channel.close()
            other.close()

        cleanups.append(cleanup)
        return _Front(port, owner, found, metrics, counts, channel)

    yield make
    for cleanup in cleanups:
        await cleanup()


async def _answer(reader: asyncio.StreamReader) -> bytes:
    """One whole answer (its head and Content-Length bytes of body), Date left out."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    lines = []
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
        if not line.startswith(b"Date: "):
            lines.append(line)
    return b"\r\n".join(lines) + await reader.readexactly(length)


async def _exchange(port: int, data: bytes, answers: int = 1,
                    tls: ssl.SSLContext | None = None) -> list[bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
    try:
        writer.write(data)
        return [await _answer(reader) for _ in range(answers)]
    finally:
        writer.close()


def _send(queue: str = "acme_in", headers: str = ACME, body: bytes = b"hi") -> bytes:
    return (f"POST /v1/queues/{queue}/messages HTTP/1.1\r\nHost: h\r\n{headers}"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


@pytest.mark.parametrize("request_bytes, taken, status", [
    (_send(), True, 201),
    (_send(headers=ACME + "Mq-Label: l\r\nMq-Priority: 5\r\nContent-Type: text/plain\r\n"),
     True, 201),
    (_send("nosuch", headers="Authorization: Bearer admin-key\r\n"), True, 404),
    (_send(headers=ACME + "Mq-Priority: 9\r\n"), False, 400),
    (_send(headers=ACME + "Mq-Label: a\r\nMq-Label: b\r\n"), False, 400),
    (_send(headers=ACME + "Mq-Prority: 1\r\n"), False, 400),
    (_send("private$/other"), False, 403),
    (_send(headers="Authorization: Bearer wrong\r\n"), False, 401),
    (_send(headers=""), False, 401),
    (_send(headers="Authorization: Bearer slow-key\r\n"), False, 201),  # its rate bucket
    (_send(headers=ACME + "Idempotency-Key: k1\r\n"), True, 201),
    (_send(headers=ACME + "Mq-Transaction: single\r\n"), True, 201),
    (_send(headers=ACME + "Mq-Delivery: express\r\n"), True, 201),
    (_send(headers=ACME + "Mq-Response-Queue: acme_in\r\n"), True, 201),
    (_send(headers=ACME + "Mq-Transaction: 0123456789abcdef\r\n"), False, 202),
    (_send(body=b"x" * (65 << 10)), False, 201),
    (_send().replace(b"POST", b"GET"), False, 200),
])
async def test_the_lane_answers_as_aiohttps_handlers_do(
        start: Start, request_bytes: bytes, taken: bool, status: int) -> None:
    laned, plain = await start(), await start(lane=False)
    for front in (laned, plain):  # one send first: the front knows the GUID then
        await _exchange(front.port, _send("primer", headers="Authorization: Bearer admin-key"
                                          "\r\n"))
        front.owner.commands.clear()
    assert laned.lane is not None
    laned.lane.passed = 0
    [answer] = await _exchange(laned.port, request_bytes)
    [expected] = await _exchange(plain.port, request_bytes)
    assert answer == expected
    assert answer.startswith(b"HTTP/1.1 %d " % status), answer
    assert laned.lane is not None and laned.lane.passed == (0 if taken else 1)
    if taken:  # the same command as aiohttp's handler sends (PUT or SEND)
        assert laned.owner.kinds() == plain.owner.kinds() and len(laned.owner.kinds()) == 1
        [(_, command)] = laned.owner.commands
        [(_, expected_command)] = plain.owner.commands
        assert _unstamped(command) == _unstamped(expected_command)


def _unstamped(command: Any) -> Any:
    """The command but when the message was sent (each front stamps its own arrival)."""
    if isinstance(command, wire.PutCommand):  # (the time is in the encoded payload)
        return dataclasses.replace(command, payload=len(command.payload))
    return dataclasses.replace(command, properties=dataclasses.replace(command.properties,
                                                                        sent_at_ms=0))


async def test_a_fronts_first_send_goes_whole_while_it_asks_the_guid(start: Start) -> None:
    front = await start()
    [answer] = await _exchange(front.port, _send())
    assert answer.startswith(b"HTTP/1.1 201 ")
    assert front.owner.kinds() == [wire.Kind.SEND, wire.Kind.IDENTITY]


async def test_a_replayed_send_says_so_as_aiohttp_does(start: Start) -> None:
    laned, plain = await start(), await start(lane=False)
    key = ACME + "Idempotency-Key: k1\r\n"
    for front in (laned, plain):
        await _exchange(front.port, _send(headers=key))
    [answer] = await _exchange(laned.port, _send(headers=key))
    [expected] = await _exchange(plain.port, _send(headers=key))
    assert answer == expected and b"Idempotency-Replayed: true\r\n" in answer
    assert laned.lane is not None and laned.lane.passed == 0


async def test_once_the_guid_is_known_sends_are_stamped_and_encoded_here(start: Start) -> None:
    """As aiohttp's send handler does: the owner takes the record as it comes (PUT)."""
    front = await start()
    answers = [await _exchange(front.port, _send(body=b"%d" % i)) for i in range(3)]
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
    answers = await _exchange(front.port, _send(body=b"1") + _send(body=b"2")
                              + _send("nosuch", headers="Authorization: Bearer admin-key\r\n")
                              + browse + _send(body=b"3"), answers=5)
    assert [a.split(b" ")[1] for a in answers] == [b"201", b"201", b"404", b"200", b"201"]
    assert b'"seq":1' in answers[0] and b'"seq":2' in answers[1]
    assert front.owner.sends() == ["send"] * 3 + ["browse", "send"]
    assert front.lane is not None and front.lane.passed == 1  # at once


async def test_a_send_followed_by_bytes_aiohttp_refuses_is_not_stored(start: Start) -> None:
    laned, plain = await start(), await start(lane=False)
    data = _send(body=b"abc") + b"NOT HTTP\r\n\r\n"
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
    data = _send(body=b"x" * 12)
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
    data = _send(body=b"x" * 1000)
    reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
    for piece in (data[:10], data[10:80], data[80:-1], data[-1:]):
        writer.write(piece)
        await writer.drain()
        await asyncio.sleep(0.05)
    assert (await _answer(reader)).startswith(b"HTTP/1.1 201 ")
    writer.close()
    assert front.lane is not None and front.lane.passed == 0
    assert front.owner.sends() == ["send"]


async def test_a_body_that_stops_coming_goes_to_aiohttp_and_its_time_out(
        start: Start) -> None:
    """Not all there for a whole tick of the lane: aiohttp's server takes the connection,
    and its body time-out answers (408), as for a request it had from the start."""
    front = await start(body_timeout="200ms")
    reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
    writer.write(_send()[:-1])
    answer = await asyncio.wait_for(_answer(reader), 60)
    assert answer.startswith(b"HTTP/1.1 408 "), answer
    assert b"body-timeout" in answer
    assert front.lane is not None and front.lane.passed == 1
    assert front.owner.kinds() == []
    writer.close()


async def test_a_head_with_lone_line_feeds_goes_to_aiohttp_at_once(start: Start) -> None:
    front = await start()
    [answer] = await _exchange(front.port, _send().replace(b"\r\n", b"\n"))
    assert answer.startswith(b"HTTP/1.0 400 ") and b"Bad status line" in answer  # aiohttp's
    assert front.lane is not None and front.lane.passed == 1


async def test_a_send_at_the_owner_counts_in_flight_and_in_the_metrics(start: Start) -> None:
    front = await start()
    reader, writer = await _held_send(front)
    assert front.counts.total() == 1 and front.metrics.in_flight_now() == 1
    _owner_answers(front, front.owner.held[0])
    assert (await _answer(reader)).startswith(b"HTTP/1.1 201 ")
    assert front.counts.total() == 0 and front.metrics.in_flight_now() == 0
    requests, latency = front.metrics.http.snapshot()
    route = "/v1/queues/{path}/messages"
    assert requests == {(route, "POST", 201): 1} and sum(latency[(route, "POST")][:-1]) == 1
    writer.close()


async def _held_send(front: _Front) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection whose send the scripted owner holds unanswered."""
    held = len(front.owner.held)
    reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
    writer.write(_send(HOLD))
    while len(front.owner.held) == held:
        await asyncio.sleep(0.01)
    return reader, writer


def _owner_answers(front: _Front, request_id: int) -> None:
    """The scripted owner stores a held send now."""
    assert front.owner.channel is not None
    front.owner.channel.send(request_id, wire.Kind.OK, (
        {"id": f"{{{GUID}}}\\9", "queue": HOLD, "seq": 9}, False))


async def test_a_partner_over_its_share_is_refused_by_aiohttp(start: Start) -> None:
    """concurrent_requests_max 4: each partner's share is one request in flight."""
    front = await start(concurrent_requests_max=4)
    reader, writer = await _held_send(front)
    [answer] = await _exchange(front.port, _send())
    assert answer.startswith(b"HTTP/1.1 503 ") and b"already 1 requests" in answer
    assert front.lane is not None and front.lane.passed == 1
    _owner_answers(front, front.owner.held[0])
    assert (await _answer(reader)).startswith(b"HTTP/1.1 201 ")
    [answer] = await _exchange(front.port, _send())  # its place is given back
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
    writer.write(_send())
    assert (await _answer(reader)).startswith(b"HTTP/1.1 201 ")
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
    idle_writer.write(_send())
    assert (await _answer(idle_reader)).startswith(b"HTTP/1.1 201 ")
    reader, writer = await _held_send(front)
    front.lane.stop()
    assert await asyncio.wait_for(idle_reader.read(), 30) == b""
    _owner_answers(front, front.owner.held[0])
    assert (await _answer(reader)).startswith(b"HTTP/1.1 201 ")
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
        await _exchange(front.port, _send("primer", headers="Authorization: Bearer admin-key"
                                          "\r\n"))
        front.owner.commands.clear()
    taken = 0
    for _ in range(300):
        headers = "".join(f"{rng.choice(_NAMES)}: {rng.choice(_VALUES)}\r\n"
                          for _ in range(rng.randint(0, 4)))
        if "Authorization" not in headers and rng.random() < 0.8:
            headers += ACME
        queue = rng.choice(["acme_in", "acme_out", "private$/acme_x", "other", "nosuch"])
        data = _send(queue, headers=headers, body=rng.randbytes(rng.randint(0, 64)))
        assert laned.lane is not None
        passed = laned.lane.passed
        [answer] = await _exchange(laned.port, data)
        [expected] = await _exchange(plain.port, data)
        assert answer == expected, data
        taken += laned.lane.passed == passed
    assert [_unstamped(c) for _, c in laned.owner.commands if c is not None] == [
        _unstamped(c) for _, c in plain.owner.commands if c is not None]
    assert taken > 20  # the lane took its share, and answered those alike
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # refusals: quiet


async def _one_by_one(port: int, requests: list[bytes], tls: ssl.SSLContext) -> list[bytes]:
    """Each request's answer, the next request sent once it came, on one connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=tls)
    answers = []
    for request in requests:
        writer.write(request)
        answers.append(await _answer(reader))
    writer.close()
    return answers


@pytest.fixture
def tls_files(tmp_path: Path) -> dict[str, Path]:
    """A server certificate for 127.0.0.1 and a client certificate CN=certy it takes."""
    from gateway.auth.tls import create_self_signed

    cert, key = create_self_signed(tmp_path / "server", common_name="localhost",
                                   names=["127.0.0.1"], days=2)
    client, client_key = create_self_signed(tmp_path / "client", common_name="certy",
                                            names=[], days=2)
    return {"cert": cert, "key": key, "client": client, "client_key": client_key}


@pytest.mark.parametrize("with_certificate, headers, taken, status", [
    (True, "", True, 201),  # the partner of the client certificate
    (False, ACME, True, 201),
    (False, "", False, 401),
    (True, "Authorization: Bearer nope\r\n", False, 401),
])
async def test_over_tls_the_lane_answers_as_aiohttps_handlers_do(
        start: Start, tls_files: dict[str, Path], with_certificate: bool, headers: str,
        taken: bool, status: int) -> None:
    server = {"tls_cert": str(tls_files["cert"]), "tls_key": str(tls_files["key"]),
              "tls_client_ca": str(tls_files["client"])}
    laned, plain = await start(**server), await start(lane=False, **server)
    client = ssl.create_default_context(cafile=str(tls_files["cert"]))
    if with_certificate:
        client.load_cert_chain(tls_files["client"], tls_files["client_key"])
    for front in (laned, plain):  # one send first: the front knows the GUID then
        await _exchange(front.port, _send("primer", headers="Authorization: Bearer admin-key"
                                          "\r\n"), tls=client)
        front.owner.commands.clear()
    assert laned.lane is not None
    laned.lane.passed = 0
    requests = [_send(headers=headers), _send(body=b"next", headers=headers)]
    answers = await _one_by_one(laned.port, requests, client)
    assert answers == await _one_by_one(plain.port, requests, client)
    assert all(a.startswith(b"HTTP/1.1 %d " % status) for a in answers), answers
    assert laned.lane.passed == (0 if taken else 1)
    assert [_unstamped(c) for _, c in laned.owner.commands] == [
        _unstamped(c) for _, c in plain.owner.commands]


@pytest.mark.parametrize("cut", [10, -1])  # in the head, in the body
async def test_a_request_cut_by_the_end_of_input_is_closed_as_aiohttp_closes_it(
        start: Start, cut: int) -> None:
    laned, plain = await start(), await start(lane=False)
    seen = []
    for front in (laned, plain):
        reader, writer = await asyncio.open_connection("127.0.0.1", front.port)
        writer.write(_send()[:cut])
        writer.write_eof()
        seen.append(await asyncio.wait_for(reader.read(), 30))
        writer.close()
    assert seen == [b"", b""]
    assert laned.owner.commands == [] == plain.owner.commands


def _srmp(path: str = "/msmq/private$/orders", vector: str = "V02", extra: str = "",
          body: bytes | None = None) -> bytes:
    """An SRMP request as Windows sends it (one of the captured vectors' bodies)."""
    request = wire_vector(vector)
    data = request.body if body is None else body
    head = "".join(f"{k}: {v}\r\n" for k, v in request.headers.items()
                   if k != "Content-Length")
    return (f"POST {path} HTTP/1.1\r\n{head}{extra}Content-Length: {len(data)}\r\n"
            "\r\n").encode() + data


@pytest.mark.parametrize("request_bytes, taken, status", [
    (_srmp(), True, 200),
    (_srmp("/MSMQ/private$/orders"), True, 200),  # the directory in any case, as aiohttp's
    (_srmp("/msmq"), True, 200),
    (_srmp(vector="V05"), True, 200),  # a receipt
    (_srmp(extra="Authorization: Bearer acme-key\r\n"), True, 200),  # not read on SRMP
    (_srmp(body=b"not a MIME body"), True, 200),  # the owner answers the parse's refusal
    (_srmp(body=wire_vector("V02").body.replace(b"private$/", b"private$/denied")),
     True, 403),
    (_srmp(extra="Content-Type: text/xml\r\n"), False, 400),  # twice: aiohttp's parser
    (_srmp("/msmq/private$/orders?x=1"), False, 200),
    (_srmp("/msmqx/private$/orders"), False, 401),  # no route: after authentication
    (_srmp(body=b"x" * (65 << 10)), False, 200),
])
async def test_srmp_requests_are_answered_as_aiohttps_handlers_do(
        start: Start, request_bytes: bytes, taken: bool, status: int) -> None:
    laned, plain = await start(), await start(lane=False)
    [answer] = await _exchange(laned.port, request_bytes)
    [expected] = await _exchange(plain.port, request_bytes)
    assert answer == expected
    assert answer.split(b" ")[1] == b"%d" % status, answer
    assert laned.lane is not None and laned.lane.passed == (0 if taken else 1)
    assert laned.owner.commands == plain.owner.commands
    if taken:
        [(kind, command)] = laned.owner.commands
        assert kind == wire.Kind.SRMP and command.remote == "127.0.0.1"
        assert command.principal.name == NOBODY.name
        requests, _ = laned.metrics.http.snapshot()
        assert requests == {("/msmq/{path}", "POST", status): 1}


async def test_a_body_over_request_body_max_is_aiohttps_413(start: Start) -> None:
    laned, plain = await start(request_body_max="1KiB"), await start(
        lane=False, request_body_max="1KiB")
    data = _send(body=b"x" * 1025)
    [answer] = await _exchange(laned.port, data)
    assert answer == (await _exchange(plain.port, data))[0]
    assert answer.startswith(b"HTTP/1.1 413 ")
    assert laned.lane is not None and laned.lane.passed == 1
