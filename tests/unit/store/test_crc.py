"""store.crc: the accelerated CRC-32 must be zlib's, bit for bit (the on-disk format)."""

from __future__ import annotations

import zlib

from hypothesis import given, settings
from hypothesis import strategies as st

from store import crc


def test_the_accelerated_crc_is_installed() -> None:
    assert crc.ACCELERATED, "isal is a dependency: the commit path frames with it"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=5000), st.integers(0, 0xFFFFFFFF), st.integers(0, 64))
def test_same_values_as_zlib_for_bytes_views_and_seeds(data: bytes, seed: int,
                                                       skip: int) -> None:
    assert crc.crc32(data) == zlib.crc32(data)
    assert crc.crc32(data, seed) == zlib.crc32(data, seed)
    view = memoryview(data)[skip:]
    assert crc.crc32(view, seed) == zlib.crc32(view, seed)
    assert crc.crc32(bytearray(data), seed) == zlib.crc32(bytearray(data), seed)
