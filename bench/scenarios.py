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
    """A gateway with queue ``bench`` (prefilled with 1 KiB messages for receive runs)."""

    @contextlib.contextmanager
    def server() -> Iterator[str]:
        with servers.gateway() as url:
            _call(url, "PUT", "/v1/queues/bench", {})
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
    Scenario("rest-receive", _with_queue(prefill=True),
             "/v1/queues/bench/receive?max=1", compare_to="nostore", body_size=0),
]

__all__ = ["SCENARIOS", "Scenario"]
