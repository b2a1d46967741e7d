"""A settings key's kind and range, and the conversion of its TOML value (pure): the part of
gateway.settings that is the same for every key."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Literal

from gateway.errors import ConfigError
from gateway.units import format_duration, format_size, parse_duration, parse_listen, parse_size

__all__ = ["EMPTY_KEY_REFUSED", "EMPTY_KEY_SHA256", "Kind", "Spec", "convert", "kind_of"]

# The SHA-256 of the empty key: whoever sends an empty one (Basic "user:") would match it.
EMPTY_KEY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
EMPTY_KEY_REFUSED = ("the SHA-256 of an empty key, which anyone can present: hash a real key "
                     "(entrepot auth hash-key)")

Kind = Literal["size", "duration", "int", "bool", "str", "choice", "listen", "label", "names",
               "networks", "text", "sha256", "durations", "urls"]


@dataclass(frozen=True, slots=True)
class Spec:
    kind: Kind
    low: float = 0
    high: float = 0
    choices: tuple[str, ...] = ()


def convert(path: str, spec: Spec, raw: object) -> object:
    try:
        value = _convert_kind(spec, raw)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: {exc} (got {raw!r})") from exc
    if spec.kind in ("size", "duration", "int"):
        assert isinstance(value, (int, float))
        if not spec.low <= value <= spec.high:
            raise ConfigError(f"{path}: {raw!r} is out of range [{_bound(spec, spec.low)}, "
                              f"{_bound(spec, spec.high)}]")
    return value


def _convert_kind(spec: Spec, raw: object) -> object:
    if spec.kind == "size":
        if not isinstance(raw, (str, int)):
            raise TypeError(f"expected a size such as '4MiB', got {kind_of(raw)}")
        return parse_size(raw)
    if spec.kind == "duration":
        if not isinstance(raw, (str, int, float)):
            raise TypeError(f"expected a duration such as '30s', got {kind_of(raw)}")
        return parse_duration(raw)
    if spec.kind == "int":
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise TypeError(f"expected an integer, got {kind_of(raw)}")
        return raw
    if spec.kind == "names":
        if not isinstance(raw, list) or not all(isinstance(n, str) and n for n in raw):
            raise TypeError("expected an array of non-empty strings")
        return tuple(n.lower() for n in raw)
    if spec.kind == "durations":
        if not isinstance(raw, list) or not raw or not all(
                isinstance(n, (str, int, float)) for n in raw):
            raise TypeError("expected a non-empty array of durations such as \"30s\"")
        values = tuple(parse_duration(n) for n in raw)
        if any(not 0.01 <= v <= 7 * 86400 for v in values):
            raise ValueError("each duration must be 10ms .. 7d")
        return values
    if spec.kind == "urls":
        if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
            raise TypeError("expected an array of URLs such as \"https://partner.example/\"")
        for text in raw:
            if not text.lower().startswith(("http://", "https://")) or len(text) < 9:
                raise ValueError(f"{text!r} is not an http(s) URL")
        return tuple(raw)
    if spec.kind == "networks":
        if not isinstance(raw, list) or not all(isinstance(n, str) for n in raw):
            raise TypeError("expected an array of networks such as \"10.0.0.0/8\"")
        return tuple(str(ipaddress.ip_network(n, strict=False)) for n in raw)
    if spec.kind == "bool":
        if not isinstance(raw, bool):
            raise TypeError(f"expected true or false, got {kind_of(raw)}")
        return raw
    if not isinstance(raw, str):
        raise TypeError(f"expected a string, got {kind_of(raw)}")
    if spec.kind == "choice" and raw not in spec.choices:
        raise ValueError(f"expected one of {', '.join(spec.choices)}")
    if spec.kind == "listen":
        parse_listen(raw)
    if spec.kind == "sha256" and raw.startswith("credential:"):
        return raw  # a file of $CREDENTIALS_DIRECTORY holds it (gateway.credentials)
    if spec.kind == "sha256" and raw and (len(raw) != 64 or raw.strip(
            "0123456789abcdefABCDEF")):
        raise ValueError("expected 64 hex digits (the SHA-256 of the secret), or nothing")
    if spec.kind == "sha256" and raw.lower() == EMPTY_KEY_SHA256:
        raise ValueError(EMPTY_KEY_REFUSED)
    if spec.kind == "sha256":
        return raw.lower()
    if spec.kind == "str" and not raw:
        raise ValueError("must not be empty")
    if spec.kind == "label" and len(raw) > 124:
        raise ValueError("at most 124 characters")
    return raw


def _bound(spec: Spec, value: float) -> str:
    if spec.kind == "size":
        return format_size(int(value))
    if spec.kind == "duration":
        return format_duration(value)
    return str(int(value))


def kind_of(raw: object) -> str:
    return {bool: "boolean", int: "integer", float: "float", str: "string", list: "array",
            dict: "table"}.get(type(raw), type(raw).__name__)
