"""The tables of docs/performance.md, printed from results files of ``python -m bench``.

    python -m bench.report bench/results/quick.json [MORE.json ...]

For each file, a line saying how and where the run was made (its command, date, machine, wrk
version), then one row per scenario and concurrency (rate, ceiling, ratio, latency,
acknowledged and stored); then the goals table of what the runs covered (``bench.goals``),
a later file's record standing for the same scenario and level of an earlier one. Every
figure comes from the files; the exit status is 1 when a goal's record is missing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.goals import GOALS, MissingRecords, Record, records_of
from bench.goals import table as goals_table


def _count(value: object) -> str:
    return "-" if value is None else f"{int(value):,}"  # type: ignore[call-overload]


def _ms(record: Record, key: str) -> str:
    return f"{record[key]:.2f}" if key in record and record["scenario"] not in (
        "recovery", "memory") else "-"


def _rate(record: Record) -> str:
    if record["scenario"] == "recovery":
        return f"{record['seconds_per_gib']:.2f} s/GiB"
    if record["scenario"] == "memory":
        return f"{record['bytes_per_message']:,.0f} B/message"
    return f"{record['msgs_per_s']:,.0f}/s"


def _ceiling(record: Record) -> str:
    if record["scenario"] == "memory":
        return "goal 200 B"
    if "ceiling_msgs_per_s" not in record:
        return record.get("ceiling", "-")  # type: ignore[no-any-return]
    return f"{record.get('ceiling', '')} {record['ceiling_msgs_per_s']:,.0f}/s".strip()


def _stored(record: Record) -> str:
    shown = _count(record.get("stored"))
    if str(record.get("check", "")).startswith("FAILED"):
        return f"**{shown} (FAILED)**"
    return shown


def scenarios_table(records: Sequence[Record]) -> str:
    lines = ["| scenario | C | rate | ceiling | ratio | p50 ms | p99 ms | acknowledged | stored |",
             "|---|---|---|---|---|---|---|---|---|"]
    for record in records:
        level = record.get("concurrency") or "-"
        lines.append(f"| `{record['scenario']}` | {level} | {_rate(record)} | "
                     f"{_ceiling(record)} | {record['ratio']:.2f} | {_ms(record, 'p50_ms')} | "
                     f"{_ms(record, 'p99_ms')} | {_count(record.get('acknowledged'))} | "
                     f"{_stored(record)} |")
    return "\n".join(lines)


def run_line(document: dict[str, Any]) -> str:
    machine = document.get("machine", {})
    contend = document.get("contend_cores") or 0
    beside = f", beside a neighbour taking {contend} cores" if contend else ""
    return (f"`{document.get('command', 'python -m bench')}`, {document.get('date', '?')}: "
            f"{machine.get('nproc', '?')} x {machine.get('cpu_model', '?')}, Linux "
            f"{machine.get('kernel', '?')}, Python {machine.get('python', '?')}, "
            f"{document.get('wrk_version', 'no wrk')} (client: {document.get('client', '?')})"
            f"{beside}; {document.get('elapsed_s', '?')} s.")


def report(*documents: dict[str, Any]) -> str:
    """Raises: MissingRecords when a goal of a scenario the runs covered has no record."""
    parts, latest = [], {}
    for document in documents:
        records = records_of(document)
        parts += [run_line(document), scenarios_table(records)]
        latest.update({(r["scenario"], r.get("concurrency")): r for r in records})
    merged = list(latest.values())
    ran = {r["scenario"] for r in merged}
    parts.append(goals_table(merged, [g for g in GOALS if set(g.needs) <= ran]))
    return "\n\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report")
    parser.add_argument("results", type=Path, nargs="+",
                        help="results files of python -m bench --json")
    args = parser.parse_args(argv)
    documents = []
    for path in args.results:
        try:
            document = json.loads(path.read_text())
            records_of(document)
        except (OSError, ValueError) as exc:
            parser.error(f"cannot read {path}: {exc}")
        documents.append(document if isinstance(document, dict) else {"records": document})
    try:
        print(report(*documents))
    except MissingRecords as exc:
        print(f"python -m bench.report: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
