"""The performance goals (docs/performance.md) checked against one bench run's records.

    python -m bench.goals out.json        # a Markdown table: goal, C judged, measured, met

Each goal is a ratio to a ceiling of the same run (or an absolute figure where the goal is
one), judged on the record at the concurrency it names (C = 64 unless it says otherwise): a
record at another level never stands in, and a missing one is an error (``MissingRecords``,
exit status 1), not a row saying "not run". A record whose stored == acknowledged check failed
does not meet its goal. ``python -m bench`` prints the table of the goals its run covered.
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


class MissingRecords(LookupError):
    """Goals that cannot be judged: the records they need are not in the run."""


@dataclass(frozen=True)
class Goal:
    name: str
    what: str
    target: str
    measure: Callable[[Sequence[Record]], tuple[float, str]]  # (value, shown)
    met: Callable[[float], bool]
    needs: tuple[str, ...]  # the scenarios whose records it reads
    concurrency: int = 64  # the level judged; 0 for a figure with no level (recovery, memory)


def _at(records: Sequence[Record], scenario: str, concurrency: int = 64) -> Record:
    for record in records:
        if record["scenario"] == scenario and record.get("concurrency") == concurrency:
            return record
    raise MissingRecords(f"no record: {scenario} at C = {concurrency}")


def _ratio(scenario: str, concurrency: int = 64
           ) -> Callable[[Sequence[Record]], tuple[float, str]]:
    def measure(records: Sequence[Record]) -> tuple[float, str]:
        record = _at(records, scenario, concurrency)
        return float(record["ratio"]), (f"{record['ratio']:.2f} ({record['msgs_per_s']:,.0f} "
                                        f"vs {record['ceiling_msgs_per_s']:,.0f}/s)")
    return measure


def _wall(scenario: str) -> Callable[[Sequence[Record]], tuple[float, str]]:
    """A ratio of wall clocks (the ceiling's over the scenario's), judged on local[2]."""
    def measure(records: Sequence[Record]) -> tuple[float, str]:
        record = _at(records, scenario, 2)
        return float(record["ratio"]), (f"{record['ratio']:.2f} ({record['wall_s']:.1f} s vs "
                                        f"{record['ceiling_wall_s']:.1f} s; "
                                        f"{record['msgs_per_s']:,.0f} rows/s)")
    return measure


def _batch(records: Sequence[Record]) -> tuple[float, str]:
    batch, single = _at(records, "rest-batch10"), _at(records, "rest-recoverable")
    times = batch["msgs_per_s"] / single["msgs_per_s"]
    return times, f"{times:.2f}x ({batch['msgs_per_s']:,.0f} vs {single['msgs_per_s']:,.0f}/s)"


def _p99(records: Sequence[Record]) -> tuple[float, str]:
    """Against the fsync ceiling's p99 measured around rest-recoverable's own run (records
    without that field: the fsync ceiling's record at the same level)."""
    rest = _at(records, "rest-recoverable")
    ceiling = rest.get("fsync_p99_ms") or _at(records, "ceiling-fsync")["p99_ms"]
    times = rest["p99_ms"] / ceiling
    return times, f"{times:.2f}x ({rest['p99_ms']:.1f} vs {ceiling:.1f} ms)"


def _field(scenario: str, field: str, unit: str, concurrency: int
           ) -> Callable[[Sequence[Record]], tuple[float, str]]:
    def measure(records: Sequence[Record]) -> tuple[float, str]:
        record = _at(records, scenario, concurrency)
        if field not in record:
            raise MissingRecords(f"no {field} in the {scenario} record")
        value = float(record[field])
        return value, f"{value:,.{0 if value >= 100 else 2}f} {unit}"
    return measure


GOALS = [
    Goal("rest-recoverable", "REST send, recoverable", ">= 0.5 of nostore",
         _ratio("rest-recoverable"), lambda v: v >= 0.5, ("rest-recoverable",)),
    Goal("rest-express", "REST send, express", ">= 0.7 of nostore", _ratio("rest-express"),
         lambda v: v >= 0.7, ("rest-express",)),
    Goal("rest-batch10", "REST batch of 10, messages/s", ">= 2x rest-recoverable", _batch,
         lambda v: v >= 2.0, ("rest-batch10", "rest-recoverable")),
    Goal("srmp-recoverable", "SRMP send", ">= 0.35 of nostore", _ratio("srmp-recoverable"),
         lambda v: v >= 0.35, ("srmp-recoverable",)),
    Goal("srmp-stream", "SRMP stream send", ">= 0.35 of nostore", _ratio("srmp-stream"),
         lambda v: v >= 0.35, ("srmp-stream",)),
    Goal("rest-receive", "receive (drain)", ">= 0.5 of nostore", _ratio("rest-receive"),
         lambda v: v >= 0.5, ("rest-receive",)),
    Goal("forward-tx", "forward A -> P, transactional", ">= 0.5 of A's ingest alone",
         _ratio("forward-tx"), lambda v: v >= 0.5, ("forward-tx",)),
    Goal("store-commit", "store commit alone", ">= 0.7 of write+fdatasync",
         _ratio("store-commit"), lambda v: v >= 0.7, ("store-commit",)),
    Goal("recovery", "recovery after a crash, cold cache", "<= 5 s per GiB",
         _field("recovery", "seconds_per_gib", "s/GiB", 0), lambda v: v <= 5.0,
         ("recovery",), 0),
    Goal("memory", "RSS per queued message", "<= 200 bytes",
         _field("memory", "bytes_per_message", "bytes", 0), lambda v: v <= 200,
         ("memory",), 0),
    Goal("spark-ingest", "Spark ingest to Parquet, wall clock, 200,000 varied rows",
         ">= 0.8 of Spark's file source", _wall("spark-ingest"), lambda v: v >= 0.8,
         ("spark-ingest",), 2),
    Goal("rest-recoverable p99", "latency", "<= 2x fsync ceiling's p99", _p99,
         lambda v: v <= 2.0, ("rest-recoverable",)),
    # server.workers = 2: two front processes around the store owner (docs/architecture.md)
    Goal("rest-recoverable-w2", "REST send, recoverable, 2 fronts", ">= 0.6 of nostore",
         _ratio("rest-recoverable-w2"), lambda v: v >= 0.6, ("rest-recoverable-w2",)),
    Goal("rest-express-w2", "REST send, express, 2 fronts", ">= 0.7 of nostore",
         _ratio("rest-express-w2"), lambda v: v >= 0.7, ("rest-express-w2",)),
    Goal("srmp-recoverable-w2", "SRMP send, 2 fronts", ">= 0.4 of nostore",
         _ratio("srmp-recoverable-w2"), lambda v: v >= 0.4, ("srmp-recoverable-w2",)),
    Goal("owner CPU", "store owner's CPU per REST recoverable send, 2 fronts", "<= 15 us",
         _field("rest-recoverable-w2", "cpu_us_per_msg", "us", 64), lambda v: v <= 15,
         ("rest-recoverable-w2",)),
]


def _failed_check(records: Sequence[Record], goal: Goal) -> str | None:
    for name in goal.needs:
        record = _at(records, name, goal.concurrency)
        if str(record.get("check", "")).startswith("FAILED"):
            return str(record["check"])
    return None


def table(records: Sequence[Record], goals: Sequence[Goal] = GOALS) -> str:
    """The Markdown table of ``goals``. Raises: MissingRecords naming every record missing."""
    lines = ["| scenario | what | goal | C | measured | met |", "|---|---|---|---|---|---|"]
    missing = []
    for goal in goals:
        try:
            value, shown = goal.measure(records)
            failed = _failed_check(records, goal)
        except MissingRecords as exc:
            missing.append(f"{goal.name}: {exc}")
            continue
        met = (f"**no** ({failed})" if failed else "yes" if goal.met(value) else "**no**")
        level = goal.concurrency or "-"
        lines.append(f"| `{goal.name}` | {goal.what} | {goal.target} | {level} | {shown} "
                     f"| {met} |")
    if missing:
        raise MissingRecords("; ".join(missing))
    return "\n".join(lines)


def records_of(document: object) -> list[Record]:
    """The records of a results file: ``{"records": [...], ...}`` (or a bare list)."""
    records = document.get("records") if isinstance(document, dict) else document
    if not isinstance(records, list):
        raise ValueError("expected a results object with a list of records")
    return records


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.goals")
    parser.add_argument("results", type=Path, help="a JSON file written by python -m bench")
    args = parser.parse_args(argv)
    try:
        records = records_of(json.loads(args.results.read_text()))
    except (OSError, ValueError) as exc:
        parser.error(f"cannot read {args.results}: {exc}")
    try:
        print(table(records))
    except MissingRecords as exc:
        print(f"python -m bench.goals: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
