"""The bench's HTTP client is wrk with ``bench/wrk_unique.lua``: every request it sends is
unique (SRMP message ids included), every answer is counted, and a scenario whose server
stored fewer messages than it acknowledged fails. Driven against small aiohttp servers on
127.0.0.1 that record what they receive."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import threading
from collections import Counter
from collections.abc import Iterator

from aiohttp import web

from bench import wrk
from bench.measure import measure
from bench.scenarios import SCENARIOS, Scenario
from bench.servers import free_port
from gateway.srmp.codec import parse_request


class Recorder:
    """Keeps every request body; ``POST`` answers 201 (or 503 to every ``fail_every``-th),
    stores one in ``keep_every`` of them, and ``GET /v1/queues/NAME`` tells how many."""

    def __init__(self, keep_every: int = 1, fail_every: int = 0) -> None:
        self.bodies: list[bytes] = []
        self.stored = 0
        self.keep_every = keep_every
        self.fail_every = fail_every

    def app(self) -> web.Application:
        async def post(request: web.Request) -> web.Response:
            self.bodies.append(await request.read())
            if self.fail_every and len(self.bodies) % self.fail_every == 0:
                return web.Response(status=503)
            if len(self.bodies) % self.keep_every == 0:
                self.stored += 1
            return web.json_response({"id": len(self.bodies)}, status=201)

        async def count(request: web.Request) -> web.Response:
            return web.json_response({"messages": self.stored})

        app = web.Application()
        app.router.add_get("/v1/queues/{name}", count)
        app.router.add_post("/{tail:.*}", post)
        return app


@contextlib.contextmanager
def serving(recorder: Recorder) -> Iterator[str]:
    loop = asyncio.new_event_loop()
    runner = web.AppRunner(recorder.app(), access_log=None)
    loop.run_until_complete(runner.setup())
    port = free_port()
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.run_until_complete(runner.cleanup())
        loop.close()


def _scenario(name: str) -> Scenario:
    return next(s for s in SCENARIOS if s.name == name)


def _send(url: str, scenario: Scenario, concurrency: int, requests: int) -> dict[str, object]:
    return wrk.run(url + scenario.path, method=scenario.method, headers=scenario.headers,
                   body=scenario.template(url), concurrency=concurrency, requests=requests,
                   threads=concurrency if scenario.one_thread_per_connection else None)


def test_every_srmp_request_carries_its_own_message_id_across_runs() -> None:
    recorder = Recorder()
    scenario = _scenario("srmp-recoverable")
    with serving(recorder) as url:
        results = [_send(url, scenario, 8, 300) for _ in range(2)]
    assert [r["ok"] for r in results] == [300, 300]
    content_type = scenario.headers["Content-Type"]
    ids = [parse_request(content_type, body).envelope.path.id for body in recorder.bodies]
    assert len(ids) == 600 and len(set(ids)) == 600


def test_srmp_stream_messages_arrive_in_order_one_stream_per_connection() -> None:
    recorder = Recorder()
    scenario = _scenario("srmp-stream")
    with serving(recorder) as url:
        result = _send(url, scenario, 4, 200)
    assert result["ok"] == 200
    content_type = scenario.headers["Content-Type"]
    streams: dict[str, list[int]] = {}
    for body in recorder.bodies:
        stream = parse_request(content_type, body).envelope.stream
        assert stream is not None
        streams.setdefault(stream.stream_id, []).append(stream.current)
    assert len(streams) == 4
    assert all(currents == list(range(1, len(currents) + 1)) for currents in streams.values())


def test_rest_bodies_differ_and_keep_their_size() -> None:
    recorder = Recorder()
    with serving(recorder) as url:
        _send(url, _scenario("rest-recoverable"), 16, 500)
    assert len(recorder.bodies) == 500 == len(set(recorder.bodies))
    assert {len(body) for body in recorder.bodies} == {1024}


def test_batch_bodies_are_json_with_distinct_messages() -> None:
    recorder = Recorder()
    with serving(recorder) as url:
        _send(url, _scenario("rest-batch10"), 4, 50)
    messages = [base64.b64decode(m["body_base64"], validate=True)
                for body in recorder.bodies for m in json.loads(body)["messages"]]
    assert len(messages) == 500 == len(set(messages))


def test_answers_are_counted_by_status() -> None:
    recorder = Recorder(fail_every=4)
    with serving(recorder) as url:
        result = _send(url, _scenario("rest-recoverable"), 8, 400)
    assert result["statuses"] == {"201": 300, "503": 100} and result["ok"] == 300
    assert Counter(len(b) for b in recorder.bodies) == {1024: 400}


def _measured(keep_every: int) -> dict[str, object]:
    scenario = _scenario("rest-recoverable")
    with serving(Recorder()) as ceiling_url, serving(Recorder(keep_every)) as url:
        ceilings = {"nostore": (_scenario("ceiling-nostore"), ceiling_url),
                    "fsync": (_scenario("ceiling-fsync"), ceiling_url)}
        return measure(scenario, url, 8, 200, ceilings)


def test_a_scenario_whose_server_stored_all_it_acknowledged_passes() -> None:
    record = _measured(keep_every=1)
    assert record["acknowledged"] == record["stored"] == 200 + record["warmup"]  # type: ignore
    assert record["check"] == "ok"


def test_a_scenario_whose_server_lost_acknowledged_messages_fails() -> None:
    record = _measured(keep_every=2)
    acknowledged = 200 + record["warmup"]  # type: ignore[operator]
    assert record["acknowledged"] == acknowledged
    assert record["stored"] == acknowledged // 2
    assert str(record["check"]).startswith("FAILED: stored")
