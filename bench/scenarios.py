"""The benchmark scenarios. Later issues add theirs here (one ``Scenario`` each).

Every scenario names the ceiling it is compared with: ``nostore`` (bare aiohttp + uvloop
answering 201) or ``fsync`` (the same, appending each body and group-committing with fdatasync
before answering). Ceilings are measured first, in the same run.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import ContextManager

from bench import servers

# Messages put in the queue before rest-receive runs: set by the runner to what the run's
# receives will take (plus a margin), so no receive finds the queue empty.
RECEIVE_PREFILL = {"count": 0}


@dataclass(frozen=True)
class Scenario:
    name: str
    server: Callable[[], ContextManager[str]]
    path: str
    compare_to: str
    method: str = "POST"
    body_size: int = 1024  # a unique body of this size per request (0: none)
    headers: dict[str, str] = field(default_factory=dict)
    ceiling_of: str = ""
    messages_per_request: int = 1
    # A body template made once the server runs (from its URL), with the load generator's
    # tokens (bench/wrk_unique.lua), instead of the unique raw body.
    body_factory: Callable[[str], bytes] | None = None
    # The queue whose message count moves by what the run acknowledged (+1 a message sent,
    # -1 received); "" when the server stores nothing to count.
    stored_queue: str = ""
    stored_sign: int = 1
    # wrk with one thread per connection: a thread's requests are one in-order stream.
    one_thread_per_connection: bool = False

    @property
    def is_ceiling(self) -> bool:
        return bool(self.ceiling_of)

    def template(self, url: str) -> bytes | None:
        """The request body template (``None``: no body)."""
        if self.body_factory is not None:
            return self.body_factory(url)
        if not self.body_size:
            return None
        return _UNIQUE_PREFIX + os.urandom(self.body_size - len(_UNIQUE_PREFIX))


# Replaced per request by the run id and the request's own number (bench/wrk_unique.lua).
_UNIQUE_PREFIX = b"#RUN#####.#SEQ#####."


def _ceiling(mode: str) -> Callable[[], ContextManager[str]]:
    return lambda: servers.ceiling(mode)


def _gateway() -> ContextManager[str]:
    return servers.gateway()


def _call(url: str, method: str, path: str, doc: object) -> None:
    request = urllib.request.Request(url + path, data=json.dumps(doc).encode(), method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()


def _with_queue(prefill: bool = False, workers: int = 1) -> Callable[[], ContextManager[str]]:
    """A gateway of ``workers`` processes (server.workers) with queues ``bench`` (prefilled
    with 1 KiB messages for receive runs) and ``private$/bench_tx`` (transactional)."""

    @contextlib.contextmanager
    def server() -> Iterator[str]:
        with servers.gateway(workers=workers) as url:
            _call(url, "PUT", "/v1/queues/bench", {})
            _call(url, "PUT", "/v1/queues/private$/bench_tx", {"transactional": True})
            body = base64.b64encode(os.urandom(1024)).decode()
            total = RECEIVE_PREFILL["count"] if prefill else 0
            for start in range(0, total, 500):
                count = min(500, total - start)
                _call(url, "POST", "/v1/batch", {"messages": [
                    {"queue": "bench", "body_base64": body} for _ in range(count)]})
            yield url

    return server


def _batch_body(count: int) -> Callable[[str], bytes]:
    """``/v1/batch`` with ``count`` messages of 1,023 bytes, no two alike in a run: each
    one's base64 starts with the run id, the request's number and the message's index
    (digits are base64 too: 20 characters decode to 15 bytes)."""

    def make(url: str) -> bytes:
        tail = base64.b64encode(os.urandom(1008)).decode()
        return json.dumps({"messages": [
            {"queue": "bench", "body_base64": f"#RUN######SEQ#####{i:02d}{tail}"}
            for i in range(count)]}).encode()

    return make


_SRMP_QM = "6f1c2a44-1b8e-4c1e-9d7a-0a5b2c3d4e5f"


def _srmp(stream: bool) -> Callable[[str], bytes]:
    """A 1 KiB SRMP message as Windows frames it: each request a new id (the duplicate
    window is exercised; the run's number is in the id's GUID, so a later run on the same gateway
    — the next concurrency level — sends no duplicates, which are answered without a store
    commit and so faster); with ``stream`` one in-order stream per load-generator thread
    (wrk) or worker (bench/loadgen.py), whose stream receipts go back to this gateway's order
    queue."""

    def make(url: str) -> bytes:
        from gateway.srmp.build import build_request
        from gateway.srmp.model import INFINITE_TEXT, Envelope, MsmqHeader, Path, Services, Stream

        queue = "private$/bench_tx" if stream else "bench"
        envelope = Envelope(
            # The counter is the sequence (an id's counter is 32 bits); the run's number
            # is in the sender's GUID, whose last group takes its 9 digits as hex.
            path=Path(action="MSMQ:bench", to=f"http://127.0.0.1/msmq/{queue}",
                      id=f"uuid:#SEQ#####@{_SRMP_QM[:-9]}#RUN#####"),
            expires_at=INFINITE_TEXT, sent_at="20260101T000000",
            services=Services(durable=True),
            stream=Stream(f"uid:{_SRMP_QM}\\#RUN#####0#WRK#####", 1, None,
                          f"{url}/msmq/private$/order_queue$") if stream else None,
            msmq=MsmqHeader(priority=0 if stream else 3, body_type=0, hash_algorithm=32772,
                            source_qm=_SRMP_QM, ttrq="20380101T000000"))
        request = build_request(envelope, os.urandom(1024), host="127.0.0.1",
                                path=f"/msmq/{queue}", boundary_number=1)
        body = request.body
        return body.replace(b"<current>1</current>", b"<current>#CUR#####</current>")

    return make


def _srmp_content_type() -> str:
    return 'multipart/related; boundary="MSMQ - SOAP boundary, 1"; type=text/xml'


_RAW = {"Content-Type": "application/octet-stream"}

SCENARIOS: list[Scenario] = [
    Scenario("ceiling-nostore", _ceiling("nostore"), "/v1/queues/bench/messages",
             compare_to="nostore", ceiling_of="nostore", headers=_RAW),
    Scenario("ceiling-fsync", _ceiling("fsync"), "/v1/queues/bench/messages",
             compare_to="fsync", ceiling_of="fsync", headers=_RAW, stored_queue="bench"),
    # The gateway's fixed cost per request (middlewares, metrics) with no store work at all.
    Scenario("gateway-healthz", _gateway, "/healthz", compare_to="nostore", method="GET",
             body_size=0),
    Scenario("rest-recoverable", _with_queue(), "/v1/queues/bench/messages",
             compare_to="nostore", headers=_RAW, stored_queue="bench"),
    Scenario("rest-express", _with_queue(), "/v1/queues/bench/messages", compare_to="nostore",
             headers={**_RAW, "Mq-Delivery": "express"}, stored_queue="bench"),
    # The same with two front processes around the store owner (server.workers = 2).
    Scenario("rest-recoverable-w2", _with_queue(workers=2), "/v1/queues/bench/messages",
             compare_to="nostore", headers=_RAW, stored_queue="bench"),
    Scenario("rest-express-w2", _with_queue(workers=2), "/v1/queues/bench/messages",
             compare_to="nostore", headers={**_RAW, "Mq-Delivery": "express"},
             stored_queue="bench"),
    Scenario("rest-batch10", _with_queue(), "/v1/batch", compare_to="nostore",
             headers={"Content-Type": "application/json"}, messages_per_request=10,
             body_factory=_batch_body(10), stored_queue="bench"),
    Scenario("srmp-recoverable", _with_queue(), "/msmq/bench", compare_to="nostore",
             headers={"Content-Type": _srmp_content_type(), "SOAPAction": '"MSMQMessage"'},
             body_factory=_srmp(stream=False), stored_queue="bench"),
    Scenario("srmp-recoverable-w2", _with_queue(workers=2), "/msmq/bench", compare_to="nostore",
             headers={"Content-Type": _srmp_content_type(), "SOAPAction": '"MSMQMessage"'},
             body_factory=_srmp(stream=False), stored_queue="bench"),
    Scenario("srmp-stream", _with_queue(), "/msmq/private$/bench_tx", compare_to="nostore",
             headers={"Content-Type": _srmp_content_type(), "SOAPAction": '"MSMQMessage"'},
             body_factory=_srmp(stream=True), stored_queue="private$/bench_tx",
             one_thread_per_connection=True),
    # Each 200 takes one message (max=1, the queue prefilled with more than the run takes).
    Scenario("rest-receive", _with_queue(prefill=True),
             "/v1/queues/bench/receive?max=1", compare_to="nostore", body_size=0,
             stored_queue="bench", stored_sign=-1),
    Scenario("rest-receive-w2", _with_queue(prefill=True, workers=2),
             "/v1/queues/bench/receive?max=1", compare_to="nostore", body_size=0,
             stored_queue="bench", stored_sign=-1),
]

__all__ = ["SCENARIOS", "Scenario"]
