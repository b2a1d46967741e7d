"""Sizes and durations as operators write them: ``4MiB``, ``8GiB``, ``500ms``, ``6h``.

Pure: no I/O. Binary suffixes are powers of 1024, decimal ones (``KB``, ``MB``) powers of 1000,
because both appear in the MSMQ documents and operators copy them from there.
"""

from __future__ import annotations

import re

__all__ = ["parse_size", "parse_duration", "format_size", "format_duration", "parse_listen"]

_SIZE_UNITS: dict[str, int] = {
    "": 1,
    "b": 1,
    "kib": 1 << 10,
    "mib": 1 << 20,
    "gib": 1 << 30,
    "tib": 1 << 40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}
_DURATION_UNITS: dict[str, float] = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
}
_NUMBER_UNIT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Return a byte count from ``4MiB``, ``512KB``, ``1024`` or an int.

    Raises:
        ValueError: the text is not a non-negative whole number of bytes with a known unit.
    """
    if isinstance(text, bool):
        raise ValueError(f"expected a size such as '4MiB', got {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise ValueError(f"size must not be negative, got {text}")
        return text
    match = _NUMBER_UNIT.match(text)
    if match is None:
        raise ValueError(f"expected a size such as '4MiB', got {text!r}")
    number, unit = match.group(1), match.group(2).lower()
    if unit not in _SIZE_UNITS:
        raise ValueError(f"unknown size unit {match.group(2)!r} in {text!r} (use B, KiB, MiB, "
                         "GiB, TiB, or KB, MB, GB, TB)")
    value = float(number) * _SIZE_UNITS[unit]
    if value != int(value):
        raise ValueError(f"size {text!r} is not a whole number of bytes")
    return int(value)


def parse_duration(text: str | int | float) -> float:
    """Return seconds from ``500ms``, ``30s``, ``6h``, ``2d`` or a bare number of seconds.

    Raises:
        ValueError: the text is not a non-negative duration with a known unit.
    """
    if isinstance(text, bool):
        raise ValueError(f"expected a duration such as '30s', got {text!r}")
    if isinstance(text, (int, float)):
        if text < 0:
            raise ValueError(f"duration must not be negative, got {text}")
        return float(text)
    match = _NUMBER_UNIT.match(text)
    if match is None:
        raise ValueError(f"expected a duration such as '30s', got {text!r}")
    number, unit = match.group(1), match.group(2).lower() or "s"
    if unit not in _DURATION_UNITS:
        raise ValueError(
            f"unknown duration unit {match.group(2)!r} in {text!r} (use ms, s, m, h, d)"
        )
    return float(number) * _DURATION_UNITS[unit]


def format_size(size_bytes: int) -> str:
    """Render a byte count with the largest binary unit that divides it exactly."""
    for unit, factor in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size_bytes and size_bytes % factor == 0:
            return f"{size_bytes // factor}{unit}"
    return f"{size_bytes}B"


def format_duration(seconds: float) -> str:
    """Render seconds with the largest unit that divides them exactly."""
    millis = round(seconds * 1000)
    for unit, factor in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if millis and millis % factor == 0:
            return f"{millis // factor}{unit}"
    return f"{millis}ms"


def parse_listen(text: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[::1]:8080`` for IPv6).

    Raises:
        ValueError: no port, a port out of 1..65535, or an empty host.
    """
    host, sep, port_text = text.rpartition(":")
    if not sep or not host:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not (port_text.isascii() and port_text.isdigit()) or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"port must be 1..65535 in {text!r}")
    return host, int(port_text)
