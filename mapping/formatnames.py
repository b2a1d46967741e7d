"""MSMQ format names (pure: no I/O). MS-MQMQ §2.1; docs/srmp.md, "Queue names and
URLs".

Forms accepted (prefixes case-insensitive)::

    DIRECT=HTTP://host[:port]/msmq/private$/orders      (also HTTPS; "/" or "\\" after the
    DIRECT=HTTPS://host/msmq\\SYSTEM$;DEADLETTER          virtual directory)
    DIRECT=OS:machine\\private$\\orders   DIRECT=OS:.\\orders;journal
    DIRECT=TCP:10.1.2.3\\private$\\orders
    PUBLIC=<guid>[;JOURNAL]   PRIVATE=<machine guid>\\<hex number>[;JOURNAL]
    MACHINE=<guid>;JOURNAL|;DEADLETTER|;DEADXACT   DL=<guid>[@domain]
    a,b,c   (a multiple-element format name: several of the above, comma-separated)

Normalisation (so equal addresses compare equal): scheme and host lower-cased (an IPv6
address in its RFC 5952 spelling), the default port (80/443) filled in, the queue path
canonical (lower-case, "/"), GUIDs lower-case. The original spelling of the queue path is
kept for display. A bad name raises FormatNameError saying which part is wrong (MSMQ:
MQ_ERROR_ILLEGAL_FORMATNAME).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Literal

from mapping.errors import FormatNameError, QueueNameError
from mapping.names import QueuePath, parse_queue_path

__all__ = [
    "DirectFormatName",
    "PublicFormatName",
    "PrivateFormatName",
    "MachineFormatName",
    "DistributionListFormatName",
    "MultipleFormatName",
    "FormatName",
    "SingleFormatName",
    "canonical_host",
    "parse_format_name",
    "parse_queue_url",
]

FORMAT_NAME_CHARS_MAX = 4096
_GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                   r"[0-9a-fA-F]{12}$")
_HOST = re.compile(r"^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+)\Z")
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class DirectFormatName:
    protocol: Literal["http", "https", "os", "tcp"]
    host: str
    queue: str  # canonical queue path
    port: int | None = None
    vdir: str = ""
    display_queue: str = field(default="", compare=False)

    @property
    def path(self) -> QueuePath:
        return parse_queue_path(self.display_queue or self.queue)

    def url(self) -> str:
        """``http://host[:port]/vdir/queue`` (default ports left out)."""
        assert self.protocol in ("http", "https")
        port = "" if self.port == _DEFAULT_PORTS[self.protocol] else f":{self.port}"
        return f"{self.protocol}://{self.host}{port}/{self.vdir}/{self.display_queue or self.queue}"

    def format_name(self) -> str:
        if self.protocol in ("http", "https"):
            return "DIRECT=" + self.protocol.upper() + self.url()[len(self.protocol):]
        machine_queue = (self.display_queue or self.queue).replace("/", "\\")
        return f"DIRECT={self.protocol.upper()}:{self.host}\\{machine_queue}"


@dataclass(frozen=True, slots=True)
class PublicFormatName:
    guid: str
    journal: bool = False

    def format_name(self) -> str:
        return f"PUBLIC={self.guid}" + (";JOURNAL" if self.journal else "")


@dataclass(frozen=True, slots=True)
class PrivateFormatName:
    machine_guid: str
    number: int
    journal: bool = False

    def format_name(self) -> str:
        return f"PRIVATE={self.machine_guid}\\{self.number:08x}" + (
            ";JOURNAL" if self.journal else "")


@dataclass(frozen=True, slots=True)
class MachineFormatName:
    guid: str
    kind: Literal["journal", "deadletter", "deadxact"]

    def format_name(self) -> str:
        return f"MACHINE={self.guid};{self.kind.upper()}"


@dataclass(frozen=True, slots=True)
class DistributionListFormatName:
    guid: str
    domain: str = ""

    def format_name(self) -> str:
        return f"DL={self.guid}" + (f"@{self.domain}" if self.domain else "")


