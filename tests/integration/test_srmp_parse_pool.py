"""SRMP requests parsed in worker processes (gateway.inbound.parse_pool): the same result as
parsing on the loop, the same errors, and a worker that dies is replaced."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.inbound import parse_pool as srmp_parse_pool
from gateway.web.appkeys import PARSE_POOL_KEY
from gateway.settings import Settings
from gateway.srmp.codec import parse_request
from gateway.web.srmp_routes import PARSE_INLINE_BYTES_MAX
from gateway.srmp.errors import EnvelopeError, SrmpError
from gateway.srmp.parsed import ParsedRequest
from gateway.inbound.parse_pool import ParsePool, WorkerLost, encode_request, request_reader
from tests.helpers import ready_client
from gateway.srmp.model import Stream
from tests.srmp_client import SENDER_QM, user_message
from tests.srmp_vectors import wire

# The spec's requests (V04, V06, V08 are HTTP answers); V03's defective body is refused alike.
REQUESTS = ["V01", "V02", "V03", "V05", "V07"]


@pytest.fixture
async def pool() -> AsyncIterator[ParsePool]:
    made = ParsePool(1)
    yield made
    await made.close()


def _view(parsed: ParsedRequest) -> object:
    """Everything the front door reads of a parsed request. A message's send time is the
    parse's clock when the envelope has no <sentAt>: compared apart."""
    try:
        props: object = dataclasses.replace(parsed.properties(), sent_at_ms=0)
    except EnvelopeError as exc:
        props = exc.reason
    return (parsed.kind, parsed.to, parsed.message_id, parsed.stream, parsed.signed,
            parsed.body, props, parsed.message)


def _inline(content_type: str, raw: bytes) -> object:
    try:
        return _view(ParsedRequest.of(parse_request(content_type, raw), raw,
                                      now_ms=int(time.time() * 1000)))
    except SrmpError as exc:
        return (type(exc), exc.reason)


async def _pooled(pool: ParsePool, content_type: str, raw: bytes) -> object:
    try:
        parsed = await pool.parse(content_type, raw)
    except SrmpError as exc:
        return (type(exc), exc.reason)
    if parsed.message.envelope.sent_at is None:
        assert abs(parsed.properties().sent_at_ms - time.time() * 1000) < 60_000
    return _view(parsed)


@pytest.mark.parametrize("name", REQUESTS)
async def test_vectors_parse_as_on_the_loop(pool: ParsePool, name: str) -> None:
    request = wire(name)
    content_type = request.headers["Content-Type"]
    assert await _pooled(pool, content_type, request.body) == _inline(content_type,
                                                                      request.body)


async def test_errors_keep_their_class_and_reason(pool: ParsePool) -> None:
    cases = [("text/plain", b"x"), ("multipart/related", b"--"),
             ("text/xml", b"<x/>"), ("text/xml", b"<!DOCTYPE x [<!ENTITY a 'b'>]><x>&a;</x>"),
             ('multipart/related; boundary="b"', b"--b\r\n\r\nno envelope\r\n--b--")]
    for content_type, raw in cases:
        expected = _inline(content_type, raw)
        assert isinstance(expected, tuple)  # each is refused
        assert await _pooled(pool, content_type, raw) == expected


async def test_what_the_loop_reads_matches_a_parse_on_the_loop(pool: ParsePool) -> None:
    """The worker makes the properties and sends the rest of the envelope for later: a
    label MSMQ refuses is an error of the properties only, raised where they are asked for."""
    for request in (user_message("http://gw/msmq/q", b"b", ordinal=7),
                    user_message("http://gw/msmq/q", b"b", ordinal=8, label="x" * 300),
                    user_message("http://gw/msmq/q", b"b", ordinal=9,
                                 stream=Stream("uid:%s\\1" % SENDER_QM, 3, 2, None))):
        content_type = dict(request.headers)["Content-Type"]
        assert await _pooled(pool, content_type, request.body) == _inline(content_type,
                                                                          request.body)
        if b"x" * 300 in request.body:
            with pytest.raises(EnvelopeError, match="MQ_ERROR_LABEL_TOO_LONG"):
                (await pool.parse(content_type, request.body)).properties()
    parsed = await pool.parse(content_type, request.body)
    assert parsed.stream is not None and parsed.stream.current == 3
    assert parsed.properties().transactional


