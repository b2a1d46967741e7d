"""The performance goals (issue 11) checked against one bench run's records.

    python -m bench.goals out.json        # a Markdown table: goal, measured, met

Each goal is a ratio to a ceiling of the same run (or an absolute figure where the goal is
one), at C = 64 unless it says otherwise. ``python -m bench`` prints the table at its end.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Record = dict[str, Any]


@dataclass(frozen=True)
class Goal:
    name: str
    what: str
    target: str
    measure: Callable[[Sequence[Record]], tuple[float, str] | None]  # (value, shown) or None
    met: Callable[[float], bool]


def _at(records: Sequence[Record], scenario: str, concurrency: int = 64) -> Record | None:
    for record in records:
        if record["scenario"] == scenario and record.get("concurrency") in (concurrency, None):
            return record
    for record in records:  # in-process scenarios run at their own level (spark: 2)
        if record["scenario"] == scenario:
            return record
    return None


def _ratio(scenario: str) -> Callable[[Sequence[Record]], tuple[float, str] | None]:
    def measure(records: Sequence[Record]) -> tuple[float, str] | None:
        record = _at(records, scenario)
        if record is None:
            return None
        return float(record["ratio"]), (f"{record['ratio']:.2f} ({record['msgs_per_s']:,.0f} "
                                        f"vs {record['ceiling_msgs_per_s']:,.0f}/s)")
    return measure


def _batch(records: Sequence[Record]) -> tuple[float, str] | None:
    batch, single = _at(records, "rest-batch10"), _at(records, "rest-recoverable")
    if batch is None or single is None:
        return None
    times = batch["msgs_per_s"] / single["msgs_per_s"]
    return times, f"{times:.2f}x ({batch['msgs_per_s']:,.0f} vs {single['msgs_per_s']:,.0f}/s)"


def _p99(records: Sequence[Record]) -> tuple[float, str] | None:
    """Against the fsync ceiling's p99 measured around rest-recoverable's own run (runs
    before that field existed: the fsync ceiling's record)."""
    rest, fsync = _at(records, "rest-recoverable"), _at(records, "ceiling-fsync")
    if rest is None:
        return None
    ceiling = rest.get("fsync_p99_ms") or (fsync["p99_ms"] if fsync is not None else 0)
    if not ceiling:
        return None
    times = rest["p99_ms"] / ceiling
    return times, f"{times:.2f}x ({rest['p99_ms']:.1f} vs {ceiling:.1f} ms)"


def _field(scenario: str, field: str, unit: str
           ) -> Callable[[Sequence[Record]], tuple[float, str] | None]:
    def measure(records: Sequence[Record]) -> tuple[float, str] | None:
        record = _at(records, scenario)
        if record is None or field not in record:
            return None
        value = float(record[field])
        return value, f"{value:,.{0 if value >= 100 else 2}f} {unit}"
    return measure


GOALS = [
    Goal("rest-recoverable", "REST send, recoverable", ">= 0.5 of nostore",
         _ratio("rest-recoverable"), lambda v: v >= 0.5),
    Goal("rest-express", "REST send, express", ">= 0.7 of nostore", _ratio("rest-express"),
         lambda v: v >= 0.7),
    Goal("rest-batch10", "REST batch of 10, messages/s", ">= 2x rest-recoverable", _batch,
         lambda v: v >= 2.0),
    Goal("srmp-recoverable", "SRMP send", ">= 0.35 of nostore", _ratio("srmp-recoverable"),
         lambda v: v >= 0.35),
    Goal("srmp-stream", "SRMP stream send", ">= 0.35 of nostore", _ratio("srmp-stream"),
         lambda v: v >= 0.35),
    Goal("rest-receive", "receive (drain)", ">= 0.5 of nostore", _ratio("rest-receive"),
         lambda v: v >= 0.5),
    Goal("forward-tx", "forward A -> P, transactional", ">= 0.5 of A's ingest",
         _ratio("forward-tx"), lambda v: v >= 0.5),
    Goal("store-commit", "store commit alone", ">= 0.7 of write+fdatasync",
         _ratio("store-commit"), lambda v: v >= 0.7),
    Goal("recovery", "recovery after a crash", "<= 5 s per GiB",
         _field("recovery", "seconds_per_gib", "s/GiB"), lambda v: v <= 5.0),
    Goal("memory", "RSS per queued message", "<= 200 bytes",
         _field("memory", "bytes_per_message", "bytes"), lambda v: v <= 200),
    Goal("spark-ingest", "Spark ingest to Parquet", ">= 50,000 rows/s",
         _field("spark-ingest", "msgs_per_s", "rows/s"), lambda v: v >= 50_000),
    Goal("rest-recoverable p99", "latency", "<= 2x fsync ceiling's p99", _p99,
         lambda v: v <= 2.0),
]


def table(records: Sequence[Record]) -> str:
    lines = ["| scenario | what | goal (C = 64) | measured | met |", "|---|---|---|---|---|"]
    for goal in GOALS:
        measured = goal.measure(records)
        shown, met = ("not run", "-") if measured is None else (
            measured[1], "yes" if goal.met(measured[0]) else "**no**")
        lines.append(f"| `{goal.name}` | {goal.what} | {goal.target} | {shown} | {met} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.goals")
    parser.add_argument("results", type=Path, help="a JSON file written by python -m bench")
    args = parser.parse_args(argv)
    try:
        records = json.loads(args.results.read_text())
    except (OSError, ValueError) as exc:
        parser.error(f"cannot read {args.results}: {exc}")
    print(table(records))
    return 0


if __name__ == "__main__":
    sys.exit(main())
