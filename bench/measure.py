"""One HTTP scenario at one concurrency, as a record: its ceiling measured just before and just
after it, and what its server stored compared with what it acknowledged.

The client is wrk (``bench/wrk.py``) unless ``client="loadgen"`` (``bench/loadgen.py``, a
second client: on 2 cores it is itself the limit of the no-store ceiling, which flatters
every ratio to it). A warm-up run of the same client comes first; its answers count as
acknowledged too, not in the rate.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from dataclasses import replace
from pathlib import Path

from bench import cpu, servers, wrk
from bench.scenarios import Scenario

Ceilings = dict[str, tuple[Scenario, str]]


def warmup_for(requests: int) -> int:
    return min(500, max(50, requests // 10))


def client_run(url: str, scenario: Scenario, concurrency: int, requests: int,
               client: str = "wrk") -> dict[str, object]:
    """One closed-loop run of ``requests`` (no warm-up): loadgen's keys, ``ok`` = 2xx."""
    if client == "wrk":
        threads = concurrency if scenario.one_thread_per_connection else None
        return wrk.run(url + scenario.path, method=scenario.method, headers=scenario.headers,
                       body=scenario.template(url), concurrency=concurrency,
                       requests=requests, threads=threads)
    return _loadgen(url, scenario, concurrency, requests)


def _loadgen(url: str, scenario: Scenario, concurrency: int,
             requests: int) -> dict[str, object]:
    args = [sys.executable, "-m", "bench.loadgen", "--url", url + scenario.path,
            "--method", scenario.method, "--concurrency", str(concurrency),
            "--requests", str(requests), "--warmup", "0", "--template"]
    for name, value in scenario.headers.items():
        args += ["--header", f"{name}: {value}"]
    body = scenario.template(url)
    with tempfile.TemporaryDirectory(prefix="entrepot-loadgen-") as tmp:
        if body is not None:
            body_file = Path(tmp) / "body"
            body_file.write_bytes(body)
            args += ["--body-file", str(body_file)]
        else:
            args += ["--body-size", "0"]
        out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=900)
    result: dict[str, object] = json.loads(out.stdout)
    return result


def queue_count(url: str, queue: str) -> int:
    """Messages in ``queue`` now (``GET /v1/queues/NAME``)."""
    path = "/v1/queues/" + urllib.parse.quote(queue, safe="/")
    with urllib.request.urlopen(url + path, timeout=60) as response:
        return int(json.loads(response.read())["messages"])


def measure(scenario: Scenario, url: str, concurrency: int, requests: int,
            ceilings: Ceilings, client: str = "wrk") -> dict[str, object]:
    """One scenario at one concurrency, as a record; its ceiling is measured just before and
    just after it (a ceiling's own record is its one measurement). ``rest-recoverable`` also
    gets the fsync ceiling's p99 the same way, for the latency goal. ``check`` is ``ok`` when
    the server's queue moved by exactly what was acknowledged, ``FAILED: ...`` otherwise,
    ``not checked`` for a server that stores nothing countable."""
    def ceiling(name: str) -> tuple[float, float]:
        ceiling_scenario, ceiling_url = ceilings[name]
        # The same client shape as the scenario's; a bodiless GET (healthz) is compared with
        # the ceiling answering bodiless GETs.
        shaped = replace(ceiling_scenario,
                         one_thread_per_connection=scenario.one_thread_per_connection)
        if scenario.method == "GET" and not scenario.body_size:
            shaped = replace(shaped, method="GET", body_size=0)
        result = client_run(ceiling_url, shaped, concurrency, requests, client)
        return float(result["msgs_per_s"]), float(result["p99_ms"])  # type: ignore[arg-type]

    paired = not scenario.is_ceiling
    before = ceiling(scenario.compare_to) if paired else None
    fsync_before = ceiling("fsync") if scenario.name == "rest-recoverable" else None
    count_before = queue_count(url, scenario.stored_queue) if scenario.stored_queue else 0
    warmup = warmup_for(requests)
    warm = client_run(url, scenario, concurrency, warmup, client)
    # The server process when this run started it (a ceiling's CPU is not reported).
    pid = None if scenario.is_ceiling else servers.started_pid(url)
    cpu_before = cpu.snapshot(pid) if pid is not None else (0.0, 0.0)
    result = client_run(url, scenario, concurrency, requests, client)
    cpu_after = cpu.snapshot(pid) if pid is not None else (0.0, 0.0)
    acknowledged = (int(warm["ok"]) + int(result["ok"])) * scenario.messages_per_request  # type: ignore[call-overload]
    stored: int | None = None
    check = "not checked"
    if scenario.stored_queue:
        stored = (queue_count(url, scenario.stored_queue) - count_before) * scenario.stored_sign
        check = "ok" if stored == acknowledged else (
            f"FAILED: stored {stored} != acknowledged {acknowledged}")
    rate = float(result["msgs_per_s"]) * scenario.messages_per_request  # type: ignore[arg-type]
    runs = [(rate, float(result["p99_ms"]))]  # type: ignore[arg-type]
    if before is not None:
        runs = [before, ceiling(scenario.compare_to)]
    ceiling_rate = sum(r for r, _ in runs) / len(runs)
    record: dict[str, object] = {
        "scenario": scenario.name,
        "concurrency": concurrency,
        "client": client,
        "msgs_per_s": rate,
        "p50_ms": result["p50_ms"],
        "p99_ms": result["p99_ms"],
        "ceiling": scenario.compare_to,
        "ceiling_msgs_per_s": round(ceiling_rate, 1),
        "ceiling_p99_ms": round(sum(p for _, p in runs) / len(runs), 3),
        "ceiling_runs": [r for r, _ in runs],
        "ratio": round(rate / ceiling_rate, 3) if ceiling_rate else 0.0,
        "requests": result["count"],
        "warmup": warmup,
        "errors": int(warm["errors"]) + int(result["errors"]),  # type: ignore[call-overload]
        "statuses": result["statuses"],
        "acknowledged": acknowledged,
        "stored": stored,
        "check": check,
    }
    if pid is not None and result["count"]:
        # Per message stored (or request answered): the server process (the store owner
        # with server.workers > 1) and its children (the fronts).
        per = 1e6 / (int(result["count"]) * scenario.messages_per_request)  # type: ignore[call-overload]
        record["cpu_us_per_msg"] = round((cpu_after[0] - cpu_before[0]) * per, 1)
        record["children_cpu_us_per_msg"] = round((cpu_after[1] - cpu_before[1]) * per, 1)
        # Resident memory after the run: the server (the owner with fronts), each child.
        record["rss_kib"] = cpu.rss_kib(pid)
        record["children_rss_kib"] = [cpu.rss_kib(c) for c in cpu.children(pid)]
    if fsync_before is not None:
        fsync_after = ceiling("fsync")
        record["fsync_p99_ms"] = round((fsync_before[1] + fsync_after[1]) / 2, 3)
    return record


def failed(record: dict[str, object]) -> bool:
    return str(record.get("check", "")).startswith("FAILED")
