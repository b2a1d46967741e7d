"""Shares of the requests in flight: a partner's, and SRMP senders' (gateway.web.partner_shares)."""

from __future__ import annotations

import pytest

from gateway.auth.principal import NOBODY, Principal
from gateway.errors import ProblemError
from gateway.web.partner_shares import PartnerShares


def _refusal(shares: PartnerShares, principal: Principal, trusted: str = "") -> str:
    with pytest.raises(ProblemError) as refused:
        shares.admit(principal, trusted)
    assert refused.value.status_hint == 503
    return refused.value.detail


def test_a_trusted_srmp_sender_holds_a_share_of_its_own() -> None:
    shares = PartnerShares(8)  # a quarter: 2
    assert [shares.admit(NOBODY) for _ in range(2)] == [NOBODY.name] * 2
    assert "SRMP senders nobody vouches for" in _refusal(shares, NOBODY)
    # The strangers' quarter is taken; each trusted sender still has its own.
    held = [shares.admit(NOBODY, "10.0.0.5") for _ in range(2)]
    assert held == ["srmp sender 10.0.0.5"] * 2
    assert "SRMP sender 10.0.0.5 has already 2" in _refusal(shares, NOBODY, "10.0.0.5")
    assert shares.admit(NOBODY, "10.0.0.6") == "srmp sender 10.0.0.6"
    shares.give_back("srmp sender 10.0.0.5")
    assert shares.admit(NOBODY, "10.0.0.5") == "srmp sender 10.0.0.5"


def test_the_refusal_says_how_the_quarter_is_shared_out_between_fronts() -> None:
    shares = PartnerShares(1024, processes=2)
    partner = Principal("a")
    for _ in range(128):
        shares.admit(partner)
    detail = _refusal(shares, partner)
    assert detail == ("partner 'a' has already 128 requests in flight here, a quarter of "
                      "server.concurrent_requests_max (1024), shared out between 2 front "
                      "processes"), detail
    one_process = PartnerShares(4)  # a quarter: 1
    one_process.admit(NOBODY)
    assert _refusal(one_process, NOBODY).endswith("server.concurrent_requests_max (4)")