SingleFormatName = (DirectFormatName | PublicFormatName | PrivateFormatName | MachineFormatName
                    | DistributionListFormatName)


@dataclass(frozen=True, slots=True)
class MultipleFormatName:
    elements: tuple[SingleFormatName, ...]

    def format_name(self) -> str:
        return ",".join(e.format_name() for e in self.elements)


FormatName = SingleFormatName | MultipleFormatName


def parse_format_name(text: str) -> FormatName:
    """Parse and normalise a format name.

    Raises:
        FormatNameError: empty, too long, an unknown form, or a bad part (the message says
            which).
    """
    text = text.strip()
    if not text:
        raise FormatNameError("empty format name")
    if len(text) > FORMAT_NAME_CHARS_MAX:
        raise FormatNameError(f"format name longer than {FORMAT_NAME_CHARS_MAX} characters")
    if "," in text and not text.upper().startswith("DL="):
        parts = [part.strip() for part in text.split(",")]
        if not all(parts):
            raise FormatNameError(f"{text!r}: an empty element in a multiple-element name")
        return MultipleFormatName(tuple(_single(part) for part in parts))
    return _single(text)


def parse_queue_url(url: str) -> DirectFormatName:
    """The SRMP ``<to>`` form: ``http(s)://host[:port]/vdir/queue`` (no ``DIRECT=``).

    Raises:
        FormatNameError: not an http(s) queue URL.
    """
    scheme, sep, rest = url.strip().partition("://")
    if not sep or scheme.lower() not in _DEFAULT_PORTS:
        raise FormatNameError(f"{url!r}: a queue URL starts with http:// or https://")
    return _direct_http(scheme.lower(), rest, url)


def _single(text: str) -> SingleFormatName:
    kind, sep, value = text.partition("=")
    if not sep:
        raise FormatNameError(f"{text!r}: expected DIRECT=, PUBLIC=, PRIVATE=, MACHINE= or DL=")
    kind = kind.strip().upper()
    if kind == "DIRECT":
        return _direct(value, text)
    if kind == "PUBLIC":
        guid, journal = _suffix(value, text, ("journal",))
        return PublicFormatName(_guid(guid, text), journal == "journal")
    if kind == "PRIVATE":
        body, journal = _suffix(value, text, ("journal",))
        machine, slash, number = body.partition("\\")
        if not slash or not re.fullmatch(r"[0-9a-fA-F]{1,8}", number):
            raise FormatNameError(f"{text!r}: PRIVATE= takes <machine guid>\\<hex number>")
        return PrivateFormatName(_guid(machine, text), int(number, 16), journal == "journal")
    if kind == "MACHINE":
        guid, suffix = _suffix(value, text, ("journal", "deadletter", "deadxact"))
        if not suffix:
            raise FormatNameError(f"{text!r}: MACHINE= needs ;JOURNAL, ;DEADLETTER or ;DEADXACT")
        return MachineFormatName(_guid(guid, text), suffix)  # type: ignore[arg-type]
    if kind == "DL":
        guid, _, domain = value.partition("@")
        return DistributionListFormatName(_guid(guid, text), domain.lower())
    raise FormatNameError(f"{text!r}: unknown format name type {kind!r}")


def _suffix(value: str, text: str, allowed: tuple[str, ...]) -> tuple[str, str]:
    body, sep, suffix = value.partition(";")
    if not sep:
        return body, ""
    if suffix.lower() not in allowed:
        raise FormatNameError(f"{text!r}: unknown suffix ;{suffix}")
    return body, suffix.lower()


def _guid(value: str, text: str) -> str:
    cleaned = value.strip().strip("{}")
    if not _GUID.match(cleaned):
        raise FormatNameError(f"{text!r}: {value!r} is not a GUID")
    return cleaned.lower()


