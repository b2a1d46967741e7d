"""``recovery`` and ``memory`` benchmarks of the store (in-process, no HTTP).

    python -m bench.store_recovery --mib 256 --messages 200000

recovery: a child process fills a store with 1 KiB recoverable messages (``--mib`` of live
data), is killed with SIGKILL mid-stream, and the store is opened again in a fresh process; the
figure is seconds per GiB of live data (goal <= 5). The ceiling is reading the same segment files
sequentially (cold-cache effects aside, what any recovery must at least do).

memory: a fresh process opens an empty store, measures its anonymous RSS, appends ``--messages``
100-byte messages and measures again; the figure is bytes of RSS per queued message (goal <=
200). Message bodies live in the segments, so this is the index's cost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.servers import REPO_ROOT
from store.message_store import MessageStore
from store.options import StoreOptions
from store.records import SendSpec

_OPTIONS = StoreOptions()


def _rss_anon_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


async def _fill(root: Path, count: int, size: int) -> None:
    loop = asyncio.get_running_loop()
    store = await loop.run_in_executor(None, MessageStore.open, root, _OPTIONS)
    store.start(loop)
    body = os.urandom(size)
    sent = 0
    while sent < count:
        batch = min(256, count - sent)
        await asyncio.gather(*(store.append(SendSpec(1 + i % 4, body)) for i in range(batch)))
        sent += batch
    print("FILLED", flush=True)
    await asyncio.sleep(3600)  # killed here


def _child_fill(root: Path, count: int, size: int) -> None:
    asyncio.run(_fill(root, count, size))


def _child_open(root: Path) -> None:
    started = time.perf_counter()
    store = MessageStore.open(root, _OPTIONS)
    seconds = time.perf_counter() - started
    live = sum(store.count(q) for q in store.queue_ids())
    live_bytes = sum(store.queue_bytes(q) for q in store.queue_ids())
    store.close()
    print(json.dumps({"seconds": seconds, "live": live, "live_bytes": live_bytes,
                      "full_scans": store.recovery.full_scans}))


def _child_memory(root: Path, count: int) -> None:
    async def main() -> dict[str, float]:
        loop = asyncio.get_running_loop()
        store = await loop.run_in_executor(None, MessageStore.open, root, _OPTIONS)
        store.start(loop)
        await store.append(SendSpec(1, b"warm-up"))
        idle = _rss_anon_bytes()
        body = bytes(100)
        sent = 0
        while sent < count:
            batch = min(512, count - sent)
            await asyncio.gather(*(store.append(SendSpec(1 + i % 4, body)) for i in range(batch)))
            sent += batch
        loaded = _rss_anon_bytes()
        await loop.run_in_executor(None, store.close)
        return {"idle_rss": idle, "loaded_rss": loaded, "messages": count,
                "bytes_per_message": (loaded - idle) / count}

    print(json.dumps(asyncio.run(main())))


def _sequential_read_seconds(storage: Path) -> float:
    started = time.perf_counter()
    for path in sorted(storage.glob("p*.mq")):
        with open(path, "rb") as handle:
            while handle.read(1 << 20):
                pass
    return time.perf_counter() - started


def run(mib: int, messages: int) -> list[dict[str, object]]:
    scratch = REPO_ROOT / "var" / "bench"
    scratch.mkdir(parents=True, exist_ok=True)
    records: list[dict[str, object]] = []
    me = [sys.executable, "-m", "bench.store_recovery"]
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        root = Path(tmp) / "data"
        count = mib * 1024  # 1 KiB messages
        filler = subprocess.Popen([*me, "--child", "fill", str(root), str(count)],
                                  stdout=subprocess.PIPE, cwd=REPO_ROOT)
        assert filler.stdout is not None
        assert filler.stdout.readline().strip() == b"FILLED"
        filler.send_signal(signal.SIGKILL)
        filler.wait()
        opened = json.loads(subprocess.run([*me, "--child", "open", str(root)], check=True,
                                           capture_output=True, text=True, cwd=REPO_ROOT).stdout)
        read_seconds = _sequential_read_seconds(root / "storage")
        gib = opened["live_bytes"] / (1 << 30)
        records.append({
            "scenario": "recovery", "concurrency": 0,
            "msgs_per_s": round(opened["live"] / opened["seconds"], 1),
            "p50_ms": round(opened["seconds"] * 1000, 1), "p99_ms": round(opened["seconds"] * 1000, 1),
            "ceiling": "sequential-read",
            "ceiling_msgs_per_s": round(opened["live"] / read_seconds, 1),
            "ceiling_p99_ms": round(read_seconds * 1000, 1),
            "ratio": round(read_seconds / opened["seconds"], 3),
            "seconds_per_gib": round(opened["seconds"] / gib, 3), "goal_seconds_per_gib": 5.0,
            "live_messages": opened["live"], "live_bytes": opened["live_bytes"],
            "requests": opened["live"], "errors": 0, "statuses": {},
        })
    with tempfile.TemporaryDirectory(dir=scratch) as tmp:
        memory = json.loads(subprocess.run([*me, "--child", "memory", str(Path(tmp) / "data"),
                                            str(messages)], check=True, capture_output=True,
                                           text=True, cwd=REPO_ROOT).stdout)
        records.append({
            "scenario": "memory", "concurrency": 0, "msgs_per_s": 0.0, "p50_ms": 0.0,
            "p99_ms": 0.0, "ceiling": "goal-200-bytes", "ceiling_msgs_per_s": 0.0,
            "ceiling_p99_ms": 0.0,
            "ratio": round(200 / memory["bytes_per_message"], 3),
            "bytes_per_message": round(memory["bytes_per_message"], 1),
            "goal_bytes_per_message": 200, "messages": memory["messages"],
            "idle_rss": memory["idle_rss"], "loaded_rss": memory["loaded_rss"],
            "requests": memory["messages"], "errors": 0, "statuses": {},
        })
    return records


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.store_recovery")
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--levels", default="")  # accepted for the runner's uniform call
    parser.add_argument("--requests", type=int, default=0)
    parser.add_argument("--child", nargs="+")
    args = parser.parse_args()
    if args.child:
        kind, root = args.child[0], Path(args.child[1])
        if kind == "fill":
            _child_fill(root, int(args.child[2]), 1024)
        elif kind == "open":
            _child_open(root)
        else:
            _child_memory(root, int(args.child[2]))
        return 0
    print(json.dumps(run(args.mib, args.messages)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
