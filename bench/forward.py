"""``forward-tx``: gateway A forwards transactional messages to gateway P over an SRMP link.

Real gateways on loopback, driven by wrk (``bench/wrk.py``): N unique 1 KiB messages sent
into A (``POST /v1/messages``, ``Mq-Destination`` = P's queue, ``Mq-Transaction: single``) at
the given concurrency.

- Ingest alone (the ceiling): a fresh A whose destination has no gateway yet, so A only
  stores (its link waits to connect); its rate is wrk's. Its outgoing queue must then hold
  every message it acknowledged.
- Forward: P started, a second fresh A; the rate is N over the time from the first send
  until P's queue holds all N, and P must hold exactly what A acknowledged.

The record's ratio is forward / ingest alone (goal >= 0.5).

    python -m bench.forward --levels 64 --requests 3000
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.request

from bench import servers, wrk


def _json(url: str, method: str = "GET", doc: object | None = None) -> dict[str, object]:
    data = None if doc is None else json.dumps(doc).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        result: dict[str, object] = json.loads(response.read() or b"{}")
        return result


def _send(a_url: str, destination: str, concurrency: int, requests: int) -> dict[str, object]:
    return wrk.run(a_url + "/v1/messages", method="POST",
                   headers={"Content-Type": "application/octet-stream",
                            "Mq-Destination": destination, "Mq-Transaction": "single"},
                   body=b"#RUN#####.#SEQ#####." + bytes(1004), concurrency=concurrency,
                   requests=requests)


def _backlog(a_url: str) -> int:
    links = _json(a_url + "/v1/links")["links"]
    assert isinstance(links, list)
    return sum(int(link["backlog"]) for link in links)


def _p_count(p_url: str) -> int:
    return int(str(_json(p_url + "/v1/queues/private$/bench_tx")["messages"]))


def run(concurrency: int, requests: int) -> dict[str, object]:
    p_port = servers.free_port()
    destination = f"DIRECT=HTTP://127.0.0.1:{p_port}/msmq/private$/bench_tx"
    with servers.gateway() as a_url:  # P not started: A stores and does not forward
        alone = _send(a_url, destination, concurrency, requests)
        alone_stored = _backlog(a_url)
    with servers.gateway(port=p_port) as p_url, servers.gateway() as a_url:
        _json(p_url + "/v1/queues/private$/bench_tx", "PUT", {"transactional": True})
        started = time.monotonic()
        ingest = _send(a_url, destination, concurrency, requests)
        acknowledged = int(ingest["ok"])  # type: ignore[call-overload]
        deadline = time.monotonic() + 600
        count = _p_count(p_url)
        while count < acknowledged and time.monotonic() < deadline:
            time.sleep(0.05)
            count = _p_count(p_url)
        elapsed = time.monotonic() - started
        # Anything more P would still get (a duplicate, an unacknowledged send) shows here.
        time.sleep(0.5)
        count = _p_count(p_url)
    forward_rate = count / elapsed if elapsed else 0.0
    alone_rate = float(alone["msgs_per_s"])  # type: ignore[arg-type]
    checks = []
    if alone_stored != alone["ok"]:
        checks.append(f"A alone stored {alone_stored} != acknowledged {alone['ok']}")
    if count != acknowledged:
        checks.append(f"stored {count} != acknowledged {acknowledged}")
    return {"scenario": "forward-tx", "concurrency": concurrency,
            "msgs_per_s": round(forward_rate, 1), "p50_ms": ingest["p50_ms"],
            "p99_ms": ingest["p99_ms"],
            "ceiling": "a-ingest-alone", "ceiling_msgs_per_s": alone_rate,
            "ceiling_p99_ms": alone["p99_ms"],
            "ratio": round(forward_rate / alone_rate, 3) if alone_rate else 0.0,
            "ingest_while_forwarding_msgs_per_s": ingest["msgs_per_s"],
            "requests": requests, "delivered": count, "errors": ingest["errors"],
            "statuses": ingest["statuses"], "acknowledged": acknowledged, "stored": count,
            "check": "FAILED: " + "; ".join(checks) if checks else "ok"}


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
