"""In-process benchmark of the store alone: ``store-commit``, against the in-process ceiling.

    python -m bench.store_commit --levels 1,16,64,256 --requests 60000

C coroutines each append a 1 KiB recoverable record and wait for it to be durable, in a closed
loop. The ceiling is the same closed loop against ``bench.ceiling.GroupCommitFile`` (one writer
thread, pwritev + one fdatasync per batch, futures resolved with call_soon_threadsafe), on the
same disk, in the same run. A level takes ``--requests`` appends (at most 2,000 x C),
split into three rounds; the ceiling's and the store's rounds alternate and each rate is
over its three rounds: a level lasts only a fraction of a second, and one measurement of
each, one after the other, would make the ratio follow the machine's drift rather than the
code (docs/performance.md §Method). Prints a JSON list of records (see bench/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import uvloop

from bench.ceiling import GroupCommitFile
from bench.loadgen import percentile
from bench.servers import REPO_ROOT
from store.message_store import MessageStore
from store.options import StoreOptions
from store.records import SendSpec

_ROUNDS = 3


async def closed_loop(op: Callable[[], Awaitable[object]], concurrency: int,
                      requests: int) -> tuple[float, list[float]]:
    """Seconds taken and each request's latency."""
    latencies: list[float] = []
    remaining = requests

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            started = time.perf_counter()
            await op()
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started, latencies


def _summary(elapsed: float, latencies: list[float]) -> dict[str, float]:
    latencies.sort()
    return {"msgs_per_s": round(len(latencies) / elapsed, 1),
            "p50_ms": round(percentile(latencies, 0.5) * 1000, 3),
            "p99_ms": round(percentile(latencies, 0.99) * 1000, 3)}


async def _alternate(ceiling_op: Callable[[], Awaitable[object]],
                     store_op: Callable[[], Awaitable[object]], concurrency: int,
                     requests: int) -> tuple[dict[str, float], dict[str, float]]:
    """Warm both up, then ``_ROUNDS`` rounds of the ceiling and the store, one after the
    other; each summary is over its rounds together."""
    per_round = max(concurrency, requests // _ROUNDS)
    await closed_loop(ceiling_op, concurrency, per_round // 3)
    await closed_loop(store_op, concurrency, per_round // 3)
    taken: dict[str, list[float]] = {"ceiling": [], "store": []}
    seconds = {"ceiling": 0.0, "store": 0.0}
    for _ in range(_ROUNDS):
        for name, op in (("ceiling", ceiling_op), ("store", store_op)):
            elapsed, latencies = await closed_loop(op, concurrency, per_round)
            seconds[name] += elapsed
            taken[name] += latencies
    return (_summary(seconds["ceiling"], taken["ceiling"]),
            _summary(seconds["store"], taken["store"]))


async def run(levels: list[int], requests: int) -> list[dict[str, object]]:
    body = os.urandom(1024)
    scratch = REPO_ROOT / "var" / "bench"
    scratch.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        ceiling_file = GroupCommitFile(Path(tmp) / "ceiling.dat")
        loop = asyncio.get_running_loop()
        store = await loop.run_in_executor(None, MessageStore.open, Path(tmp) / "data",
                                           StoreOptions())
        store.start(loop)
        try:
            for concurrency in levels:
                count = min(requests, 2000 * concurrency)
                ceiling, result = await _alternate(
                    lambda: ceiling_file.append(body), lambda: store.append(SendSpec(1, body)),
                    concurrency, count)
                records.append({
                    "scenario": "store-commit", "concurrency": concurrency,
                    "msgs_per_s": result["msgs_per_s"], "p50_ms": result["p50_ms"],
                    "p99_ms": result["p99_ms"], "ceiling": "fsync-inprocess",
                    "ceiling_msgs_per_s": ceiling["msgs_per_s"],
                    "ceiling_p99_ms": ceiling["p99_ms"],
                    "ratio": round(result["msgs_per_s"] / ceiling["msgs_per_s"], 3),
                    "requests": _measured(count, concurrency), "errors": 0,
                    "statuses": {},
                })
        finally:
            await loop.run_in_executor(None, store.close)
    return records


def _measured(count: int, concurrency: int) -> int:
    """Appends measured (warm-ups excluded) for a level asked ``count``."""
    return max(concurrency, count // _ROUNDS) * _ROUNDS


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.store_commit")
    parser.add_argument("--levels", default="1,16,64,256")
    parser.add_argument("--requests", type=int, default=60000)
    args = parser.parse_args()
    levels = [int(c) for c in args.levels.split(",")]
    print(json.dumps(uvloop.run(run(levels, args.requests))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
