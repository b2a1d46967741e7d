"""Drive one closed-loop HTTP run with ``wrk`` (a native load generator) and ``wrk_unique.lua``.

    run(url, method="POST", headers={...}, body=template, concurrency=64, requests=20000)

Each request is unique (the body template's tokens, see ``wrk_unique.lua``), each thread sends
its share of ``requests`` and waits for every answer before it stops, so the 2xx answers
counted are everything the server acknowledged. wrk's main thread sleeps for ``-d`` however
early its threads are done; once every thread has said so, SIGINT wakes it for the summary.
The result has the keys of ``bench.loadgen``'s: count, ok, errors, statuses, elapsed_s (the
script's span from the first request to the last answer), msgs_per_s, p50_ms, p99_ms (wrk's
latency histogram, with its correction for requests a slow answer held back).
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

SCRIPT = Path(__file__).with_name("wrk_unique.lua")
INSTALL_HINT = "install it with `apt-get install -y wrk` (as root, after `apt-get update`)"
# A run id per wrk run of this process: no two runs on one server send the same SRMP id.
_RUN_IDS = itertools.count((os.getpid() % 10_000) * 10_000 + 1)


class WrkError(RuntimeError):
    """wrk is missing, or a run did not end with every request answered."""


def executable() -> str:
    path = shutil.which("wrk")
    if path is None:
        raise WrkError(f"wrk is not installed: {INSTALL_HINT}")
    return path


def version() -> str:
    out = subprocess.run([executable(), "-v"], capture_output=True, text=True, timeout=30)
    return out.stdout.split("[", 1)[0].strip()


def threads_for(concurrency: int) -> int:
    """Two threads at most: on 2 cores wrk's threads take CPU from the server measured."""
    return min(2, concurrency)


def run(url: str, *, method: str = "POST", headers: Mapping[str, str] | None = None,
        body: bytes | None = None, concurrency: int, requests: int,
        threads: int | None = None, timeout_s: int = 900) -> dict[str, object]:
    threads = min(threads or threads_for(concurrency), concurrency, requests)
    if requests < 1 or concurrency % threads:
        raise ValueError(f"{requests} requests on {concurrency} connections in {threads} "
                         "threads: need requests >= 1 and connections a multiple of threads")
    with tempfile.TemporaryDirectory(prefix="entrepot-wrk-") as tmp:
        body_file = ""
        if body is not None:
            body_file = os.path.join(tmp, "body")
            Path(body_file).write_bytes(body)
        args = [executable(), "-t", str(threads), "-c", str(concurrency), "-d", f"{timeout_s}s",
                "--timeout", "60s", "-s", str(SCRIPT)]
        for name, value in (headers or {}).items():
            args += ["-H", f"{name}: {value}"]
        args += [url, "--", method, str(requests), str(threads), body_file,
                 "%09d" % (next(_RUN_IDS) % 10**9)]
        return _drive(args, threads, requests)


def _drive(args: list[str], threads: int, requests: int) -> dict[str, object]:
    lines: list[str] = []
    done = 0
    with subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            if line.strip() == "WRK-THREAD-DONE":
                done += 1
                if done == threads:
                    break
        # SIGINT ends wrk's sleep; one sent before that sleep starts is lost, so send another
        # while it has not ended (wrk ignores SIGINT until its handler is in place).
        while done == threads and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(2)
            except subprocess.TimeoutExpired:
                continue
        lines += proc.stdout.readlines()
    output = "".join(lines)
    result = next((json.loads(line.split(" ", 1)[1]) for line in lines
                   if line.startswith("WRK-RESULT ")), None)
    if proc.returncode != 0 or result is None:
        raise WrkError(f"wrk exited with {proc.returncode}: {output[-2000:]}")
    statuses = {str(k): int(v) for k, v in sorted(result["statuses"].items())}
    answered = sum(statuses.values())
    errors = sum(int(v) for k, v in result["errors"].items() if k != "timeout")
    if done != threads or answered != requests:
        raise WrkError(f"{answered} of {requests} requests answered ({errors} socket "
                       f"errors); wrk said: {output[-2000:]}")
    ok = sum(n for status, n in statuses.items() if 200 <= int(status) < 300)
    elapsed = int(result["elapsed_us"]) / 1e6
    return {"count": answered, "ok": ok, "errors": errors, "statuses": statuses,
            "elapsed_s": round(elapsed, 4),
            "msgs_per_s": round(ok / elapsed, 1) if elapsed else 0.0,
            "p50_ms": round(int(result["p50_us"]) / 1000, 3),
            "p99_ms": round(int(result["p99_us"]) / 1000, 3)}
