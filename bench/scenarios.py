"""The benchmark scenarios. Later issues add theirs here (one ``Scenario`` each).

Every scenario names the ceiling it is compared with: ``nostore`` (bare aiohttp + uvloop
answering 201) or ``fsync`` (the same, appending each body and group-committing with fdatasync
before answering). Ceilings are measured first, in the same run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ContextManager

from bench import servers


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

    @property
    def is_ceiling(self) -> bool:
        return bool(self.ceiling_of)


def _ceiling(mode: str) -> Callable[[], ContextManager[str]]:
    return lambda: servers.ceiling(mode)


def _gateway() -> ContextManager[str]:
    return servers.gateway()


SCENARIOS: list[Scenario] = [
    Scenario("ceiling-nostore", _ceiling("nostore"), "/v1/queues/bench/messages",
             compare_to="nostore", ceiling_of="nostore"),
    Scenario("ceiling-fsync", _ceiling("fsync"), "/v1/queues/bench/messages",
             compare_to="fsync", ceiling_of="fsync"),
    # The gateway's fixed cost per request (middlewares, metrics) with no store work at all.
    Scenario("gateway-healthz", _gateway, "/healthz", compare_to="nostore", method="GET",
             body_size=0),
]

__all__ = ["SCENARIOS", "Scenario"]
