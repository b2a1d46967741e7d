"""Which rule applies to an address (pure). Precedence, documented and tested:

1. an exact pattern beats any prefix pattern;
2. among prefix patterns the longest wins;
3. ties go to the first file (by file name), then to the first element in it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from mapping.names import ORDER_QUEUE
from mapping.parse import MappingFile
from mapping.rules import (
    OutboundRedirection,
    Pattern,
    Redirection,
    RuleSet,
    StreamReceipt,
    normalise_address,
)

__all__ = ["combine", "route_inbound", "route_outbound", "receipt_url_for"]

R = TypeVar("R", Redirection, OutboundRedirection, StreamReceipt)


def combine(files: Sequence[MappingFile]) -> RuleSet:
    """One rule set from every file, files in name order (the tie-break of rule 3)."""
    ordered = sorted(files, key=lambda f: f.source)
    defaults = [f.default_receipt_url for f in ordered if f.default_receipt_url]
    return RuleSet(
        redirections=tuple(r for f in ordered for r in f.redirections),
        outbound=tuple(r for f in ordered for r in f.outbound),
        outbound_exceptions=tuple(p for f in ordered for p in f.exceptions),
        outbound_local_names=any(f.local_names for f in ordered),
        stream_receipts=tuple(r for f in ordered for r in f.stream_receipts),
        default_receipt_url=defaults[0] if defaults else None,
        files=tuple(f.source for f in ordered),
    )


def _best(rules: Sequence[R], patterns: Sequence[Pattern], address: str) -> R | None:
    best: R | None = None
    best_key: tuple[int, int] | None = None
    for rule, pattern in zip(rules, patterns):
        if not pattern.matches(address):
            continue
        key = (0 if not pattern.prefix else 1, -len(pattern.text))
        if best_key is None or key < best_key:  # strict: the first of equals stays
            best, best_key = rule, key
    return best


def route_inbound(rules: RuleSet, address: str) -> Redirection | None:
    """The inbound redirection for a message addressed to ``address`` (SRMP ``<to>``).

    Without an explicit redirection, an address that a stream-receipt setup publishes as its
    ``StreamReceiptURL`` (or the ``<default>`` URL) leads to the local order queue: that is
    where order acknowledgements from beyond the boundary arrive (docs/srmp.md, "Stream
    receipts and the order queue"; [MC-MQSRM] §3.1.7.2.4). The query is not needed to match
    (a receiver may send to the URL with or without it): the same path with any query, or
    none, is that address."""
    normal = normalise_address(address)
    found = _best(rules.redirections, [r.source for r in rules.redirections], normal)
    if found is not None:
        return found
    receipt_urls = [(r.receipt_url, r.origin) for r in rules.stream_receipts]
    if rules.default_receipt_url:
        receipt_urls.append((rules.default_receipt_url, "<default>"))
    bare = normal.partition("?")[0]
    for url, origin in receipt_urls:
        published = normalise_address(url)
        if published == normal or published.partition("?")[0] == bare:
            return Redirection(Pattern(normal, False), ORDER_QUEUE, origin)
    return None


def route_outbound(rules: RuleSet, destination: str, *, local_name: bool = False
                   ) -> OutboundRedirection | None:
    """The gateway to connect through for ``destination``, unless an exception covers it
    (``local_name``: the destination host is an intranet name, for ``local_names``)."""
    address = normalise_address(destination)
    if local_name and rules.outbound_local_names:
        return None
    if any(p.matches(address) for p in rules.outbound_exceptions):
        return None
    return _best(rules.outbound, [r.destination for r in rules.outbound], address)


def receipt_url_for(rules: RuleSet, destination: str) -> str | None:
    """The ``sendReceiptsTo`` URL published for a stream to ``destination`` (or None: the
    default order queue URL)."""
    found = _best(rules.stream_receipts, [r.logical for r in rules.stream_receipts],
                  normalise_address(destination))
    return found.receipt_url if found is not None else rules.default_receipt_url
