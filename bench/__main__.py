"""Run every benchmark scenario and report ratios to the ceilings measured in the same run.

    python -m bench [--quick] [--json FILE] [--only NAME ...] [--concurrency 1,16,64]
                    [--contend CORES]

For each scenario and concurrency it prints msgs/s, p50, p99 and the ratio to its ceiling, and
writes the records described in bench/README.md to FILE.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import tempfile
import subprocess
import sys
import time
from pathlib import Path

from bench.contend import contention, split
from bench.goals import table as goals_table
from bench.scenarios import RECEIVE_PREFILL, SCENARIOS, Scenario

# Scenarios measured inside one process (no HTTP), each a module printing JSON records.
IN_PROCESS = {"store-commit": "bench.store_commit", "recovery": "bench.store_recovery",
              "forward-tx": "bench.forward", "spark-ingest": "bench.spark_ingest"}
STORE_LEVELS = (1, 16, 64, 256)


def _loadgen(url: str, scenario: Scenario, concurrency: int, requests: int) -> dict[str, object]:
    args = [sys.executable, "-m", "bench.loadgen", "--url", url + scenario.path,
            "--method", scenario.method, "--concurrency", str(concurrency),
            "--requests", str(requests), "--warmup", str(min(500, max(50, requests // 10))),
            "--body-size", str(scenario.body_size)]
    for name, value in scenario.headers.items():
        args += ["--header", f"{name}: {value}"]
    body = scenario.body_factory(url) if scenario.body_factory else scenario.body
    if body is not None:
        body_file = Path(tempfile.mkdtemp()) / "body"
        body_file.write_bytes(body)
        args += ["--body-file", str(body_file)]
    if scenario.body_factory is not None:
        args += ["--template"]
    out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=600)
    result: dict[str, object] = json.loads(out.stdout)
    return result


def _measure(scenario: Scenario, url: str, concurrency: int, requests: int,
             ceilings: dict[str, tuple[Scenario, str]]) -> dict[str, object]:
    """One scenario at one concurrency, as a record; its ceiling is measured just before and
    just after it (a ceiling's own record is its one measurement). ``rest-recoverable`` also
    gets the fsync ceiling's p99 the same way, for the latency goal."""
    def ceiling(name: str) -> tuple[float, float]:
        ceiling_scenario, ceiling_url = ceilings[name]
        result = _loadgen(ceiling_url, ceiling_scenario, concurrency, requests)
        return float(result["msgs_per_s"]), float(result["p99_ms"])  # type: ignore[arg-type]

    paired = not scenario.is_ceiling
    before = ceiling(scenario.compare_to) if paired else None
    fsync_before = ceiling("fsync") if scenario.name == "rest-recoverable" else None
    result = _loadgen(url, scenario, concurrency, requests)
    rate = float(result["msgs_per_s"]) * scenario.messages_per_request  # type: ignore[arg-type]
    runs = [(rate, float(result["p99_ms"]))]  # type: ignore[arg-type]
    if before is not None:
        runs = [before, ceiling(scenario.compare_to)]
    ceiling_rate = sum(r for r, _ in runs) / len(runs)
    record: dict[str, object] = {
        "scenario": scenario.name,
        "concurrency": concurrency,
        "msgs_per_s": rate,
        "p50_ms": result["p50_ms"],
        "p99_ms": result["p99_ms"],
        "ceiling": scenario.compare_to,
        "ceiling_msgs_per_s": round(ceiling_rate, 1),
        "ceiling_p99_ms": round(sum(p for _, p in runs) / len(runs), 3),
        "ceiling_runs": [r for r, _ in runs],
        "ratio": round(rate / ceiling_rate, 3) if ceiling_rate else 0.0,
        "requests": result["count"],
        "errors": result["errors"],
        "statuses": result["statuses"],
    }
    if fsync_before is not None:
        fsync_after = ceiling("fsync")
        record["fsync_p99_ms"] = round((fsync_before[1] + fsync_after[1]) / 2, 3)
    return record


def _requests_for(concurrency: int, quick: bool) -> int:
    base = {1: 1000, 16: 3000, 64: 5000}.get(concurrency, 5000)
    return base if quick else base * 6


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="fewer requests (about a minute)")
    parser.add_argument("--json", type=Path, help="write the records to this file")
    parser.add_argument("--only", action="append", default=[], help="scenario name (repeatable)")
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--contend", type=float, default=0.0, metavar="CORES",
                        help="run beside a noisy neighbour taking this many cores' worth of "
                        "CPU (bench/contend.py); default 0")
    args = parser.parse_args()
    try:
        split(args.contend)
    except ValueError as exc:
        parser.error(str(exc))
    levels = [int(c) for c in args.concurrency.split(",")]
    RECEIVE_PREFILL["count"] = sum(_requests_for(c, args.quick) + 500 for c in levels) + 1000
    unknown = set(args.only) - {s.name for s in SCENARIOS} - set(IN_PROCESS) - {"memory"}
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")

    with contention(args.contend):
        records = _run(args, levels)
    for record in records:
        record["contend_cores"] = args.contend
    print(goals_table(records))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(records, indent=2) + "\n")
    return 0


