"""``entrepot check DATA_DIR`` against real data directories."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from gateway.queues.internal import DEDUP_QUEUE, LINKS_QUEUE, STREAMS_QUEUE
from store.framing import RECORD_HEADER_SIZE
from store.options import StoreOptions
from store.records import SendSpec
from tests.helpers import REPO_ROOT, GatewayProcess
from tests.store.conftest import abandon_store, close_store, open_store


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", "check", *args], capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=60)


def _fill(root: Path) -> list[tuple[int, int]]:
    async def main() -> list[tuple[int, int]]:
        store = await open_store(root)
        records = [await store.append(SendSpec(1, bytes([i]) * 400)) for i in range(25)]
        await close_store(store)
        return [(r.segment, r.offset) for r in records]

    return asyncio.run(main())


def test_whole_store_exits_0(tmp_path: Path) -> None:
    _fill(tmp_path)
    result = _check(str(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "records      25 verified" in result.stdout
    assert "result       ok" in result.stdout


def test_damaged_record_exits_1_and_names_it(tmp_path: Path) -> None:
    places = _fill(tmp_path)
    segment, offset = places[7]
    path = tmp_path / "storage" / f"p{segment:07x}.mq"
    with open(path, "r+b") as handle:
        handle.seek(offset + RECORD_HEADER_SIZE + 3)
        handle.write(b"\x00\x01")
    result = _check(str(tmp_path), "--json")
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["damaged"][0]["file"] == path.name
    assert report["damaged"][0]["offset"] == offset
    assert report["damaged"][0]["reason"] == "record checksum mismatch"
    assert report["records"] == 24
    # check never repairs: the same damage is still there.
    assert _check(str(tmp_path)).returncode == 1


def test_running_gateway_data_dir_is_refused(gateway: GatewayProcess) -> None:
    result = _check(str(gateway.data_dir))
    assert result.returncode == 2
    assert "in use" in result.stderr


def test_missing_data_dir_is_a_clear_error(tmp_path: Path) -> None:
    result = _check(str(tmp_path / "nope"))
    assert result.returncode == 2
    assert "not an entrepot data directory" in result.stderr


def _put_unreadable(root: Path) -> dict[str, int]:
    """An unreadable record in two internal queues, and one in a third that is removed again;
    the store then stops as a crash would (no final checkpoint), so a start finds the records
    through the chains and the QMLog."""
    async def main() -> dict[str, int]:
        store = await open_store(root, StoreOptions())
        by_path = {info.path.lower(): info.queue_id for info in store.registry.all()}
        garbage = await store.append(SendSpec(by_path[DEDUP_QUEUE], b"\xff\xfe not ours"))
        fields_missing = await store.append(SendSpec(by_path[STREAMS_QUEUE], json.dumps(
            {"id": "s", "queue": "anon"}).encode()))
        removed = await store.append(SendSpec(by_path[LINKS_QUEUE], b"\xff removed"))
        await store.remove([removed])
        await abandon_store(store)
        return {DEDUP_QUEUE: garbage.seq, STREAMS_QUEUE: fields_missing.seq}

    return asyncio.run(main())


def test_state_records_a_start_would_quarantine_are_reported(tmp_path: Path) -> None:
    data = tmp_path / "data"
    gateway = GatewayProcess(data)
    try:
        gateway.wait_ready()
    finally:
        gateway.stop()
    clean = _check(str(data))
    assert clean.returncode == 0, clean.stdout + clean.stderr
    assert "QUARANTINE" not in clean.stdout

    placed = _put_unreadable(data)
    result = _check(str(data))
    assert result.returncode == 1, result.stdout + result.stderr
    lines = sorted(line for line in result.stdout.splitlines() if line.startswith("QUARANTINE"))
    assert len(lines) == 2, result.stdout
    assert lines[0].startswith(f"QUARANTINE   {DEDUP_QUEUE}:{placed[DEDUP_QUEUE]}: ")
    assert lines[1].startswith(f"QUARANTINE   {STREAMS_QUEUE}:{placed[STREAMS_QUEUE]}: KeyError")
    report = json.loads(_check(str(data), "--json").stdout)
    assert report["ok"] is False
    assert sorted((q["queue"], q["seq"]) for q in report["quarantine"]) == sorted(placed.items())

    # A start sets both aside (copied to quarantine/, removed from their queues).
    gateway = GatewayProcess(data, port=gateway.port)
    try:
        gateway.wait_ready()
    finally:
        gateway.stop()
    assert len(list((data / "quarantine").glob("*.bin"))) == 2
    after = _check(str(data), "--json")
    assert after.returncode == 0, after.stdout + after.stderr
    assert json.loads(after.stdout)["quarantine"] == []
