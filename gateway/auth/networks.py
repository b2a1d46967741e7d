"""Whether an address is in a list of networks (``srmp.allow_networks``): the SRMP senders
the gateway trusts without a certificate. Pure."""

from __future__ import annotations

import functools
import ipaddress

__all__ = ["in_networks"]


@functools.lru_cache(maxsize=4096)
def in_networks(remote: str, texts: tuple[str, ...]) -> bool:
    """Whether the address ``remote`` is in one of the networks ``texts`` (False for text
    that is no address). Cached: a peer's address is parsed once, not on every SRMP send
    (senders are few)."""
    try:
        address: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.ip_address(remote)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # an IPv4 sender on a dual-stack listener
    return any(address in n for n in _networks(texts))


@functools.lru_cache(maxsize=8)
def _networks(texts: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network,
                                                ...]:
    return tuple(ipaddress.ip_network(t) for t in texts)