def _direct(value: str, text: str) -> DirectFormatName:
    protocol, sep, rest = value.partition(":")
    protocol = protocol.strip().lower()
    if not sep:
        raise FormatNameError(f"{text!r}: DIRECT= takes HTTP://, HTTPS://, OS: or TCP:")
    if protocol in _DEFAULT_PORTS:
        if not rest.startswith("//"):
            raise FormatNameError(f"{text!r}: expected {protocol.upper()}://host/...")
        return _direct_http(protocol, rest[2:], text)
    if protocol in ("os", "tcp"):
        machine, slash, queue = rest.partition("\\")
        if not slash or not machine:
            raise FormatNameError(f"{text!r}: DIRECT={protocol.upper()}: takes machine\\queue")
        if protocol == "tcp" and not re.fullmatch(r"[0-9.]+|\[[0-9a-fA-F:.]+\]", machine):
            raise FormatNameError(f"{text!r}: DIRECT=TCP: takes an IP address")
        path = _queue(queue, text)
        kind: Literal["os", "tcp"] = "os" if protocol == "os" else "tcp"
        return DirectFormatName(kind, machine.lower(), path.canonical,
                                display_queue=path.display)
    raise FormatNameError(f"{text!r}: unknown protocol {protocol!r}")


def _direct_http(scheme: str, rest: str, text: str) -> DirectFormatName:
    authority, slash, path_part = rest.partition("/")
    if not slash:
        raise FormatNameError(f"{text!r}: no virtual directory and queue after the host")
    host, port = _authority(authority, scheme, text)
    vdir, sep, queue = path_part.replace("\\", "/").partition("/")
    if not vdir or not sep:
        raise FormatNameError(f"{text!r}: expected /<virtual directory>/<queue> after the host")
    path = _queue(queue, text)
    protocol: Literal["http", "https"] = "https" if scheme == "https" else "http"
    return DirectFormatName(protocol, host, path.canonical, port, vdir.lower(),
                            display_queue=path.display)


def _dns_name_fits(host: str) -> bool:
    """A name DNS (and the IDNA codec that connects to it) can carry; addresses pass."""
    if host.startswith("["):
        return True
    name = host.rstrip(".")
    return 0 < len(name) <= 253 and all(0 < len(label) <= 63 for label in name.split("."))


def _authority(authority: str, scheme: str, text: str) -> tuple[str, int]:
    host, port_text = authority, ""
    if authority.startswith("["):
        end = authority.find("]")
        host, port_text = authority[: end + 1], authority[end + 2:] if end > 0 else ""
    elif ":" in authority:
        host, _, port_text = authority.rpartition(":")
    if not _HOST.match(host) or not _dns_name_fits(host):
        raise FormatNameError(f"{text!r}: {host[:80]!r} is not a host name or address (DNS: "
                              "labels of 1..63 characters, 253 in all)")
    if port_text and (not (port_text.isascii() and port_text.isdigit())
                      or not 0 < int(port_text) < 65536):
        raise FormatNameError(f"{text!r}: port {port_text!r} is not 1..65535")
    return canonical_host(host), int(port_text) if port_text else _DEFAULT_PORTS[scheme]


def canonical_host(host: str) -> str:
    """``host`` as addresses compare it: lower case, and a bracketed IPv6 address in its one
    spelling (RFC 5952: ``[FD00:0::02]`` is ``[fd00::2]``; an IPv4-mapped one,
    ``[::ffff:127.0.0.1]``, is the IPv4 address)."""
    host = host.lower()
    if host.startswith("[") and host.endswith("]"):
        try:
            address = ipaddress.IPv6Address(host[1:-1])
        except ValueError:  # not an address: left as written
            return host
        mapped = address.ipv4_mapped
        return str(mapped) if mapped is not None else f"[{address}]"
    return host


def _queue(queue: str, text: str) -> QueuePath:
    try:
        return parse_queue_path(queue)
    except QueueNameError as exc:
        raise FormatNameError(f"{text!r}: {exc}") from exc