def _run(args: argparse.Namespace, levels: list[int]) -> list[dict[str, object]]:
    # Ceilings first (their own records), then every other scenario, each measurement between
    # two of its ceiling's, taken on the ceiling server kept running: on a VM whose neighbours
    # come and go, a ceiling measured minutes before drifted by up to 25% (no-store 12,821 -
    # 19,198 req/s in three runs of one session), and the ratio with it.
    records: list[dict[str, object]] = []
    selected = [s for s in SCENARIOS if not args.only or s.name in args.only or s.is_ceiling]
    started = time.monotonic()
    print(f"{'scenario':<22}{'C':>4}{'msgs/s':>11}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'ceiling':>11}{'ratio':>7}  vs")
    with contextlib.ExitStack() as stack:
        ceilings = {s.ceiling_of: (s, stack.enter_context(s.server()))
                    for s in selected if s.is_ceiling}
        for scenario in selected:
            with (contextlib.nullcontext(ceilings[scenario.ceiling_of][1]) if scenario.is_ceiling
                  else scenario.server()) as url:
                for concurrency in levels:
                    requests = _requests_for(concurrency, args.quick)
                    record = _measure(scenario, url, concurrency, requests, ceilings)
                    records.append(record)
                    print(f"{scenario.name:<22}{concurrency:>4}{record['msgs_per_s']:>11.0f}"
                          f"{record['p50_ms']:>9.2f}{record['p99_ms']:>9.2f}"
                          f"{record['ceiling_msgs_per_s']:>11.0f}{record['ratio']:>7.2f}"
                          f"  {scenario.compare_to}", flush=True)
    for name, module in IN_PROCESS.items():
        if args.only and name not in args.only and not (name == "recovery"
                                                         and "memory" in args.only):
            continue
        extra = (["--mib", "64" if args.quick else "1024",
                  "--messages", "100000" if args.quick else "1000000"]
                 if name == "recovery" else [])
        levels_arg = ("64" if name == "forward-tx" else "2" if name == "spark-ingest"
                      else ",".join(map(str, STORE_LEVELS)))
        # store-commit takes 60,000 appends a level (fewer at C < 30) even when quick: 3,000
        # at C = 64 lasted ~35 ms, 20,000 ~0.15 s, and its ratio moved 0.53-0.85 between
        # runs of the same code (bench/store_commit.py alternates it with its ceiling).
        requests = (60000 if name == "store-commit" else 20000 if not args.quick else 3000)
        out = subprocess.run(
            [sys.executable, "-m", module, "--levels", levels_arg,
             "--requests", str(requests), *extra],
            check=True, capture_output=True, text=True, timeout=1800)
        for record in json.loads(out.stdout):
            records.append(record)
            if record["scenario"] in ("recovery", "memory"):
                figure = (f"{record['seconds_per_gib']} s/GiB (goal <= 5)"
                          if record["scenario"] == "recovery"
                          else f"{record['bytes_per_message']} B/message (goal <= 200)")
                print(f"{record['scenario']:<22}  {figure}; ratio {record['ratio']} "
                      f"to {record['ceiling']}", flush=True)
                continue
            print(f"{record['scenario']:<22}{record['concurrency']:>4}"
                  f"{record['msgs_per_s']:>11.0f}{record['p50_ms']:>9.2f}{record['p99_ms']:>9.2f}"
                  f"{record['ceiling_msgs_per_s']:>11.0f}{record['ratio']:>7.2f}"
                  f"  {record['ceiling']}", flush=True)
    elapsed = time.monotonic() - started
    beside = f", beside a neighbour taking {args.contend} cores" if args.contend else ""
    print(f"done in {elapsed:.0f}s on {platform.node()} ({platform.machine()}, "
          f"Python {platform.python_version()}){beside}")
    return records


if __name__ == "__main__":
    raise SystemExit(main())
