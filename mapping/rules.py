"""Mapping rules as data (pure): what the mapping files say, normalised for matching.

An address pattern is a queue URL, or a prefix ending in ``*``. Patterns and the addresses
they are matched against are normalised the same way: scheme and host lower-case, default
port left out, ``\\`` as ``/``, the path lower-case (MSMQ queue names are case-insensitive).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Pattern", "Redirection", "OutboundRedirection", "StreamReceipt", "RuleSet",
           "normalise_address"]

_DEFAULT_PORTS = {"http": ":80", "https": ":443"}


def normalise_address(text: str) -> str:
    """``HTTPS://Host:443/MSMQ\\Private$\\Q`` -> ``https://host/msmq/private$/q``."""
    text = text.strip().replace("\\", "/")
    if text.upper().startswith("DIRECT="):
        text = text[len("DIRECT="):]
    scheme, sep, rest = text.partition("://")
    if not sep:
        return text.lower()
    authority, slash, path = rest.partition("/")
    scheme = scheme.lower()
    authority = authority.lower()
    default = _DEFAULT_PORTS.get(scheme)
    if default and authority.endswith(default):
        authority = authority[: -len(default)]
    return f"{scheme}://{authority}{slash}{path.lower()}"


@dataclass(frozen=True, slots=True)
class Pattern:
    """A normalised address, or a prefix when the file's text ended in ``*``."""

    text: str
    prefix: bool

    @staticmethod
    def parse(raw: str) -> Pattern:
        raw = raw.strip()
        if raw.endswith("*"):
            return Pattern(normalise_address(raw[:-1]), True)
        return Pattern(normalise_address(raw), False)

    def matches(self, address: str) -> bool:
        return address.startswith(self.text) if self.prefix else address == self.text


@dataclass(frozen=True, slots=True)
class Redirection:
    """Inbound: a message addressed to ``source`` goes to ``target`` (local or internal)."""

    source: Pattern
    target: str
    origin: str  # file name and element number, for explanations and precedence


@dataclass(frozen=True, slots=True)
class OutboundRedirection:
    """Outbound: connect through ``through`` for destinations matching ``destination``."""

    destination: Pattern
    through: str
    origin: str


@dataclass(frozen=True, slots=True)
class StreamReceipt:
    """Order acknowledgements for streams to ``logical`` are to be sent to ``receipt_url``."""

    logical: Pattern
    receipt_url: str
    origin: str


@dataclass(frozen=True, slots=True)
class RuleSet:
    """Every rule of every mapping file, in file-name order then element order."""

    redirections: tuple[Redirection, ...] = ()
    outbound: tuple[OutboundRedirection, ...] = ()
    outbound_exceptions: tuple[Pattern, ...] = ()
    outbound_local_names: bool = False
    stream_receipts: tuple[StreamReceipt, ...] = ()
    default_receipt_url: str | None = None
    files: tuple[str, ...] = field(default=())
