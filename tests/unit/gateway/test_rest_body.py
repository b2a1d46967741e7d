"""``parse_json``, the reader of every JSON request body: depth and lone surrogates refused
with a 400 naming the place, everything else JSON allows taken."""

from __future__ import annotations

import json

import pytest

from gateway.errors import ProblemError
from gateway.web.rest_body import JSON_DEPTH_MAX, parse_json


def _refused(raw: bytes) -> str:
    with pytest.raises(ProblemError) as info:
        parse_json(raw)
    assert info.value.status_hint == 400
    return info.value.detail


def test_nesting_is_counted_outside_strings_only() -> None:
    at_limit = "[" * JSON_DEPTH_MAX + "]" * JSON_DEPTH_MAX
    assert parse_json(at_limit.encode()) == json.loads(at_limit)
    assert "nested" in _refused(b"[" + at_limit.encode() + b"]")
    quoted = json.dumps({"a": '\\"' + "[{" * 500, "b": ["]", "}"]})  # escapes, brackets
    assert parse_json(quoted.encode()) == json.loads(quoted)
    assert "nested" in _refused(b"[" * 100_000)


def test_lone_surrogates_are_named_where_they_are() -> None:
    assert _refused(b'{"a": {"b": [1, "\\udc00"]}}').startswith("a.b[1]:")
    assert _refused(b'["\\ud800x"]').startswith("[0]:")
    assert "key" in _refused(b'{"a": {"\\ud800": 1}}')
    assert _refused(b'"\\ud800"').startswith("body:")
    # A pair is one character, not two surrogates.
    assert parse_json(b'{"label": "\\ud83d\\ude00"}') == {"label": "\U0001F600"}


def test_bytes_that_are_not_utf8_and_numbers() -> None:
    assert "UTF-8" in _refused(b'{"label": "\xed\xa0\x80"}')
    assert "UTF-8" in _refused(b'{"label": "\xff"}')
    assert parse_json(b'{"n": 387.0, "f": 1.5}') == {"n": 387, "f": 1.5}
    assert "not JSON" in _refused(b"{")
