"""The send lane's tests: ``start`` makes fronts in-process (tests.lane_harness)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.lane_harness import Start, fronts


@pytest.fixture
async def start(tmp_path: Path) -> AsyncIterator[Start]:
    async with fronts(tmp_path) as make:
        yield make