async def test_many_in_flight_come_back_to_their_callers(pool: ParsePool) -> None:
    requests = [user_message("http://gw/msmq/q", b"body %d" % n, ordinal=n)
                for n in range(1, 201)]
    messages = await asyncio.gather(*(pool.parse(dict(r.headers)["Content-Type"], r.body)
                                      for r in requests))
    assert [m.body for m in messages] == [b"body %d" % n for n in range(1, 201)]
    assert pool.started == 1


async def test_a_dead_worker_fails_its_requests_and_is_replaced(pool: ParsePool) -> None:
    request = user_message("http://gw/msmq/q", b"after", ordinal=1)
    content_type = dict(request.headers)["Content-Type"]
    assert (await pool.parse(content_type, request.body)).body == b"after"
    [pid] = pool.pids()
    os.kill(pid, signal.SIGSTOP)  # stopped: the next request stays in flight
    in_flight = asyncio.ensure_future(pool.parse(content_type, request.body))
    await asyncio.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    with pytest.raises(WorkerLost):
        await asyncio.wait_for(in_flight, 10)
    assert (await pool.parse(content_type, request.body)).body == b"after"
    assert pool.started == 2
    assert pool.pids() != [pid]


# A new worker's first answer waits for its imports, however slow a loaded machine is: pools
# here give that a generous time, and only a worker about to hang gets a short one (_hang).
GENEROUS_S = 60.0


async def _hang(pool: ParsePool, timeout_s: float) -> int:
    """Stop the pool's one (warm, idle) worker once it has ``timeout_s`` to answer; returns
    its pid when the kernel shows it stopped."""
    [worker] = pool._workers
    worker.timeout_s = timeout_s
    if worker._watchdog is not None:  # a timer of the generous time: the next send sets one
        worker._watchdog.cancel()
        worker._watchdog = None
    [pid] = pool.pids()
    os.kill(pid, signal.SIGSTOP)
    for _ in range(3000):
        # /proc/PID/stat: "pid (comm) state ...", state T once stopped.
        if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "T":
            return pid
        await asyncio.sleep(0.01)
    raise AssertionError(f"worker {pid} did not stop")


async def test_a_hung_worker_is_killed_and_replaced() -> None:
    pool = ParsePool(1, timeout_s=GENEROUS_S)
    try:
        request = user_message("http://gw/msmq/q", b"after", ordinal=1)
        content_type = dict(request.headers)["Content-Type"]
        await pool.parse(content_type, request.body)
        pid = await _hang(pool, 0.5)  # hung: it never answers
        with pytest.raises(WorkerLost, match="within 0.5 s"):
            await pool.parse(content_type, request.body)
        assert (await pool.parse(content_type, request.body)).body == b"after"
        assert pool.started == 2
        with pytest.raises(ProcessLookupError):  # the hung one was killed (and reaped)
            for _ in range(3000):
                os.kill(pid, 0)
                await asyncio.sleep(0.01)
        # Every request in flight on a hung worker fails, not only the oldest.
        await _hang(pool, 0.5)
        results = await asyncio.gather(*(pool.parse(content_type, request.body)
                                         for _ in range(5)), return_exceptions=True)
        assert all(isinstance(r, WorkerLost) and "within 0.5 s" in str(r) for r in results)
        assert (await pool.parse(content_type, request.body)).body == b"after"
        assert pool.started == 3
    finally:
        await pool.close()


