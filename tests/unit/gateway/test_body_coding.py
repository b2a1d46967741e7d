"""gateway.web.body_coding: a body's Content-Encoding undone strictly, within a size."""

from __future__ import annotations

import gzip
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.web.body_coding import BodyCodingError, BodyTooLarge, decode


@given(st.binary(max_size=4096), st.sampled_from(["gzip", "GZIP", " gzip "]))
def test_gzip_round_trips_and_any_cut_is_refused(body: bytes, coding: str) -> None:
    packed = gzip.compress(body)
    assert decode(coding, packed, 4096) == body
    for end in (1, len(packed) // 2, len(packed) - 1):
        with pytest.raises(BodyCodingError):
            decode(coding, packed[:end], 4096)


@given(st.binary(max_size=4096))
def test_deflate_in_either_form_round_trips_and_a_cut_is_refused(body: bytes) -> None:
    bare = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    for packed in (zlib.compress(body), bare.compress(body) + bare.flush()):
        assert decode("deflate", packed, 4096) == body
        with pytest.raises(BodyCodingError):
            decode("deflate", packed[: len(packed) // 2], 4096)


def test_the_limit_is_on_the_decoded_size_and_met_exactly() -> None:
    assert decode("gzip", gzip.compress(bytes(100)), 100) == bytes(100)
    with pytest.raises(BodyTooLarge):
        decode("gzip", gzip.compress(bytes(101)), 100)
    with pytest.raises(BodyTooLarge):  # a bomb stops at the limit, not at 64 MiB
        decode("gzip", gzip.compress(bytes(64 << 20)), 1 << 20)


def test_identity_and_an_empty_body_are_taken_as_they_are() -> None:
    assert decode("identity", b"as is", 10) == b"as is"
    assert decode("gzip", b"", 10) == b"" and decode("deflate", b"", 10) == b""
