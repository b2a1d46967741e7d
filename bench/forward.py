"""``forward-tx``: gateway A forwards transactional messages to gateway P over an SRMP link.

Two real gateways on loopback. The load generator sends N 1 KiB messages into A
(``POST /v1/messages``, ``Mq-Destination`` = P's queue, ``Mq-Transaction: single``) at the
given concurrency; A's ingest rate is what the load generator measures. The forward rate is
N over the time from the first send until P's queue holds all N. The record's ratio is
forward / ingest (goal >= 0.5).

    python -m bench.forward --levels 64 --requests 3000
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import urllib.request

from bench import servers


def _json(url: str, method: str = "GET", doc: object | None = None) -> dict[str, object]:
    data = None if doc is None else json.dumps(doc).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        result: dict[str, object] = json.loads(response.read() or b"{}")
        return result


def run(concurrency: int, requests: int) -> dict[str, object]:
    p_port = servers.free_port()
    with servers.gateway(port=p_port) as p_url, \
            servers.gateway() as a_url:
        _json(p_url + "/v1/queues/private$/bench_tx", "PUT", {"transactional": True})
        destination = f"DIRECT=HTTP://127.0.0.1:{p_port}/msmq/private$/bench_tx"
        started = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "bench.loadgen", "--url", a_url + "/v1/messages",
             "--concurrency", str(concurrency), "--requests", str(requests), "--warmup", "0",
             "--body-size", "1024", "--header", f"Mq-Destination: {destination}",
             "--header", "Mq-Transaction: single"],
            check=True, capture_output=True, text=True, timeout=600)
        ingest = json.loads(out.stdout)
        deadline = time.monotonic() + 600
        count = 0
        while time.monotonic() < deadline:
            count = int(str(_json(p_url + "/v1/queues/private$/bench_tx")["messages"]))
            if count >= requests:
                break
            time.sleep(0.05)
        elapsed = time.monotonic() - started
    forward_rate = count / elapsed if elapsed else 0.0
    ingest_rate = float(ingest["msgs_per_s"])
    return {"scenario": "forward-tx", "concurrency": concurrency,
            "msgs_per_s": round(forward_rate, 1), "p50_ms": ingest["p50_ms"],
            "p99_ms": ingest["p99_ms"],
            "ceiling": "a-ingest", "ceiling_msgs_per_s": ingest_rate,
            "ceiling_p99_ms": ingest["p99_ms"],
            "ratio": round(forward_rate / ingest_rate, 3) if ingest_rate else 0.0,
            "requests": requests, "delivered": count, "errors": ingest["errors"],
            "statuses": ingest["statuses"]}


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.forward")
    parser.add_argument("--levels", default="64")
    parser.add_argument("--requests", type=int, default=3000)
    args = parser.parse_args()
    records = [run(int(level), args.requests) for level in args.levels.split(",")]
    json.dump(records, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
