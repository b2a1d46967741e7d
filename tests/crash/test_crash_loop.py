"""The torture crash loop's short run (``make torture`` runs 200 cycles): ten SIGKILLs of the
real gateway under REST and SRMP load with transactions, then every invariant checked."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.torture import crash_loop


@pytest.mark.crash
@pytest.mark.timeout(300)
def test_six_kill_9_cycles_lose_and_duplicate_nothing(tmp_path: Path) -> None:
    report = crash_loop.run(tmp_path / "data", cycles=6)
    assert report["cycles"] == 6
    assert report["acknowledged"] > 500, "too little load for the run to mean anything"
    assert (report["lost"], report["duplicated"], report["out_of_order"],
            report["torn_transactions"], report["consumed_came_back"]) == (0, 0, 0, 0, 0)
    stream = report["stream"]
    assert stream["answered"] > 100 and stream["received"] > 0, stream
    assert (stream["lost"], stream["duplicated"], stream["out_of_order"],
            stream["came_back"]) == (0, 0, 0, 0)
