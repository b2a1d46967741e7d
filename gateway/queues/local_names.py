"""This gateway's own names: a format name (``DIRECT=OS:``, ``DIRECT=HTTP://``) that names
one of them is a local queue, whatever the form, wherever it is read (a destination, a reply
address, the admin queue an acknowledgement goes to)."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from mapping.errors import FormatNameError
from mapping.formatnames import DirectFormatName, canonical_host, parse_format_name
from mapping.names import QueueNameError, parse_queue_path

__all__ = ["LocalNames", "local_host_names", "local_queue", "machine_addresses"]


@dataclass(frozen=True, slots=True)
class LocalNames:
    """What makes a format name local: one of our host names, and no port or one of ours
    (the listen port, the HTTP(S) defaults and the documented 8080/8443, as a proxy in front
    may use them), and for an HTTP(S) name one of our virtual directories. Another port on a
    local name is another gateway on this machine."""

    hosts: frozenset[str]
    ports: frozenset[int]
    vdirs: frozenset[str] = frozenset({"msmq"})

    def owns(self, element: DirectFormatName) -> bool:
        return self.names_host(element) and (element.protocol not in ("http", "https")
                                              or element.vdir in self.vdirs)

    def names_host(self, element: DirectFormatName) -> bool:
        """``element`` names this gateway's host and port, whatever its virtual directory."""
        return element.host in self.hosts and (element.port is None
                                                or element.port in self.ports)

    def check_vdir(self, element: DirectFormatName) -> None:
        """Raises: FormatNameError when ``element`` names this gateway under a virtual
        directory it does not serve (it would otherwise be sent to this gateway itself)."""
        if self.names_host(element) and not self.owns(element):
            served = ", ".join(f"/{vdir}/" for vdir in sorted(self.vdirs))
            raise FormatNameError(f"{element.url()}: this gateway serves queues under "
                                  f"{served} (srmp.virtual_dirs), not /{element.vdir}/")


def local_host_names(configured: Iterable[str], listen_host: str, listen_port: int,
                     vdirs: Iterable[str] = ()) -> LocalNames:
    """Reads the machine's names and addresses (call once). ``vdirs``: ``srmp.virtual_dirs``;
    ``msmq`` is always one, as the gateway's own receipt and admin-queue URLs use it."""
    listen = listen_host.lower()
    names = {"localhost", "127.0.0.1", "::1", "[::1]", ".", listen,
             socket.gethostname().lower(), socket.getfqdn().lower(),
             *read_machine_addresses(), *(canonical_host(n) for n in configured)}
    if ":" in listen:  # an IPv6 listen address, as a URL writes it
        names.add(canonical_host(f"[{listen}]"))
    return LocalNames(frozenset(n for n in names if n),
                      frozenset({80, 443, 8080, 8443, listen_port}),
                      frozenset({"msmq", *(v.lower() for v in vdirs)}))


def local_queue(value: str, local: LocalNames) -> str | None:
    """The canonical path of the local queue ``value`` names (a path, or a direct format
    name of this gateway); None for anything else (another host, several queues, a public
    or private format name, garbage)."""
    with contextlib.suppress(QueueNameError):  # not a path: perhaps a format name
        return parse_queue_path(value).canonical
    try:
        parsed = parse_format_name(value)
    except FormatNameError:
        return None
    if not isinstance(parsed, DirectFormatName) or not local.owns(parsed):
        return None
    try:
        return parsed.path.canonical
    except QueueNameError:
        return None


_PROC_NET = Path("/proc/net")


def read_machine_addresses() -> set[str]:
    """The addresses of this machine's interfaces, as URLs write them (``machine_addresses``):
    a Windows sender often names a queue by the IP address it reaches this gateway at
    (``DIRECT=HTTP://192.0.2.10/msmq/private$/q``). Read once at start, from Linux's
    ``/proc/net``; an address added later, or one behind NAT, goes into ``server.names``."""
    texts = []
    for name in ("fib_trie", "if_inet6"):
        try:
            texts.append((_PROC_NET / name).read_text(encoding="ascii", errors="replace"))
        except OSError:  # not Linux, or no IPv6: the addresses there are not read
            texts.append("")
    return machine_addresses(*texts)


def machine_addresses(fib_trie: str, if_inet6: str) -> set[str]:
    """The local addresses in ``/proc/net/fib_trie`` (an address line ``|-- a.b.c.d``
    followed by ``/32 host LOCAL``) and ``/proc/net/if_inet6`` (32 hex digits first), IPv6
    ones bare and in brackets, as a URL's host has them; link-local IPv6 addresses are left
    out (a URL naming one needs its interface too)."""
    found: set[str] = set()
    address = ""
    for line in fib_trie.splitlines():
        text = line.strip()
        if text.startswith("|-- "):
            address = text[4:]
        elif text.startswith("/32 host LOCAL") and address:
            with contextlib.suppress(ValueError):
                found.add(str(ipaddress.IPv4Address(address)))
    for line in if_inet6.splitlines():
        fields = line.split()
        if not fields or len(fields[0]) != 32:
            continue
        try:
            v6 = ipaddress.IPv6Address(int(fields[0], 16))
        except ValueError:
            continue
        if not v6.is_link_local:
            found.update((str(v6), f"[{v6}]"))
    return found
