"""Each partner's share of the requests in flight: at most a quarter of
``server.concurrent_requests_max`` (at least one), so that one partner's requests, slow or
many, cannot take every place and leave the others 503 (as ``gateway.web.long_polls`` does
for parked receives, which are left out here: they have that cap of their own).

A request takes its place once its partner is known (the auth gate: before the body is read,
but for a signed request) and gives it back when it is answered (the middleware). With front
processes the count is each front's own and the quarter is shared out between them (at least
one each): connections spread over the fronts, and a front admits its part of the quarter.
SRMP senders nobody vouches for (no partner certificate, outside ``srmp.allow_networks``)
share one quarter between them: they are admitted before their body says where it goes, so
strangers' slow bodies cannot take the places partners need. An SRMP sender without a
certificate inside ``srmp.allow_networks`` (a trusted MSMQ server) holds a quarter of its
own, by its address, as a partner does: strangers cannot take its places either. The admin
and the REST callers of a gateway without credentials have no share, only the overall cap.
"""

from __future__ import annotations

from aiohttp import web

from gateway.auth.principal import NOBODY, Principal
from gateway.errors import ProblemError

__all__ = ["PartnerShares", "may_wait"]

_HOLDER = web.RequestKey("partner_share", str)


class PartnerShares:
    def __init__(self, limit: int, processes: int = 1) -> None:
        self.limit = limit
        self.processes = max(1, processes)
        self.share = max(1, limit // 4 // self.processes)
        self._held: dict[str, int] = {}  # no entry for a partner with none in flight

    def take(self, request: web.Request, principal: Principal, trusted: str = "") -> None:
        """Raises: ProblemError 503 when the partner's share is taken."""
        if may_wait(request):
            return
        name = self.admit(principal, trusted)
        if name is not None:
            request[_HOLDER] = name

    def admit(self, principal: Principal, trusted: str = "") -> str | None:
        """The name of the share the request holds a place in; None for the admin and an
        open gateway's callers, who take none. ``trusted``: the address of an SRMP sender
        without a certificate inside ``srmp.allow_networks`` (its own share).

        Raises:
            ProblemError: 503 when the share is taken.
        """
        if principal.admin or principal.open:
            return None
        # A space: no partner's name holds one (gateway.credentials).
        name = f"srmp sender {trusted}" if trusted and principal is NOBODY else principal.name
        held = self._held.get(name, 0)
        if held >= self.share:
            who = (f"SRMP sender {trusted} has" if name != principal.name
                   else "SRMP senders nobody vouches for have" if principal is NOBODY
                   else f"partner {name!r} has")
            part = "" if self.processes == 1 else (
                f", shared out between {self.processes} front processes")
            raise ProblemError(503, f"{who} already {held} requests in flight here, a "
                               f"quarter of server.concurrent_requests_max ({self.limit})"
                               f"{part}", type_slug="overloaded",
                               headers={"Retry-After": "1"})
        self._held[name] = held + 1
        return name

    def release(self, request: web.Request) -> None:
        if not self._held:  # (the admin's and an open gateway's requests take no place)
            return
        name = request.get(_HOLDER)
        if name is None:
            return
        del request[_HOLDER]
        self.give_back(name)

    def give_back(self, name: str) -> None:
        """The place ``admit`` gave ``name``."""
        left = self._held[name] - 1
        if left:
            self._held[name] = left
        else:
            del self._held[name]


def may_wait(request: web.Request) -> bool:
    """A receive that may park (``receive?wait=N``, N > 0): the long polls' cap is its."""
    if request.method != "POST" or not request.path.endswith("/receive"):
        return False
    try:
        return float(request.query.get("wait", "0")) > 0
    except ValueError:
        return False  # refused as a bad parameter
