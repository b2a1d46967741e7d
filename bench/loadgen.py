"""Closed-loop HTTP load generator, run in its own process so it never shares a loop with a server.

    python -m bench.loadgen --url URL --concurrency 64 --requests 5000 --body-size 1024

Prints one JSON object: count, errors, statuses, elapsed_s, msgs_per_s, p50_ms, p99_ms.

With ``--template`` the body file may hold fixed-width tokens replaced in each request (so
lengths inside the body, e.g. SRMP's MIME Content-Length, stay right): ``#SEQ#####`` a
request counter, ``#WRK#####`` the worker's number, ``#CUR#####`` the worker's own counter
from 1 (one in-order SRMP stream per worker), ``#RUN#####`` a number fixed for the run.
Latencies are kept exactly (one float per request) and percentiles use the nearest rank.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from collections import Counter

import aiohttp
import uvloop


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return float("nan")
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def fill(body: bytes, run_id: bytes, sequence: int, worker: int, own: int) -> bytes:
    """The template's tokens replaced (each by 9 digits: lengths in the body stay right)."""
    return (body.replace(b"#RUN#####", run_id)
            .replace(b"#SEQ#####", b"%09d" % sequence)
            .replace(b"#WRK#####", b"%09d" % worker)
            .replace(b"#CUR#####", b"%09d" % own))


async def run(args: argparse.Namespace) -> dict[str, object]:
    if args.body_file:
        with open(args.body_file, "rb") as handle:
            body = handle.read()
    else:
        body = os.urandom(args.body_size) if args.body_size else b""
    headers = dict(h.split(":", 1) for h in args.header)
    headers = {k.strip(): v.strip() for k, v in headers.items()}
    connector = aiohttp.TCPConnector(limit=args.concurrency, force_close=False)
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    errors = 0
    remaining = args.warmup + args.requests
    counting_after = args.requests

    async with aiohttp.ClientSession(connector=connector) as session:

        sequence = 0
        run_id = b"%09d" % (int.from_bytes(os.urandom(4), "big") % 10**9)

        async def worker(number: int) -> None:
            nonlocal remaining, errors, sequence
            own = 0
            while remaining > 0:
                remaining -= 1
                counted = remaining < counting_after
                data = body
                if args.template:
                    sequence += 1
                    own += 1
                    data = fill(body, run_id, sequence, number, own)
                started = time.perf_counter()
                try:
                    async with session.request(args.method, args.url, data=data or None,
                                               headers=headers) as response:
                        await response.read()
                        status = response.status
                except aiohttp.ClientError:
                    errors += 1
                    continue
                if counted:
                    latencies.append(time.perf_counter() - started)
                    statuses[status] += 1

        # Warm-up requests run first, on all workers, and are not counted.
        started = time.perf_counter()
        await asyncio.gather(*(worker(n) for n in range(1, args.concurrency + 1)))
        elapsed = time.perf_counter() - started

    latencies.sort()
    # Throughput is measured over the counted requests only: subtract the warm-up share.
    counted = len(latencies)
    total = counted + args.warmup
    measured_elapsed = elapsed * counted / total if total else elapsed
    ok = sum(n for status, n in statuses.items() if 200 <= status < 300)
    return {
        "count": counted,
        "ok": ok,
        "errors": errors,
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "elapsed_s": round(measured_elapsed, 4),
        "msgs_per_s": round(ok / measured_elapsed, 1) if measured_elapsed else 0.0,
        "p50_ms": round(percentile(latencies, 0.50) * 1000, 3),
        "p99_ms": round(percentile(latencies, 0.99) * 1000, 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.loadgen")
    parser.add_argument("--url", required=True)
    parser.add_argument("--method", default="POST")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--body-size", type=int, default=1024)
    parser.add_argument("--header", action="append", default=[], help="NAME: VALUE")
    parser.add_argument("--body-file", help="send this file's bytes as every body")
    parser.add_argument("--template", action="store_true",
                        help="replace the #SEQ#####, #WRK##### and #CUR##### tokens per request")
    args = parser.parse_args()
    result = uvloop.run(run(args))
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