async def test_ctrl_c_and_sigterm_leave_a_worker_to_the_gateway(pool: ParsePool) -> None:
    """Both reach a terminal's or a systemd unit's whole process group: the gateway's
    shutdown ends its workers (by closing their stdin), they do not end themselves."""
    request = user_message("http://gw/msmq/q", b"still", ordinal=1)
    content_type = dict(request.headers)["Content-Type"]
    await pool.parse(content_type, request.body)
    [pid] = pool.pids()
    os.kill(pid, signal.SIGINT)
    os.kill(pid, signal.SIGTERM)
    # Both are handled before the worker reads the next request: its answer comes after.
    assert (await pool.parse(content_type, request.body)).body == b"still"
    assert pool.pids() == [pid]


async def test_close_ends_the_workers(pool: ParsePool) -> None:
    request = user_message("http://gw/msmq/q", b"x", ordinal=1)
    await pool.parse(dict(request.headers)["Content-Type"], request.body)
    [pid] = pool.pids()
    await pool.close()
    for _ in range(100):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"worker {pid} still there after close")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=8), st.data())
def test_frames_survive_any_chunking(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(encode_request(n, "text/xml", p) for n, p in enumerate(payloads))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    reader = request_reader()
    frames = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)]):
        frames.extend(reader.feed(stream[start:end]))
    assert [(v[0], body[v[2]:]) for v, body in frames] == list(enumerate(payloads))


