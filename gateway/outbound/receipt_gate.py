"""Whether a receipt or acknowledgement may go to the address a sender named, now.

Two checks before the gateway connects anywhere on a sender's word: the outbound policy
(gateway.auth.outbound: the address is one the operator allows), and a token bucket per
destination host, so no sender can make the gateway post receipts faster than
``outbound.receipts_rate`` to any one address. A receipt that fails either is dropped,
counted (``entrepot_srmp_receipts_sent{result="not_allowed"|"rate_limited"}``) and logged;
the sender of a dropped stream receipt resends its message and is acknowledged again, so
nothing is lost that the sender still holds.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from gateway.auth.outbound import OutboundPolicy, url_prefix
from gateway.auth.ratelimit import TokenBucket
from gateway.logs import server_log
from gateway.metrics import Metrics

__all__ = ["ReceiptGate"]

_LOG_EVERY_S = 60.0  # one warning per destination and reason a minute: senders repeat


class ReceiptGate:
    def __init__(self, policy: OutboundPolicy, metrics: Metrics, *, rate: float,
                 burst: float, hosts_max: int = 4096) -> None:
        self.policy = policy
        self.metrics = metrics
        self.rate = rate
        self.burst = burst
        self.hosts_max = hosts_max
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        self._logged: OrderedDict[tuple[str, str], float] = OrderedDict()

    def permit(self, url: str, kind: str) -> bool:
        """True when a ``kind`` receipt may be posted to ``url`` now."""
        target = url_prefix(url)
        if target is None or not self.policy.allows(url):
            self._drop(url, kind, "not_allowed",
                       "not an allowed outbound address ([outbound] allow, peers, webhooks, "
                       "outbound redirections)")
            return False
        host = f"{target.scheme}://{target.host}:{target.port}"
        bucket = self._buckets.get(host)
        if bucket is None:
            bucket = self._buckets[host] = TokenBucket(self.rate, self.burst)
            if len(self._buckets) > self.hosts_max:  # addresses come from senders: bounded
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(host)
        if bucket.take(time.monotonic()):
            self._drop(url, kind, "rate_limited",
                       f"over outbound.receipts_rate ({self.rate:g}/s) for {host}")
            return False
        return True

    def _drop(self, url: str, kind: str, result: str, why: str) -> None:
        self.metrics.srmp_receipts.labels(kind, result).inc()
        key = (url[:200], result)
        now = time.monotonic()
        last = self._logged.get(key)
        if last is not None and now - last < _LOG_EVERY_S:
            return
        self._logged[key] = now
        if len(self._logged) > self.hosts_max:
            self._logged.popitem(last=False)
        server_log.warning("%s to %r dropped: %s", kind, url[:200], why)
