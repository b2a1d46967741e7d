"""``entrepot check DATA_DIR`` against real data directories."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from store.framing import RECORD_HEADER_SIZE
from store.records import SendSpec
from tests.helpers import REPO_ROOT, GatewayProcess
from tests.store.conftest import close_store, open_store


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
