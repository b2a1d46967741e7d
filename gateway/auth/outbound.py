"""Which remote addresses a sender's words may make the gateway call (pure).

Acknowledgements go to the admin queue a sender names and receipts to the URLs an SRMP
envelope names. Taken on trust, any sender could make the gateway POST to an address of its
choice, inside the enterprise network too (server-side request forgery). An address is
allowed when it falls under a prefix of ``[outbound] allow``, a configured ``[[peers]]`` or
``[[webhooks]]`` URL, a mapping file's outbound redirection (the operator routes that
destination through a gateway of its own), or when it is under the virtual directory of a
queue manager the gateway already sends to: a link's (created by the admin's sends, trusted
forwarding senders or the mapping files), or the gateway a redirection goes through. So a
link to ``http://peer/msmq/private$/orders`` allows acknowledgements to
``http://peer/msmq/private$/acks``, not to ``http://peer/admin/...``.

A prefix matches by URL parts, not by characters: scheme and host equal (case-insensitive),
the same port (default ports made explicit), and the path starting with the prefix's path at
a ``/`` boundary. ``http://relay`` therefore does not allow ``http://relay.evil.example/``,
nor ``http://relay:8080/``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from mapping.engine import route_outbound
from mapping.rules import RuleSet

__all__ = ["OutboundPolicy", "UrlPrefix", "url_prefix"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class UrlPrefix:
    scheme: str
    host: str
    port: int
    path: str  # "" or "/..." without a trailing "/"

    def covers(self, url: UrlPrefix) -> bool:
        if (url.scheme, url.host, url.port) != (self.scheme, self.host, self.port):
            return False
        return not self.path or url.path == self.path or url.path.startswith(self.path + "/")


def url_prefix(text: str) -> UrlPrefix | None:
    """The parts of an http(s) URL (a trailing ``*`` ignored), its path as the server will
    read it: percent-escapes decoded, ``\\`` as ``/`` (MSMQ's), empty segments dropped.
    None when it is not one, or when it holds credentials (``user@``: the sender's choice
    of what the gateway would present) or a dot segment (``..``, escaped too: a way out of
    the path it would be allowed under)."""
    text = text.strip().removesuffix("*")
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if scheme not in _DEFAULT_PORTS or not host or "@" in parts.netloc:
        return None
    segments = [s for s in unquote(parts.path).replace("\\", "/").split("/") if s]
    if any(s in (".", "..") for s in segments):
        return None
    return UrlPrefix(scheme, host, port or _DEFAULT_PORTS[scheme],
                     "".join("/" + s for s in segments).lower())


class OutboundPolicy:
    """``allows(url)``: may a sender's word make the gateway connect to ``url``?"""

    def __init__(self, prefixes: Iterable[str],
                 rules: Callable[[], RuleSet | None] = lambda: None,
                 links: Callable[[], Iterable[str]] = tuple) -> None:
        self._prefixes = tuple(p for p in (url_prefix(t) for t in prefixes) if p is not None)
        self._rules = rules
        self._links = links

    def allows(self, url: str) -> bool:
        target = url_prefix(url)
        if target is None:
            return False
        if any(prefix.covers(target) for prefix in self._prefixes):
            return True
        if any(_within_directory(d, target) for d in self._links()):
            return True
        rules = self._rules()
        if rules is None:
            return False
        if route_outbound(rules, url) is not None:
            return True
        return any(_within_directory(r.through, target) for r in rules.outbound)


def _within_directory(queue_manager: str, target: UrlPrefix) -> bool:
    """``target`` is under the virtual directory (the path's first segment, ``/msmq``) of
    the queue manager URL ``queue_manager``; one without a path allows nothing."""
    known = url_prefix(queue_manager)
    if known is None or not known.path:
        return False
    first = known.path.split("/", 2)[1]  # "/msmq/private$/orders" -> "msmq"
    return UrlPrefix(known.scheme, known.host, known.port, "/" + first).covers(target)
