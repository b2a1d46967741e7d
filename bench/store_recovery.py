"""``recovery`` and ``memory`` benchmarks of the store (in-process, no HTTP).

    python -m bench.store_recovery --mib 256 --messages 200000

recovery: a child process fills a store with 1 KiB recoverable messages (``--mib`` of live
data) and goes on appending; it is killed with SIGKILL while those appends are in flight, and
the store is opened again in a fresh process with a cold page cache (every file of the data
directory synced and dropped with ``POSIX_FADV_DONTNEED`` just before the open). The figure is
seconds per GiB of live data (goal <= 5). The ceiling is reading the same segment files
sequentially, from a cold cache too (what any recovery must at least do).

memory: a real ``entrepot serve`` on an empty data directory; its RSS is read from /proc when
ready, then after ``--messages`` 1 KiB messages with properties (label, correlation id,
app-specific, priority) are queued through ``/v1/batch``; the figure is anonymous RSS per
queued message (goal <= 200 bytes). Message bodies live in the memory-mapped segments (file
pages, the kernel's to reclaim), so this is what the gateway holds per message: its index and
whatever else grows with the queue. ``rss_file_bytes_per_message`` is the mapped pages' share.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench import servers
from bench.servers import REPO_ROOT
from store.message_store import MessageStore
from store.options import StoreOptions
from store.records import SendSpec

_OPTIONS = StoreOptions()


def _rss(pid: int | str = "self") -> dict[str, int]:
    """RssAnon, RssFile and VmRSS of a process, in bytes."""
    wanted = {"RssAnon:": "anon", "RssFile:": "file", "VmRSS:": "total"}
    found: dict[str, int] = {}
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            key = line.split(None, 1)[0] if line.strip() else ""
            if key in wanted:
                found[wanted[key]] = int(line.split()[1]) * 1024
    if len(found) != len(wanted):
        raise RuntimeError(f"no RssAnon/RssFile/VmRSS in /proc/{pid}/status")
    return found


def drop_cache(root: Path) -> int:
    """Sync every file under ``root`` and drop its pages from the page cache (a clean page is
    all ``POSIX_FADV_DONTNEED`` drops); returns the files dropped."""
    files = 0
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        files += 1
    return files


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
    while True:  # killed in here, appends in flight
        await asyncio.gather(*(store.append(SendSpec(1 + i % 4, body)) for i in range(256)))


def _child_fill(root: Path, count: int, size: int) -> None:
    asyncio.run(_fill(root, count, size))


def _child_open(root: Path) -> None:
    dropped = drop_cache(root)
    started = time.perf_counter()
    store = MessageStore.open(root, _OPTIONS)
    seconds = time.perf_counter() - started
    live = sum(store.count(q) for q in store.queue_ids())
    live_bytes = sum(store.queue_bytes(q) for q in store.queue_ids())
    store.close()
    print(json.dumps({"seconds": seconds, "live": live, "live_bytes": live_bytes,
                      "full_scans": store.recovery.full_scans, "files_dropped": dropped}))


def _post(url: str, doc: object, method: str = "POST") -> None:
    request = urllib.request.Request(url, data=json.dumps(doc).encode(), method=method,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as response:
        response.read()


def _queued(url: str) -> int:
    with urllib.request.urlopen(url + "/v1/queues/bench", timeout=60) as response:
        return int(json.loads(response.read())["messages"])


def memory(count: int) -> dict[str, object]:
    """RSS of a running ``entrepot serve`` before and after ``count`` queued messages."""
    with servers.gateway() as url:
        pid = servers.pid_of(url)
        _post(url + "/v1/queues/bench", {}, "PUT")
        idle = _rss(pid)
        sent = 0
        while sent < count:
            batch = min(500, count - sent)
            _post(url + "/v1/batch", {"messages": [
                {"queue": "bench", "body_base64": base64.b64encode(os.urandom(1024)).decode(),
                 "properties": {"label": f"bench message {sent + i}", "priority": 1 + i % 6,
                                "correlation_id": f"bench-{sent + i:012d}",
                                "app_specific": sent + i}}
                for i in range(batch)]})
            sent += batch
        loaded = _rss(pid)
        queued = _queued(url)
    return {"idle": idle, "loaded": loaded, "queued": queued}


def _sequential_read_seconds(storage: Path) -> float:
    drop_cache(storage)
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
        with subprocess.Popen([*me, "--child", "fill", str(root), str(count)],
                              stdout=subprocess.PIPE, cwd=REPO_ROOT) as filler:
            assert filler.stdout is not None
            filled = filler.stdout.readline().strip() == b"FILLED"
            filler.send_signal(signal.SIGKILL)  # it is appending again by now
            filler.wait()
        if not filled:
            raise RuntimeError("the filler died before filling the store")
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
            "killed_mid_write": True, "cold_cache": True,
            "files_dropped": opened["files_dropped"],
            "requests": opened["live"], "errors": 0, "statuses": {},
        })
    loaded = memory(messages)
    idle, full = loaded["idle"], loaded["loaded"]
    assert isinstance(idle, dict) and isinstance(full, dict)
    per_message = (full["anon"] - idle["anon"]) / messages
    records.append({
        "scenario": "memory", "concurrency": 0, "msgs_per_s": 0.0, "p50_ms": 0.0,
        "p99_ms": 0.0, "ceiling": "goal-200-bytes", "ceiling_msgs_per_s": 0.0,
        "ceiling_p99_ms": 0.0,
        "ratio": round(200 / per_message, 3) if per_message > 0 else 0.0,
        "bytes_per_message": round(per_message, 1), "goal_bytes_per_message": 200,
        "rss_bytes_per_message": round((full["total"] - idle["total"]) / messages, 1),
        "rss_file_bytes_per_message": round((full["file"] - idle["file"]) / messages, 1),
        "messages": messages, "idle_rss": idle, "loaded_rss": full,
        "acknowledged": messages, "stored": loaded["queued"],
        "check": "ok" if loaded["queued"] == messages else (
            f"FAILED: stored {loaded['queued']} != acknowledged {messages}"),
        "requests": messages, "errors": 0, "statuses": {},
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
        else:
            _child_open(root)
        return 0
    print(json.dumps(run(args.mib, args.messages)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