async def test_gateway_serves_through_a_replaced_worker(
        aiohttp_client: Any, settings_factory: Callable[..., Settings],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(srmp_parse_pool, "INLINE_REQUESTS_MAX", 0)  # one in flight is busy
    client = await ready_client(aiohttp_client, settings_factory(server__names=["gw"]))
    await client.put("/v1/queues/orders", json={"anonymous": True})
    pool = client.app[PARSE_POOL_KEY]
    assert pool is not None

    async def send(ordinal: int) -> int:
        request = user_message("http://gw/msmq/orders", b"m%d" % ordinal, ordinal=ordinal)
        headers = {k: v for k, v in request.headers if k not in ("Host", "Content-Length")}
        response = await client.post(request.path, data=request.body, headers=headers)
        return response.status

    assert await send(1) == 200
    [pid] = pool.pids()
    os.kill(pid, signal.SIGKILL)
    for _ in range(3000):  # until the pool has seen it exit (an upper bound only)
        if not pool.pids():
            break
        await asyncio.sleep(0.01)
    assert await send(2) == 200
    assert pool.started == 2
    metrics = await (await client.get("/metrics")).text()
    assert "entrepot_srmp_parse_workers_started_total 2.0" in metrics
    response = await client.post("/v1/queues/orders/receive?max=10")
    assert [m["body_base64"] for m in (await response.json())["messages"]] == ["bTE=", "bTI="]


async def test_no_workers_parses_on_the_loop(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    client = await ready_client(aiohttp_client, settings_factory(
        server__names=["gw"], srmp__parse_workers=0))
    assert client.app[PARSE_POOL_KEY] is None
    await client.put("/v1/queues/orders", json={"anonymous": True})
    request = user_message("http://gw/msmq/orders", b"inline", ordinal=1)
    headers = {k: v for k, v in request.headers if k not in ("Host", "Content-Length")}
    assert (await client.post(request.path, data=request.body, headers=headers)).status == 200


async def test_few_in_flight_are_parsed_on_the_loop_large_ones_never(
        aiohttp_client: Any, settings_factory: Callable[..., Settings]) -> None:
    """A worker's round trip only adds latency while the loop has time to spare; a large
    request is parsed in a worker however idle the loop is."""
    client = await ready_client(aiohttp_client, settings_factory(server__names=["gw"]))
    await client.put("/v1/queues/orders", json={"anonymous": True})
    pool = client.app[PARSE_POOL_KEY]

    async def send(ordinal: int, body: bytes) -> int:
        request = user_message("http://gw/msmq/orders", body, ordinal=ordinal)
        headers = {k: v for k, v in request.headers if k not in ("Host", "Content-Length")}
        return (await client.post(request.path, data=request.body, headers=headers)).status

    assert pool is not None
    assert await send(1, b"small") == 200
    assert pool.started == 0
    assert await send(2, b"L" * (PARSE_INLINE_BYTES_MAX + 1)) == 200
    assert pool.started == 1
    statuses = await asyncio.gather(*(send(n, b"m") for n in range(3, 103)))
    assert set(statuses) == {200}
    assert pool.parsed > 1  # some of the 100 found the loop busy
    assert pool.requests == 0


async def test_a_slow_worker_within_its_time_is_not_killed() -> None:
    """The one watchdog timer of a worker follows its oldest request: when it goes off (it
    was set by an earlier request) while only requests within their time are in flight, the
    worker is not killed, and they are answered however late. The test sets it off itself:
    no wall-clock race with the machine's speed."""
    pool = ParsePool(1, timeout_s=GENEROUS_S)
    try:
        request = user_message("http://gw/msmq/q", b"x", ordinal=1)
        content_type = dict(request.headers)["Content-Type"]
        assert (await pool.parse(content_type, request.body)).body == b"x"
        [worker] = pool._workers
        pid = await _hang(pool, GENEROUS_S)
        stuck = [asyncio.ensure_future(pool.parse(content_type, request.body))
                 for _ in range(3)]
        while len(worker.pending) < 3:
            await asyncio.sleep(0)
        worker._watch()  # the timer goes off now: every request in flight is within its time
        assert worker.alive and not any(s.done() for s in stuck)
        os.kill(pid, signal.SIGCONT)  # late, but within the time: answered
        assert [(await s).body for s in stuck] == [b"x"] * 3
        assert pool.started == 1 and pool.pids() == [pid]
    finally:
        await pool.close()


async def test_requests_of_one_loop_iteration_share_one_pipe_write(pool: ParsePool) -> None:
    """Why: a pipe write per request would cost the loop a system call each."""
    request = user_message("http://gw/msmq/q", b"x", ordinal=1)
    content_type = dict(request.headers)["Content-Type"]
    await pool.parse(content_type, request.body)
    [worker] = pool._workers
    pipe = worker.pipe()
    writes: list[int] = []
    real_write = pipe.write

    def counted(data: Any) -> None:
        writes.append(len(data))
        real_write(data)

    pipe.write = counted  # type: ignore[method-assign]
    messages = await asyncio.gather(*(pool.parse(content_type, request.body)
                                      for _ in range(50)))
    assert [m.body for m in messages] == [b"x"] * 50
    assert len(writes) == 1 and writes[0] == 50 * len(encode_request(1, content_type,
                                                                      request.body))


async def test_an_unreadable_answer_fails_its_request_at_once() -> None:
    """Not after the 10 s watchdog: the request is answered 503 and the sender retries."""
    worker = srmp_parse_pool._Worker()
    future: asyncio.Future[tuple[int, Any]] = asyncio.get_running_loop().create_future()
    worker.pending[7] = (future, 0.0)
    payload = b"not a pickle"
    worker.pipe_data_received(1, srmp_parse_pool._ANSWER.pack(7, len(payload), 1) + payload)
    with pytest.raises(WorkerLost, match="not readable"):
        future.result()
    assert not worker.pending


async def test_the_pipes_hold_a_loop_iterations_requests(pool: ParsePool) -> None:
    """~150 KiB of requests at C = 64: Linux's default 64 KiB pipe split the writes."""
    import fcntl

    request = user_message("http://gw/msmq/q", b"x", ordinal=1)
    await pool.parse(dict(request.headers)["Content-Type"], request.body)
    [worker] = pool._workers
    assert worker.transport is not None
    for fd in (0, 1):
        pipe = worker.transport.get_pipe_transport(fd)
        assert pipe is not None
        assert fcntl.fcntl(pipe.get_extra_info("pipe").fileno(), fcntl.F_GETPIPE_SZ) >= 1 << 20
