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
    body_size: int = 1024
    headers: dict[str, str] = field(default_factory=dict)
    ceiling_of: str = ""
    messages_per_request: int = 1
    body: bytes | None = None  # a fixed body (else body_size random bytes)
    # A body made once the server runs (from its URL), with loadgen template tokens.
    body_factory: Callable[[str], bytes] | None = None

    @property
    def is_ceiling(self) -> bool:
        return bool(self.ceiling_of)


def _ceiling(mode: str) -> Callable[[], ContextManager[str]]:
    return lambda: servers.ceiling(mode)


def _gateway() -> ContextManager[str]:
    return servers.gateway()


def _call(url: str, method: str, path: str, doc: object) -> None:
    request = urllib.request.Request(url + path, data=json.dumps(doc).encode(), method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        response.read()


def _with_queue(prefill: bool = False) -> Callable[[], ContextManager[str]]:
    """A gateway with queues ``bench`` (prefilled with 1 KiB messages for receive runs) and
    ``private$/bench_tx`` (transactional)."""

    @contextlib.contextmanager
    def server() -> Iterator[str]:
        with servers.gateway() as url:
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


def _batch_body(count: int) -> bytes:
    body = base64.b64encode(os.urandom(1024)).decode()
    return json.dumps({"messages": [{"queue": "bench", "body_base64": body}
                                    for _ in range(count)]}).encode()


_SRMP_QM = "6f1c2a44-1b8e-4c1e-9d7a-0a5b2c3d4e5f"


def _srmp(stream: bool) -> Callable[[str], bytes]:
    """A 1 KiB SRMP message as Windows frames it: each request a new id (the duplicate
    window is exercised; the run's number is in the id, so a later run on the same gateway
    — the next concurrency level — sends no duplicates, which are answered without a store
    commit and so faster); with ``stream`` one in-order stream per load-generator worker, whose
    stream receipts go back to this gateway's order queue."""

    def make(url: str) -> bytes:
        from gateway.srmp.build import build_request
        from gateway.srmp.model import (
            INFINITE_TEXT, Envelope, MsmqHeader, Path, Services, Stream)

        queue = "private$/bench_tx" if stream else "bench"
        envelope = Envelope(
            path=Path(action="MSMQ:bench", to=f"http://127.0.0.1/msmq/{queue}",
                      id=f"uuid:#RUN#####0#SEQ#####@{_SRMP_QM}"),
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


SCENARIOS: list[Scenario] = [
    Scenario("ceiling-nostore", _ceiling("nostore"), "/v1/queues/bench/messages",
             compare_to="nostore", ceiling_of="nostore"),
    Scenario("ceiling-fsync", _ceiling("fsync"), "/v1/queues/bench/messages",
             compare_to="fsync", ceiling_of="fsync"),
    # The gateway's fixed cost per request (middlewares, metrics) with no store work at all.
    Scenario("gateway-healthz", _gateway, "/healthz", compare_to="nostore", method="GET",
             body_size=0),
    Scenario("rest-recoverable", _with_queue(), "/v1/queues/bench/messages",
             compare_to="nostore"),
    Scenario("rest-express", _with_queue(), "/v1/queues/bench/messages", compare_to="nostore",
             headers={"Mq-Delivery": "express"}),
    Scenario("rest-batch10", _with_queue(), "/v1/batch", compare_to="nostore",
             headers={"Content-Type": "application/json"}, messages_per_request=10,
             body=_batch_body(10)),
    Scenario("srmp-recoverable", _with_queue(), "/msmq/bench", compare_to="nostore",
             headers={"Content-Type": _srmp_content_type(), "SOAPAction": '"MSMQMessage"'},
             body_factory=_srmp(stream=False)),
    Scenario("srmp-stream", _with_queue(), "/msmq/private$/bench_tx", compare_to="nostore",
             headers={"Content-Type": _srmp_content_type(), "SOAPAction": '"MSMQMessage"'},
             body_factory=_srmp(stream=True)),
    Scenario("rest-receive", _with_queue(prefill=True),
             "/v1/queues/bench/receive?max=1", compare_to="nostore", body_size=0),
]

__all__ = ["SCENARIOS", "Scenario"]
