"""Run every benchmark scenario and report ratios to the ceilings measured in the same run.

    python -m bench [--quick] [--json FILE] [--only NAME ...] [--concurrency 1,16,64]
                    [--contend CORES] [--client wrk|loadgen]

For each scenario and concurrency it prints msgs/s, p50, p99, the ratio to its ceiling and
whether the server stored what it acknowledged, then the goals table of what ran; it writes
the results file described in bench/README.md to FILE. The exit status is 1 when a scenario
stored something else than it acknowledged or a goal's record is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

from bench import wrk
from bench.contend import contention, split
from bench.goals import GOALS, MissingRecords
from bench.goals import table as goals_table
from bench.measure import failed, measure, warmup_for
from bench.scenarios import RECEIVE_PREFILL, SCENARIOS

# Scenarios measured inside one process (no HTTP load of their own), each a module printing
# JSON records; forward-tx drives its gateways with wrk.
IN_PROCESS = {"store-commit": "bench.store_commit", "recovery": "bench.store_recovery",
              "forward-tx": "bench.forward", "spark-ingest": "bench.spark_ingest"}
STORE_LEVELS = (1, 16, 64, 256)


def _requests_for(concurrency: int, quick: bool, override: int = 0) -> int:
    if override:
        return override
    base = {1: 2000, 16: 10000, 64: 20000}.get(concurrency, 20000)
    return base if quick else base * 3


def machine() -> dict[str, object]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"nproc": os.cpu_count(), "cpu_model": model, "kernel": platform.release(),
            "python": platform.python_version(), "machine": platform.machine()}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--quick", action="store_true", help="fewer requests (a few minutes)")
    parser.add_argument("--json", type=Path, help="write the results file here")
    parser.add_argument("--only", action="append", default=[], help="scenario name (repeatable)")
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--contend", type=float, default=0.0, metavar="CORES",
                        help="run beside a noisy neighbour taking this many cores' worth of "
                        "CPU (bench/contend.py); default 0")
    parser.add_argument("--client", choices=("wrk", "loadgen"), default="wrk",
                        help="HTTP load generator: wrk (the reference) or bench/loadgen.py")
    parser.add_argument("--requests", type=int, default=0, metavar="N",
                        help="measured requests a level of every HTTP scenario (default: "
                        "2,000 / 10,000 / 20,000 at C = 1 / 16 / 64, three times that "
                        "without --quick)")
    args = parser.parse_args()
    try:
        split(args.contend)
    except ValueError as exc:
        parser.error(str(exc))
    levels = [int(c) for c in args.concurrency.split(",")]
    if args.requests < 0:
        parser.error("--requests: expected a positive count")
    per_level = [_requests_for(c, args.quick, args.requests) for c in levels]
    RECEIVE_PREFILL["count"] = sum(n + warmup_for(n) for n in per_level) + 1000
    names = {s.name for s in SCENARIOS} | set(IN_PROCESS) | {"memory"}
    unknown = set(args.only) - names
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    try:
        wrk_version = wrk.version()
    except wrk.WrkError as exc:
        parser.error(str(exc))

    started = datetime.datetime.now(datetime.UTC)
    with contention(args.contend):
        records = _run(args, levels)
    for record in records:
        record["contend_cores"] = args.contend
    status = 0
    ran = {r["scenario"] for r in records}
    covered = [g for g in GOALS if set(g.needs) <= ran]
    try:
        if covered:
            print(goals_table(records, covered))
    except MissingRecords as exc:
        print(f"goals: {exc}", file=sys.stderr)
        status = 1
    bad = [f"{r['scenario']} at C = {r['concurrency']}: {r['check']}"
           for r in records if failed(r)]
    for line in bad:
        print(f"stored != acknowledged: {line}", file=sys.stderr)
    if args.json:
        document = {
            "date": started.isoformat(timespec="seconds"),
            "command": "python -m bench " + shlex.join(sys.argv[1:]),
            "machine": machine(), "wrk_version": wrk_version, "client": args.client,
            "quick": args.quick, "contend_cores": args.contend,
            "elapsed_s": round((datetime.datetime.now(datetime.UTC) - started)
                               .total_seconds()),
            "failed": bad, "records": records}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 1 if bad else status


def _run(args: argparse.Namespace, levels: list[int]) -> list[dict[str, object]]:
    # Ceilings first (their own records), then every other scenario, each measurement between
    # two of its ceiling's, taken on the ceiling server kept running: on a VM whose neighbours
    # come and go, a ceiling measured minutes before drifts, and the ratio with it.
    records: list[dict[str, object]] = []
    selected = [s for s in SCENARIOS if not args.only or s.name in args.only]
    if any(not s.is_ceiling for s in selected):  # the HTTP scenarios' ceilings run with them
        selected = [s for s in SCENARIOS if s in selected or s.is_ceiling]
    started = time.monotonic()
    print(f"{'scenario':<22}{'C':>4}{'msgs/s':>11}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'ceiling':>11}{'ratio':>7}  vs       stored == acknowledged")
    with contextlib.ExitStack() as stack:
        ceilings = {s.ceiling_of: (s, stack.enter_context(s.server()))
                    for s in selected if s.is_ceiling}
        for scenario in selected:
            with (contextlib.nullcontext(ceilings[scenario.ceiling_of][1]) if scenario.is_ceiling
                  else scenario.server()) as url:
                for concurrency in levels:
                    requests = _requests_for(concurrency, args.quick, args.requests)
                    record = measure(scenario, url, concurrency, requests, ceilings,
                                     args.client)
                    records.append(record)
                    print(f"{scenario.name:<22}{concurrency:>4}{record['msgs_per_s']:>11.0f}"
                          f"{record['p50_ms']:>9.2f}{record['p99_ms']:>9.2f}"
                          f"{record['ceiling_msgs_per_s']:>11.0f}{record['ratio']:>7.2f}"
                          f"  {scenario.compare_to:<8} {record['check']}", flush=True)
    for name, module in IN_PROCESS.items():
        if args.only and name not in args.only and not (name == "recovery"
                                                         and "memory" in args.only):
            continue
        extra = (["--mib", "64" if args.quick else "1024",
                  "--messages", "100000" if args.quick else "1000000"]
                 if name == "recovery" else [])
        levels_arg = ("64" if name == "forward-tx" else "2" if name == "spark-ingest"
                      else ",".join(map(str, STORE_LEVELS)))
        # store-commit takes 60,000 appends a level (fewer at C < 30) even when quick: fewer
        # last only milliseconds, too short for a stable ratio (bench/store_commit.py
        # alternates it with its ceiling). spark-ingest always moves 200,000 orders (x 50).
        requests = (60000 if name == "store-commit" else 4000 if name == "spark-ingest"
                    else 20000 if not args.quick else 3000)
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
                  f"  {record['ceiling']:<8} {record.get('check', 'not checked')}", flush=True)
    elapsed = time.monotonic() - started
    beside = f", beside a neighbour taking {args.contend} cores" if args.contend else ""
    print(f"done in {elapsed:.0f}s on {platform.node()} ({platform.machine()}, "
          f"Python {platform.python_version()}){beside}")
    return records


if __name__ == "__main__":
    raise SystemExit(main())
