"""Slots for parked long polls: receives (``receive?wait=N``) waiting for a message.

A parked receive costs a connection and a waiting coroutine, not work, so it is kept out of
the in-flight cap (``server.concurrent_requests_max``, gateway.web.middlewares) and has a cap of
its own, ``server.long_polls_max``, of which one partner may hold at most a quarter (at least
one): a partner cannot park polls until nobody else can, nor until the gateway answers
nothing else. The admin and the callers of a gateway without credentials have no share,
only the overall cap. A receive takes a slot only when it is about to wait (its queue had
nothing for it), and a poll over either cap is answered at once: 503 with ``Retry-After``,
problem type ``too-many-long-polls``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from aiohttp import web

from gateway.errors import ProblemError

__all__ = ["LongPolls", "LONG_POLLS_KEY"]

RETRY_AFTER_S = 1


class LongPolls:
    """Counts of parked long polls, overall and per partner (no entry for a partner with
    none parked, so the map holds at most ``limit`` entries)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.share = max(1, limit // 4)
        self.parked = 0
        self._by_partner: dict[str, int] = {}

    @contextlib.contextmanager
    def slot(self, partner: str | None) -> Iterator[None]:
        """Hold one slot while the body runs; ``partner`` None: no per-partner share.

        Raises:
            ProblemError: 503 when the overall cap or the partner's share is taken.
        """
        if self.parked >= self.limit:
            raise _full(f"{self.limit} receives are already waiting (server.long_polls_max)")
        held = self._by_partner.get(partner, 0) if partner is not None else 0
        if partner is not None and held >= self.share:
            raise _full(f"partner {partner!r} already has {held} receives waiting, its share "
                        f"of server.long_polls_max ({self.limit})")
        self.parked += 1
        if partner is not None:
            self._by_partner[partner] = held + 1
        try:
            yield
        finally:
            self.parked -= 1
            if partner is not None:
                left = self._by_partner[partner] - 1
                if left:
                    self._by_partner[partner] = left
                else:
                    del self._by_partner[partner]


def _full(detail: str) -> ProblemError:
    return ProblemError(503, f"{detail}; retry, or receive without wait",
                        type_slug="too-many-long-polls",
                        headers={"Retry-After": str(RETRY_AFTER_S)})


LONG_POLLS_KEY = web.AppKey("long_polls", LongPolls)
