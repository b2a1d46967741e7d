"""Per-peer link settings (``[[peers]]``): which stream element a Windows peer wants, how many
stream messages may be in flight towards it, and the TLS it is reached with (a CA bundle to
verify it, a client certificate to present: an entrepot peer maps it to a partner)."""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from gateway.errors import ConfigError
from gateway.settings import Settings
from mapping.rules import Pattern, normalise_address

__all__ = ["Peer", "load_peers", "peer_for"]


@dataclass(frozen=True, slots=True)
class Peer:
    pattern: Pattern
    stream_element: str  # "" = the [links] default
    window: int  # 0 = the [links] default
    ssl_context: ssl.SSLContext | None  # None = the system's verification, no client cert


def load_peers(settings: Settings) -> list[Peer]:
    """Raises: ConfigError naming the key when a CA bundle or a certificate cannot be loaded."""
    peers = []
    for index, peer in enumerate(settings.peers):
        context = None
        if peer.cafile or peer.client_cert:
            try:
                context = ssl.create_default_context(cafile=peer.cafile or None)
                context.minimum_version = ssl.TLSVersion.TLSv1_2
                if peer.client_cert:
                    context.load_cert_chain(peer.client_cert, peer.client_key)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(f"peers[{index}] ({peer.url}): cannot load its TLS files: "
                                  f"{exc}") from exc
        peers.append(Peer(Pattern.parse(peer.url), peer.stream_element, peer.window, context))
    return peers


def peer_for(peers: list[Peer], destination: str) -> Peer | None:
    """The first ``[[peers]]`` entry whose URL or prefix matches ``destination``."""
    address = normalise_address(destination)
    return next((p for p in peers if p.pattern.matches(address)), None)
