"""Each serving process's cap on connections (gateway.web.http_server.connections_cap)."""

from __future__ import annotations

import resource

import pytest

from gateway.web.http_server import connections_cap


def _limit(monkeypatch: pytest.MonkeyPatch, files: int) -> None:
    monkeypatch.setattr(resource, "getrlimit", lambda which: (files, files))


def test_each_front_keeps_its_share_however_small(monkeypatch: pytest.MonkeyPatch) -> None:
    """server.connections_max caps the gateway: two fronts keep 16 between them."""
    _limit(monkeypatch, 65_536)
    assert connections_cap(16, 2) == 8
    assert connections_cap(10_000, 2) == 5_000
    assert connections_cap(16, 1) == 16
    # Shares round down: three fronts never keep more than 20 between them.
    assert connections_cap(20, 3) == 6
    assert connections_cap(16, 64) == 1  # (at least one each)


def test_a_small_open_file_limit_still_leaves_sixteen(monkeypatch: pytest.MonkeyPatch) -> None:
    _limit(monkeypatch, 20)  # half of it would be 10
    assert connections_cap(10_000, 1) == 16
    assert connections_cap(16, 4) == 4  # but never more than the share
