"""Fixtures shared by every test directory."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.settings import Settings, parse_settings
from tests.helpers import GatewayProcess


@pytest.fixture
def settings_factory(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Settings with the data dir in tmp_path; keyword overrides as ``server__listen=...``."""

    def make(**overrides: object) -> Settings:
        dotted = {"store.data_dir": str(tmp_path / "data")}
        dotted.update({key.replace("__", "."): value for key, value in overrides.items()})
        return parse_settings({}, dotted)

    return make


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    """A real ``entrepot serve`` process, ready, on a free loopback port."""
    proc = GatewayProcess(tmp_path / "data")
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.stop()


@pytest.fixture(autouse=True)
def _no_gateway_left_running() -> Iterator[None]:
    """Stop the gateway processes a test started and left running (it failed before its
    own stop): a stray one would take CPU from every test after it. Those of module- and
    session-wide fixtures were running before the test and are left alone."""
    before = set(GatewayProcess.running)
    yield
    for process in GatewayProcess.running - before:
        process.stop(signal.SIGKILL)
