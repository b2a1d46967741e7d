"""``python -m tests.torture [--quick] [--only NAME] [--json FILE]``: run the torture
scenarios and write one JSON report (docs/testing.md §Torture scenarios describes them).

Scenarios: ``crash-loop`` (200 SIGKILL cycles; 20 with --quick), ``damaged-files`` (20 rounds
of bit flips and truncations; 4), ``disk-full`` (a tmpfs filled up and freed; needs root to
mount, reported as skipped otherwise), ``fuzz`` (100,000 mutated requests; 10,000), ``abuse`` (5,000 idle connections, 200 slow
clients, oversized headers and bodies; 2,000 idle), ``network-faults`` (A -> F -> P through
fault proxies dropping, duplicating and delaying requests and responses, each gateway killed
once: 20,000 transactional messages, twice F's duplicate window, then A -> P with both
killed: 10,000; 2,000 and 1,000), ``soak`` (30 minutes at half the measured maximum
rate with a receiver draining, RSS and p99 sampled and plotted to soak.png; 2 minutes). Exit 0 when every invariant held, 1 when one broke.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.crash.test_links_crash import links_under_faults
from tests.torture import abuse, crash_loop, damage, disk_full, fuzz, soak


def _scenarios(quick: bool, report: Path) -> dict[str, Callable[[Path], dict[str, Any]]]:
    return {
        "crash-loop": lambda tmp: crash_loop.run(tmp / "data", cycles=20 if quick else 200),
        "damaged-files": lambda tmp: damage.run(tmp, rounds=4 if quick else 20),
        "disk-full": lambda tmp: disk_full.run(tmp / "mnt"),
        "fuzz": lambda tmp: fuzz.run(tmp / "data", cases=10_000 if quick else 100_000),
        "abuse": lambda tmp: abuse.run(tmp / "data", idle=2000 if quick else 5000),
        "network-faults": lambda tmp: _network_faults(tmp, quick),
        "soak": lambda tmp: soak.run(tmp / "data", 120 if quick else 1800,
                                     report.with_name("soak.png")),
    }


def _network_faults(tmp: Path, quick: bool) -> dict[str, Any]:
    """Three gateways (A -> F -> P), then two (A -> P), each through fault proxies."""
    three = asyncio.run(links_under_faults(tmp / "three", 2000 if quick else 20_000))
    two = asyncio.run(links_under_faults(tmp / "two", 1000 if quick else 10_000, gateways=2))
    return {**three, "two_gateways": two}


def _clip(text: str, head: int = 600, tail: int = 3000) -> str:
    """A violation's start (what failed) and end (a gateway log's last lines say why)."""
    if len(text) <= head + tail:
        return text
    return f"{text[:head]} [... {len(text) - head - tail} characters ...] {text[-tail:]}"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.torture")
    parser.add_argument("--quick", action="store_true", help="a few minutes instead of ~20")
    parser.add_argument("--only", action="append", default=[], help="scenario (repeatable)")
    parser.add_argument("--json", type=Path, default=Path("var/torture/report.json"))
    args = parser.parse_args()
    scenarios = _scenarios(args.quick, args.json)
    unknown = set(args.only) - set(scenarios)
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    results: list[dict[str, Any]] = []
    failed = False
    for name, scenario in scenarios.items():
        if args.only and name not in args.only:
            continue
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"torture-{name}-", dir=_scratch()) as tmp:
            try:
                result = scenario(Path(tmp))
                result["ok"] = True
            except RuntimeError as exc:  # the machine cannot run it (mount)
                result = {"scenario": name, "skipped": str(exc)}
            except AssertionError as exc:
                result = {"scenario": name, "ok": False, "violation": _clip(str(exc))}
                failed = True
        result["seconds"] = round(time.monotonic() - started, 1)
        results.append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "injected"}), flush=True)
    report = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "machine": f"{platform.node()} {platform.machine()}, Python "
                         f"{platform.python_version()}",
              "quick": args.quick,
              "peak_rss_kib_children": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
              "scenarios": results}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"report: {args.json}")
    return 1 if failed else 0


def _scratch() -> str:
    path = Path("var/torture")
    path.mkdir(parents=True, exist_ok=True)
    return str(path)


if __name__ == "__main__":
    sys.exit(main())

