from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.units import format_duration, format_size, parse_duration, parse_size


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4MiB", 4 * 1024 * 1024),
        ("8GiB", 8 * 1024**3),
        ("512KiB", 512 * 1024),
        ("512kib", 512 * 1024),
        ("1024", 1024),
        ("10B", 10),
        ("1.5KiB", 1536),
        ("2MB", 2_000_000),
        (4096, 4096),
    ],
)
def test_parse_size(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("bad", ["", "MiB", "4XB", "-1", "1.3B", "four", True, -5])
def test_parse_size_refuses(bad: str | int) -> None:
    with pytest.raises(ValueError):
        parse_size(bad)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("500ms", 0.5), ("30s", 30.0), ("6h", 21600.0), ("2m", 120.0), ("1d", 86400.0),
     ("15", 15.0), (3, 3.0), (0.25, 0.25)],
)
def test_parse_duration(text: str | float, expected: float) -> None:
    assert parse_duration(text) == pytest.approx(expected)


@pytest.mark.parametrize("bad", ["", "s", "5y", "-3s", "soon", False, -1])
def test_parse_duration_refuses(bad: str | float) -> None:
    with pytest.raises(ValueError):
        parse_duration(bad)


@given(st.integers(min_value=0, max_value=1 << 50))
def test_size_round_trip(value: int) -> None:
    assert parse_size(format_size(value)) == value


@given(st.integers(min_value=0, max_value=10**9))
def test_duration_round_trip(millis: int) -> None:
    assert parse_duration(format_duration(millis / 1000)) == pytest.approx(millis / 1000)
