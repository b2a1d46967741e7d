"""Damaged files: bit flips and truncations injected into random store files of a stopped
gateway. It must start anyway, report the damage (``entrepot check`` beforehand, the
recovery log), quarantine it, and serve everything else: every message it serves is one
that was sent, whole and once; what it lost is counted, and a second start finds the store
whole (the damage was set aside)."""

from __future__ import annotations

import base64
import json
import random
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from tests.helpers import REPO_ROOT, GatewayProcess, http_get

QUEUE = "private$/t_damage"


def _store_files(data_dir: Path) -> list[Path]:
    storage = data_dir / "storage"
    return sorted(p for p in storage.rglob("*") if p.is_file()
                  and "quarantine" not in p.parts and "archive" not in p.parts)


def _damage(path: Path, rng: random.Random) -> str:
    size = path.stat().st_size
    if size == 0:
        return f"{path.name}: empty, left"
    if rng.random() < 0.3:
        keep = rng.randrange(size)
        with path.open("r+b") as handle:
            handle.truncate(keep)
        return f"{path.name}: truncated {size} -> {keep}"
    flips = rng.randint(1, 8)
    with path.open("r+b") as handle:
        for _ in range(flips):
            offset = rng.randrange(size)
            handle.seek(offset)
            byte = handle.read(1)[0]
            handle.seek(offset)
            handle.write(bytes([byte ^ (1 << rng.randrange(8))]))
    return f"{path.name}: {flips} bit flip(s)"


def fill(url: str, first: int, count: int) -> list[int]:
    """``count`` messages in batches; returns the acknowledged indexes."""
    acked = []
    for start in range(first, first + count, 50):
        items = [{"queue": QUEUE, "body_base64": base64.b64encode(
            json.dumps({"n": n, "pad": "x" * (n % 700)}).encode()).decode()}
                 for n in range(start, min(start + 50, first + count))]
        request = urllib.request.Request(f"{url}/v1/batch", data=json.dumps(
            {"messages": items}).encode(), method="POST",
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            if response.status == 201:
                acked.extend(range(start, min(start + 50, first + count)))
    return acked


def served_indexes(url: str) -> tuple[list[int], int]:
    """The indexes served by the queue and by any ``private$/recovered_*`` queue the damage
    made (its registration lost), and how many such queues there are."""
    _, _, raw = http_get(f"{url}/v1/queues", timeout=30)
    paths = [q["path"] for q in json.loads(raw)["queues"]]
    recovered = [p for p in paths if p.startswith("private$/recovered_")]
    served: list[int] = []
    for queue in [*([QUEUE] if QUEUE in paths else []), *recovered]:
        after = 0
        while True:
            status, _, raw = http_get(f"{url}/v1/queues/{queue}/messages?after={after}"
                                      "&limit=1000", timeout=30)
            assert status == 200, raw[:300]
            page = json.loads(raw)
            if not page["messages"]:
                break
            for message in page["messages"]:
                doc = json.loads(base64.b64decode(message["body_base64"]))
                assert doc["pad"] == "x" * (doc["n"] % 700), f"message {doc['n']} damaged"
                served.append(doc["n"])
            after = page["next"]
    return served, len(recovered)


def _check(data_dir: Path) -> tuple[int, dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "gateway", "check", str(data_dir), "--json"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    return done.returncode, json.loads(done.stdout) if done.stdout.strip() else {}


def run(root: Path, rounds: int, seed: int = 7, files_per_round: int = 2) -> dict[str, Any]:
    rng = random.Random(seed)
    totals = {"scenario": "damaged-files", "rounds": rounds, "files_damaged": 0,
              "damaged_records_found": 0, "acknowledged": 0, "lost": 0, "duplicated": 0,
              "registrations_recovered": 0, "injected": []}
    for round_number in range(rounds):
        data_dir = root / f"round{round_number}"
        gateway = GatewayProcess(data_dir)
        gateway.wait_ready()
        urllib.request.urlopen(urllib.request.Request(
            f"{gateway.url}/v1/queues/{QUEUE}", data=b"{}", method="PUT"), timeout=10).read()
        acked = fill(gateway.url, 0, 1500)
        # Half the rounds stop cleanly (checkpoint written), half die (recovery replays).
        gateway.stop(signal.SIGTERM if round_number % 2 == 0 else signal.SIGKILL)
        targets = rng.sample(_store_files(data_dir), files_per_round)
        totals["injected"].extend(f"round {round_number}: {_damage(p, rng)}" for p in targets)
        totals["files_damaged"] += len(targets)
        code, report = _check(data_dir)
        assert code in (0, 1), f"check could not read the directory: {report}"
        gateway = GatewayProcess(data_dir, port=gateway.port)
        try:
            gateway.wait_ready(timeout=60)
            served, recovered = served_indexes(gateway.url)
        finally:
            gateway.stop()
        totals["registrations_recovered"] += recovered
        found = re.findall(r"damaged=(\d+)", gateway.log())
        totals["damaged_records_found"] += sum(int(n) for n in found)
        totals["acknowledged"] += len(acked)
        totals["lost"] += len(set(acked) - set(served))
        totals["duplicated"] += len(served) - len(set(served))
        # The damage was set aside: a second start serves the same and checks whole.
        again = GatewayProcess(data_dir, port=gateway.port)
        try:
            again.wait_ready(timeout=60)
            assert sorted(served_indexes(again.url)[0]) == sorted(served), \
                "a restart changed the queue"
        finally:
            again.stop()
    assert totals["duplicated"] == 0, totals
    return totals
