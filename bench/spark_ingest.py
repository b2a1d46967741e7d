"""``spark-ingest`` as a data team sees it: wall-clock rows/s of ``entrepot spark-ingest
--available-now`` on ``local[2]``, from the process's start to its exit, beside Spark's own
file source moving the same rows into the same sink in the same conditions.

A real gateway is filled first (not timed) with varied JSON orders of 200 to 2,000 bytes.
Then, each as its own process and timed from its start to its exit (JVM and Python worker
start-up, planning and the first batch included):

- the ingest: ``entrepot spark-ingest --available-now --master local[2]`` into Parquet;
- the baseline: a PySpark streaming query with ``availableNow`` from Spark's Parquet file
  source over the ingest's own output (the same rows, the same columns) into a Parquet sink
  with the same options — what this Spark does without entrepot (bench.spark_file_source).

``ratio`` is the baseline's wall clock over the ingest's (1.0: as fast as Spark's file
source). The rows the ingest wrote are counted (they must equal the rows sent) and compared
body by body with what was sent, through a digest. A pair's ratio on this 2-core machine
moves by a tenth from one pair to the next (the JVM's start and warm-up), so the pair runs
``--rounds`` times (3), each on a fresh gateway, and the record is the round with the
median ratio; every round's figures are in ``rounds``.

    python -m bench.spark_ingest --requests 4000   # 200,000 orders
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import servers
from bench.forward import _json

BODY_MIN, BODY_MAX = 200, 2000
_QUEUE = "orders"
_BATCH = 1000  # messages per POST /v1/batch while filling


def orders(count: int, seed: int = 7) -> list[bytes]:
    """``count`` JSON orders of BODY_MIN..BODY_MAX bytes, different from each other."""
    rng = random.Random(seed)
    bodies = []
    for number in range(count):
        lines = [{"sku": f"SKU-{rng.randrange(10**6):06d}", "qty": rng.randrange(1, 50),
                  "price": round(rng.uniform(0.5, 900.0), 2)}
                 for _ in range(rng.randrange(1, 12))]
        order = {"order": number, "customer": f"C{rng.randrange(10**7):07d}",
                 "placed": 1_790_000_000_000 + number * 37, "lines": lines}
        body = json.dumps(order, separators=(",", ":")).encode()
        target = rng.randrange(BODY_MIN, BODY_MAX + 1)
        if len(body) < target:  # a note brings it to its size
            order["note"] = "".join(rng.choice("abcdefghij klmnop") for _ in
                                    range(target - len(body) - 10))
            body = json.dumps(order, separators=(",", ":")).encode()
        bodies.append(body[:BODY_MAX] if len(body) > BODY_MAX else body)
    return bodies


def _digest(bodies: list[bytes]) -> str:
    total = hashlib.sha256()
    for body in sorted(hashlib.sha256(b).digest() for b in bodies):
        total.update(body)
    return total.hexdigest()


def _fill(url: str, bodies: list[bytes]) -> None:
    import base64

    _json(f"{url}/v1/queues/{_QUEUE}", "PUT", {})
    for first in range(0, len(bodies), _BATCH):
        _json(f"{url}/v1/batch", "POST", {"messages": [
            {"queue": _QUEUE, "body_base64": base64.b64encode(b).decode()}
            for b in bodies[first:first + _BATCH]]})


def _timed(args: list[str]) -> float:
    started = time.monotonic()
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise RuntimeError(f"{args[:4]} exited {done.returncode}: {done.stderr[-2000:]}")
    return seconds


def _written(output: Path) -> tuple[int, str]:
    """Rows and the bodies' digest of a Parquet sink's committed files."""
    import pyarrow.parquet as pq

    bodies: list[bytes] = []
    for part in sorted(output.glob("*.parquet")):
        bodies.extend(pq.read_table(part, columns=["body"]).column("body").to_pylist())
    return len(bodies), _digest(bodies)


def run(messages: int, rounds: int = 3) -> dict[str, object]:
    """The record of the median round of ``rounds`` (ingest, then baseline)."""
    bodies = orders(messages)
    done = sorted((_round(bodies) for _ in range(rounds)), key=lambda r: float(r["ratio"]))
    record = dict(done[len(done) // 2])
    record["rounds"] = [{k: r[k] for k in ("ratio", "wall_s", "ceiling_wall_s")}
                        for r in done]
    return record


def _round(bodies: list[bytes]) -> dict[str, Any]:
    messages = len(bodies)
    scratch = Path(tempfile.mkdtemp(prefix="spark-bench-", dir=servers._scratch()))
    try:
        with servers.gateway() as url:
            _fill(url, bodies)
            ingest_s = _timed([
                sys.executable, "-m", "gateway", "spark-ingest", "--source", url,
                "--queue", _QUEUE, "--output", str(scratch / "out"),
                "--checkpoint", str(scratch / "ck"), "--master", "local[2]",
                "--available-now"])
        rows, digest = _written(scratch / "out")
        if rows != messages or digest != _digest(bodies):
            raise RuntimeError(f"the ingest wrote {rows} rows for {messages} sent "
                               "(or other bodies)")
        baseline_s = _timed([sys.executable, "-m", "bench.spark_file_source",
                             str(scratch / "out"), str(scratch / "out2"),
                             str(scratch / "ck2")])
        copied, _ = _written(scratch / "out2")
        if copied != messages:
            raise RuntimeError(f"the file source wrote {copied} rows for {messages}")
    finally:
        import shutil

        shutil.rmtree(scratch, ignore_errors=True)
    rate, ceiling = messages / ingest_s, messages / baseline_s
    sizes = sorted(len(b) for b in bodies)
    return {"scenario": "spark-ingest", "concurrency": 2, "msgs_per_s": round(rate),
            "p50_ms": 0.0, "p99_ms": 0.0, "ceiling": "spark-file-source",
            "ceiling_msgs_per_s": round(ceiling), "ceiling_p99_ms": 0.0,
            "ratio": round(baseline_s / ingest_s, 3), "goal_ratio": round(
                baseline_s / ingest_s / 0.8, 3),
            "check": f"ok: {rows} rows written, bodies equal to those sent",
            "messages": messages, "wall_s": round(ingest_s, 1),
            "ceiling_wall_s": round(baseline_s, 1),
            "body_bytes": {"min": sizes[0], "median": sizes[len(sizes) // 2],
                           "max": sizes[-1]}}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.spark_ingest")
    parser.add_argument("--levels", default="2", help="ignored: always local[2]")
    parser.add_argument("--requests", type=int, default=4000,
                        help="scale: messages = 50 x this (default 200,000)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="ingest + baseline pairs; the median one is reported")
    args = parser.parse_args()
    json.dump([run(max(args.requests * 50, 1000), max(args.rounds, 1))], sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
