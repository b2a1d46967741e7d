"""Disk full: the data directory on a small filesystem (a tmpfs mounted for the run). Senders
get 507 (or 503) with Retry-After once the disk is full, reads and receives go on, nothing is
corrupted, and sends are accepted again by themselves once space is freed; after a kill -9
and a restart every acknowledged message is there once and ``entrepot check`` finds the store
whole."""

from __future__ import annotations

import base64
import json
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.helpers import REPO_ROOT, GatewayProcess, http_get

QUEUE = "private$/t_full"


def mount_small_filesystem(target: Path, size_mib: int) -> bool:
    """Mount a tmpfs of ``size_mib`` at ``target``; False where the machine does not allow
    it (not root, no mount namespace)."""
    target.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m", "tmpfs",
                           str(target)], capture_output=True, timeout=30)
    return done.returncode == 0


def unmount(target: Path) -> None:
    subprocess.run(["umount", "-l", str(target)], capture_output=True, timeout=30)


def _send(url: str, n: int) -> tuple[int, dict[str, str]]:
    body = json.dumps({"n": n, "pad": "y" * 8000}).encode()
    request = urllib.request.Request(f"{url}/v1/queues/{QUEUE}/messages", data=body,
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers)


def _indexes(url: str) -> list[int]:
    found, after = [], 0
    while True:
        status, _, raw = http_get(f"{url}/v1/queues/{QUEUE}/messages?after={after}&limit=500",
                                  timeout=30)
        assert status == 200
        page = json.loads(raw)
        if not page["messages"]:
            return found
        for message in page["messages"]:
            doc = json.loads(base64.b64decode(message["body_base64"]))
            assert doc["pad"] == "y" * 8000
            found.append(doc["n"])
        after = page["next"]


def run(mount_point: Path, size_mib: int = 24) -> dict[str, Any]:
    """Raises: RuntimeError when no small filesystem can be mounted here."""
    if not mount_small_filesystem(mount_point, size_mib):
        raise RuntimeError("cannot mount a tmpfs here (needs root)")
    config = mount_point.parent / "full.toml"
    config.write_text('[store]\nsegment_size = "1MiB"\ngroup_commit_bytes_max = "512KiB"\n')
    gateway: GatewayProcess | None = None
    try:
        filler = mount_point / "filler"  # someone else's file, deleted to free space
        filler.write_bytes(b"\0" * (4 << 20))
        gateway = GatewayProcess(mount_point / "data", extra_args=["--config", str(config)])
        gateway.wait_ready()
        urllib.request.urlopen(urllib.request.Request(
            f"{gateway.url}/v1/queues/{QUEUE}", data=b"{}", method="PUT"), timeout=10).read()
        acked: list[int] = []
        refusals: dict[int, int] = {}
        n = 0
        while len(refusals) == 0 or sum(refusals.values()) < 20:
            status, headers = _send(gateway.url, n)
            if status == 201:
                acked.append(n)
            else:
                assert status in (503, 507), f"a full disk answered {status}"
                assert "Retry-After" in headers, "a refusal must say when to retry"
                refusals[status] = refusals.get(status, 0) + 1
            n += 1
            assert n < 100_000, "the disk never filled"
        assert http_get(gateway.url + "/healthz")[0] == 200
        assert sorted(_indexes(gateway.url)) == acked, "reads go on while the disk is full"
        filler.unlink()  # space freed: sends succeed again by themselves
        resumed = 0
        for _ in range(200):
            status, _ = _send(gateway.url, n)
            if status == 201:
                acked.append(n)
                resumed += 1
            n += 1
            if resumed >= 10:
                break
        assert resumed >= 10, "sends did not resume after space was freed"
        gateway.stop(signal.SIGKILL)
        check = subprocess.run([sys.executable, "-m", "gateway", "check",
                                str(mount_point / "data")], cwd=REPO_ROOT,
                               capture_output=True, text=True, timeout=120)
        assert check.returncode == 0, check.stdout + check.stderr
        gateway = GatewayProcess(mount_point / "data", extra_args=["--config", str(config)],
                                 port=gateway.port)
        try:
            gateway.wait_ready()
            served = _indexes(gateway.url)
        finally:
            gateway.stop()
        lost = len(set(acked) - set(served))
        duplicated = len(served) - len(set(served))
        assert (lost, duplicated) == (0, 0), (lost, duplicated)
        return {"scenario": "disk-full", "filesystem_mib": size_mib,
                "acknowledged": len(acked), "refused": refusals, "resumed": resumed,
                "lost": lost, "duplicated": duplicated}
    finally:
        if gateway is not None:  # a failed assertion must not leave it running
            gateway.stop(signal.SIGKILL)
        # The gateway's log is on the small filesystem: kept beside it, for a failure's cause.
        for log in mount_point.glob("gateway-*.log"):
            shutil.copyfile(log, mount_point.parent / log.name)
        unmount(mount_point)
