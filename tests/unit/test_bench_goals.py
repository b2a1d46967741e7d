"""The goal table README carries is computed from a bench run's records, not typed by hand;
it names the concurrency each goal was judged at and refuses to judge without its record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.goals import GOALS, MissingRecords, table
from tests.helpers import REPO_ROOT


def _rec(scenario: str, rate: float, ceiling: float, *, c: int = 64, p99: float = 1.0,
         **extra: float) -> dict[str, object]:
    return {"scenario": scenario, "concurrency": c, "msgs_per_s": rate, "p50_ms": 0.5,
            "p99_ms": p99, "ceiling_msgs_per_s": ceiling, "ratio": round(rate / ceiling, 3),
            **extra}


RECORDS = [
    _rec("ceiling-fsync", 10_000, 10_000, p99=4.0),
    _rec("rest-recoverable", 6_000, 10_000, c=16),  # another level: not the one judged
    _rec("rest-recoverable", 5_500, 10_000, p99=9.0),
    _rec("rest-express", 7_500, 10_000),
    _rec("rest-batch10", 12_000, 10_000),
    _rec("srmp-recoverable", 3_000, 10_000),
    _rec("srmp-stream", 3_600, 10_000),
    _rec("rest-receive", 6_000, 10_000),
    _rec("forward-tx", 3_000, 4_000),
    _rec("store-commit", 140_000, 190_000),
    {"scenario": "recovery", "concurrency": 0, "ratio": 0.5, "seconds_per_gib": 3.2},
    {"scenario": "memory", "concurrency": 0, "ratio": 1.5, "bytes_per_message": 150.0},
    {"scenario": "spark-ingest", "concurrency": 2, "msgs_per_s": 2_600, "ratio": 0.91,
     "ceiling_msgs_per_s": 2_850, "wall_s": 77.0, "ceiling_wall_s": 70.1},
    _rec("rest-recoverable-w2", 6_500, 10_000, cpu_us_per_msg=42.0),
    _rec("rest-express-w2", 7_200, 10_000),
    _rec("srmp-recoverable-w2", 3_900, 10_000),
]


def _rows(records: list[dict[str, object]]) -> dict[str, str]:
    return {line.split("|")[1].strip(" `"): line for line in table(records).splitlines()[2:]}


def test_goals_are_judged_at_64_from_the_records() -> None:
    rows = _rows(RECORDS)
    assert rows["rest-recoverable"].endswith("| 64 | 0.55 (5,500 vs 10,000/s) | yes |")
    assert "2.18x" in rows["rest-batch10"] and rows["rest-batch10"].endswith("| yes |")
    assert rows["srmp-recoverable"].endswith("| **no** |")
    assert "| - | 3.20 s/GiB" in rows["recovery"] and rows["recovery"].endswith("| yes |")
    assert rows["spark-ingest"].endswith("| 2 | 0.91 (77.0 s vs 70.1 s; 2,600 rows/s) | yes |")
    assert "2.25x (9.0 vs 4.0 ms)" in rows["rest-recoverable p99"]
    assert rows["rest-recoverable p99"].endswith("| **no** |")
    assert rows["memory"].endswith("| 150 bytes | yes |")
    assert rows["rest-recoverable-w2"].endswith("| 64 | 0.65 (6,500 vs 10,000/s) | yes |")
    assert rows["srmp-recoverable-w2"].endswith("| **no** |")
    assert rows["owner CPU"].endswith("| 64 | 42.00 us | **no** |")


@pytest.mark.parametrize("dropped", ["memory", "store-commit", "rest-express"])
def test_a_missing_record_fails_loudly_naming_it(dropped: str) -> None:
    records = [r for r in RECORDS if r["scenario"] != dropped]
    with pytest.raises(MissingRecords, match=dropped):
        table(records)


def test_a_record_at_another_concurrency_does_not_stand_in() -> None:
    records = [r for r in RECORDS if not (r["scenario"] == "rest-recoverable"
                                          and r["concurrency"] == 64)]
    with pytest.raises(MissingRecords, match="rest-recoverable at C = 64"):
        table(records)


def test_a_partial_run_judges_only_the_goals_it_ran() -> None:
    goals = [g for g in GOALS if set(g.needs) <= {"srmp-recoverable"}]
    lines = table([_rec("srmp-recoverable", 4_000, 10_000)], goals).splitlines()[2:]
    assert len(lines) == 1 and lines[0].endswith("| 64 | 0.40 (4,000 vs 10,000/s) | yes |")


def test_a_record_that_stored_less_than_it_acknowledged_does_not_meet_its_goal() -> None:
    records = [{**r, "check": "FAILED: stored 10 != acknowledged 12"}
               if r["scenario"] == "rest-express" else r for r in RECORDS]
    assert _rows(records)["rest-express"].endswith("| **no** (FAILED: stored 10 != "
                                                   "acknowledged 12) |")


def test_command_line(tmp_path: Path) -> None:
    results = tmp_path / "out.json"
    results.write_text(json.dumps({"records": RECORDS}))
    run = [sys.executable, "-m", "bench.goals"]
    done = subprocess.run([*run, str(results)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and "| `store-commit` |" in done.stdout
    bad = subprocess.run([*run, str(tmp_path / "missing.json")], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "missing.json" in bad.stderr
    results.write_text(json.dumps({"records": RECORDS[1:]}))
    partial = subprocess.run([*run, str(results)], cwd=REPO_ROOT, capture_output=True,
                             text=True, timeout=60)
    assert partial.returncode == 1 and "ceiling-fsync" not in partial.stdout
    assert "no record: ceiling-fsync at C = 64" in partial.stderr


def test_p99_is_judged_against_the_fsync_ceiling_measured_around_the_run() -> None:
    records = [_rec("ceiling-fsync", 10_000, 10_000, p99=4.0),
               _rec("rest-recoverable", 5_500, 10_000, p99=9.0, fsync_p99_ms=5.0)]
    p99 = [g for g in GOALS if g.name == "rest-recoverable p99"]
    rows = {line.split("|")[1].strip(" `"): line for line in table(records, p99).splitlines()[2:]}
    assert "1.80x (9.0 vs 5.0 ms)" in rows["rest-recoverable p99"]
    assert rows["rest-recoverable p99"].endswith("| yes |")


def test_srmp_bench_ids_differ_between_runs_on_one_gateway() -> None:
    """Each concurrency level is a new load-generator run on the same gateway: repeated
    message ids would be answered as duplicates (no store commit) and flatter the figure."""
    from bench.loadgen import fill
    from bench.scenarios import SCENARIOS
    from gateway.srmp.codec import parse_request
    from gateway.srmp.model import parse_message_id

    scenario = next(s for s in SCENARIOS if s.name == "srmp-recoverable")
    assert scenario.body_factory is not None
    template = scenario.body_factory("http://127.0.0.1:1")
    content_type = scenario.headers["Content-Type"]
    ids = set()
    for run_id in (b"000000001", b"000000002"):
        for sequence in (1, 2):
            message = parse_request(content_type, fill(template, run_id, sequence, 1, sequence))
            ids.add(parse_message_id(message.envelope.path.id))
    assert len(ids) == 4
