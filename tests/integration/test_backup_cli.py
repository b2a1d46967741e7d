"""``entrepot backup`` / ``restore`` from the command line, offline and against a running
gateway (which takes the backup itself)."""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import REPO_ROOT, GatewayProcess, http_get


def _cli(*args: str, preexec: Callable[[], None] | None = None
         ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True,
                          text=True, cwd=REPO_ROOT, timeout=120, preexec_fn=preexec)


def test_backup_through_a_running_gateway_then_restore(gateway: GatewayProcess,
                                                       tmp_path: Path) -> None:
    marker = json.loads((gateway.data_dir / "gateway.json").read_text())
    assert marker["url"] == gateway.url
    result = _cli("backup", str(gateway.data_dir), str(tmp_path / "bk"))
    assert result.returncode == 0, result.stderr
    assert "asking it for the backup" in result.stderr
    assert (tmp_path / "bk" / "MANIFEST.json").exists()
    assert http_get(gateway.url + "/readyz")[0] == 200
    again = _cli("backup", str(gateway.data_dir), str(tmp_path / "bk"))
    assert again.returncode == 2
    assert "not empty" in again.stderr
    # A backup inside the data directory it copies would be lost with it (and its files
    # audited as strangers'): refused, nothing written.
    for inside in (gateway.data_dir / "bk", gateway.data_dir / "storage" / "bk"):
        refused = _cli("backup", str(gateway.data_dir), str(inside))
        assert refused.returncode == 2 and "inside the data directory" in refused.stderr
        assert not inside.exists()
    restored = _cli("restore", str(tmp_path / "bk"), str(tmp_path / "restored"))
    assert restored.returncode == 0, restored.stderr
    assert "restored" in restored.stdout
    assert (tmp_path / "restored" / "storage").is_dir()


def test_offline_backup_and_restore_commands(tmp_path: Path) -> None:
    proc = GatewayProcess(tmp_path / "data")
    proc.wait_ready()
    assert proc.stop() == 0
    assert not (tmp_path / "data" / "gateway.json").exists(), "removed at a clean stop"
    assert _cli("backup", str(tmp_path / "data"), str(tmp_path / "bk")).returncode == 0
    refused = _cli("backup", str(tmp_path / "data"), str(tmp_path / "data" / "storage" / "x"))
    assert refused.returncode == 2 and "inside the data directory" in refused.stderr
    assert not (tmp_path / "data" / "storage" / "x").exists()
    bad = _cli("restore", str(tmp_path / "bk"), str(tmp_path / "data"))
    assert bad.returncode == 2
    assert "not empty" in bad.stderr
    assert _cli("restore", str(tmp_path / "nope"), str(tmp_path / "r")).returncode == 2
    # A copy that fails midway (here a file-size limit, as a full disk would) leaves its
    # target as it was, new or empty, and says so: no half backup to be taken for a whole
    # one, no half-restored data directory to be started or checked as whole.
    for command, source in (("backup", "data"), ("restore", "bk")):
        for made in (False, True):
            target = tmp_path / f"{command}-{made}"
            if made:
                target.mkdir()
            failed = _cli(command, str(tmp_path / source), str(target),
                          preexec=_file_size_limit)
            assert failed.returncode == 1, failed.stderr
            assert "failed" in failed.stderr and "nothing was kept" in failed.stderr
            assert "Traceback" not in failed.stderr
            assert (sorted(target.iterdir()) == []) if made else not target.exists()

def _file_size_limit() -> None:
    """In the child: files cannot grow past 64 KiB (EFBIG, not SIGXFSZ)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, resource.RLIM_INFINITY))


@pytest.mark.parametrize("body", [b"[1]", b'{"dest": "relative/dir"}', b'{"dest": ""}'])
def test_admin_backup_route_validates_its_body(gateway: GatewayProcess, body: bytes) -> None:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(gateway.url + "/v1/admin/backup", data=body,
                                     method="POST")
    try:
        urllib.request.urlopen(request, timeout=5)
        raise AssertionError("expected 400")
    except urllib.error.HTTPError as exc:
        assert exc.code == 400
        assert exc.headers["Content-Type"] == "application/problem+json"
    assert not (REPO_ROOT / "relative").exists()  # the gateway runs in the checkout


def test_backup_under_load_restores_every_message_acknowledged_before_it(
        gateway: GatewayProcess, tmp_path: Path) -> None:
    import threading
    import urllib.request

    def post(path: str, data: bytes, method: str = "POST") -> None:
        urllib.request.urlopen(urllib.request.Request(gateway.url + path, data=data,
                                                      method=method), timeout=10).read()

    post("/v1/queues/loaded", b"{}", "PUT")
    acked: list[int] = []
    stop = threading.Event()

    def producer() -> None:
        index = 0
        while not stop.is_set():
            post("/v1/queues/loaded/messages", f"m{index}".encode())
            acked.append(index)  # appended only once the 201 came back
            index += 1

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    while len(acked) < 300:
        threading.Event().wait(0.01)
    before = len(acked)  # everything acknowledged before the backup starts
    result = _cli("backup", str(gateway.data_dir), str(tmp_path / "bk"))
    stop.set()
    thread.join(10)
    assert result.returncode == 0, result.stderr
    assert len(acked) > before, "the producer kept going during the backup"
    assert _cli("restore", str(tmp_path / "bk"), str(tmp_path / "restored")).returncode == 0
    restored = GatewayProcess(tmp_path / "restored")
    try:
        restored.wait_ready()
        bodies: set[bytes] = set()
        after = 0
        while True:
            _, _, raw = http_get(f"{restored.url}/v1/queues/loaded/messages?after={after}"
                                 "&limit=1000")
            page = json.loads(raw)
            if not page["messages"]:
                break
            import base64
            bodies.update(base64.b64decode(m["body_base64"]) for m in page["messages"])
            after = page["next"]
        missing = [i for i in range(before) if f"m{i}".encode() not in bodies]
        assert missing == [], f"{len(missing)} acknowledged messages missing"
    finally:
        restored.stop()


def test_backup_through_a_gateway_with_credentials_takes_the_admin_key(tmp_path: Path
                                                                       ) -> None:
    """Without the key the gateway's refusal is exit 1 naming how to give it; --token, a
    --token-file and $ENTREPOT_TOKEN (as the admin commands take it) each give it."""
    import hashlib
    import os

    config = tmp_path / "entrepot.toml"
    config.write_text('[auth]\nadmin_key_sha256 = "%s"\n'
                      % hashlib.sha256(b"admin-key").hexdigest())
    (tmp_path / "key").write_text("admin-key\n")
    gateway = GatewayProcess(tmp_path / "data", env={"ENTREPOT_CONFIG": str(config)})
    try:
        gateway.wait_ready()
        data = str(gateway.data_dir)
        env = {k: v for k, v in os.environ.items() if not k.startswith("ENTREPOT_")}
        refused = subprocess.run([sys.executable, "-m", "gateway", "backup", data,
                                  str(tmp_path / "b0")], capture_output=True, text=True,
                                 cwd=REPO_ROOT, timeout=120, env=env)
        assert refused.returncode == 1, refused.stderr
        assert "--token" in refused.stderr and "Traceback" not in refused.stderr
        for name, extra, extra_env in (
                ("b1", ["--token", "admin-key"], {}),
                ("b2", ["--token-file", str(tmp_path / "key")], {}),
                ("b3", [], {"ENTREPOT_TOKEN": "admin-key"})):
            done = subprocess.run([sys.executable, "-m", "gateway", "backup", data,
                                   str(tmp_path / name), *extra], capture_output=True,
                                  text=True, cwd=REPO_ROOT, timeout=120,
                                  env={**env, **extra_env})
            assert done.returncode == 0, (name, done.stderr)
            assert (tmp_path / name / "MANIFEST.json").exists()
    finally:
        gateway.stop()


@pytest.mark.parametrize("online", [True, False], ids=["through-the-gateway", "offline"])
def test_a_restore_is_the_same_queue_manager_with_its_prepared_transactions(
        tmp_path: Path, online: bool) -> None:
    """A restored gateway keeps the GUID (message ids, SRMP streams and receipts carry it)
    and its prepared transactions' ids, owners and times (their coordinators hold the ids):
    without them it would be another queue manager, its in-doubt transactions the admin's
    under new ids."""
    import urllib.request

    def call(url: str, method: str, data: bytes = b"", tx: str = "") -> Any:
        headers = {"Mq-Transaction": tx} if tx else {}
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        with urllib.request.urlopen(request, timeout=30) as answer:
            body = answer.read()
            return json.loads(body) if body else None

    data = tmp_path / "data"
    proc = GatewayProcess(data)
    proc.wait_ready()
    try:
        call(proc.url + "/v1/queues/private$/t", "PUT", b'{"transactional": true}')
        sent = call(proc.url + "/v1/queues/private$/t/messages", "POST", b"kept", "single")
        tx = call(proc.url + "/v1/transactions", "POST")["id"]
        call(proc.url + "/v1/queues/private$/t/messages", "POST", b"held", tx)
        prepared = call(f"{proc.url}/v1/transactions/{tx}/prepare", "POST")
        if online:
            assert _cli("backup", str(data), str(tmp_path / "bk")).returncode == 0
    finally:
        assert proc.stop() == 0
    if not online:
        assert _cli("backup", str(data), str(tmp_path / "bk")).returncode == 0
    restored_dir = tmp_path / "restored"
    result = _cli("restore", str(tmp_path / "bk"), str(restored_dir))
    assert result.returncode == 0, result.stderr
    assert (restored_dir / "qm.json").read_text() == (data / "qm.json").read_text()
    restored = GatewayProcess(restored_dir)
    restored.wait_ready()
    try:
        [shown] = call(restored.url + "/v1/transactions", "GET")["transactions"]
        assert shown == prepared
        page = call(restored.url + "/v1/queues/private$/t/messages", "GET")
        assert [m["id"] for m in page["messages"]] == [sent["id"]]
        call(f"{restored.url}/v1/transactions/{tx}/commit", "POST")
        page = call(restored.url + "/v1/queues/private$/t/messages", "GET")
        assert len(page["messages"]) == 2
    finally:
        assert restored.stop() == 0


def test_restore_checks_the_identity_a_backup_holds(tmp_path: Path) -> None:
    """A qm.json without a GUID is a damaged backup (exit 2, nothing restored); a backup
    without one (an older version's) restores, with a warning that the restored gateway is
    another queue manager."""
    import hashlib

    proc = GatewayProcess(tmp_path / "data")
    proc.wait_ready()
    assert proc.stop() == 0
    assert _cli("backup", str(tmp_path / "data"), str(tmp_path / "bk")).returncode == 0
    manifest_path = tmp_path / "bk" / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text())
    bad = b'{"guid": "not-a-guid"}'
    (tmp_path / "bk" / "qm.json").write_bytes(bad)
    manifest["files"]["qm.json"] = {"size": len(bad), "sha256": hashlib.sha256(bad).hexdigest()}
    manifest_path.write_text(json.dumps(manifest))
    refused = _cli("restore", str(tmp_path / "bk"), str(tmp_path / "r1"))
    assert refused.returncode == 2 and "holds no queue manager GUID" in refused.stderr
    assert not (tmp_path / "r1").exists()

    (tmp_path / "bk" / "qm.json").unlink()
    del manifest["files"]["qm.json"]
    manifest_path.write_text(json.dumps(manifest))
    older = _cli("restore", str(tmp_path / "bk"), str(tmp_path / "r2"))
    assert older.returncode == 0, older.stderr
    assert "holds no qm.json" in older.stderr and "another queue manager" in older.stderr


@pytest.mark.parametrize("text", ['{"guid": "not-a-guid"}', "{", '{"guid": 5}'],
                         ids=["not-a-guid", "cut", "number"])
async def test_a_start_on_a_qm_json_without_a_guid_says_so_and_does_not_serve(
        aiohttp_client: Any, settings_factory: Any, text: str) -> None:
    """The GUID is in every message id: a gateway whose qm.json holds none does not serve
    under some other name; it stays not ready and says what to do."""
    import asyncio

    from gateway.web.app import make_app
    from gateway.web.appkeys import STATE_KEY

    settings = settings_factory()
    Path(settings.store.data_dir).mkdir(parents=True, exist_ok=True)
    (Path(settings.store.data_dir) / "qm.json").write_text(text)
    app = make_app(settings)
    client = await aiohttp_client(app)
    for _ in range(3000):  # until the start has failed (an upper bound only)
        assert not app[STATE_KEY].ready
        if app[STATE_KEY].failure is not None:
            break
        await asyncio.sleep(0.01)
    answer = await client.get("/readyz")
    assert answer.status == 503
    assert "holds no queue manager GUID" in await answer.text()


def test_a_restore_with_damaged_records_says_what_it_kept(tmp_path: Path) -> None:
    """Exit 1, and stderr says where the damaged records went and that the rest is restored
    and kept (a script retrying would otherwise meet a DATA_DIR that is not empty)."""
    import hashlib
    import urllib.request

    proc = GatewayProcess(tmp_path / "data")
    proc.wait_ready()
    try:
        urllib.request.urlopen(urllib.request.Request(
            proc.url + "/v1/queues/q", data=b"{}", method="PUT"), timeout=30).read()
        for _ in range(3):
            urllib.request.urlopen(urllib.request.Request(
                proc.url + "/v1/queues/q/messages", data=b"B" * 4000), timeout=30).read()
    finally:
        assert proc.stop() == 0
    assert _cli("backup", str(tmp_path / "data"), str(tmp_path / "bk")).returncode == 0
    manifest_path = tmp_path / "bk" / "MANIFEST.json"
    manifest = json.loads(manifest_path.read_text())
    [segment] = [name for name in manifest["files"] if name.startswith("storage/p")
                 and b"B" * 4000 in (tmp_path / "bk" / name).read_bytes()]
    data = bytearray((tmp_path / "bk" / segment).read_bytes())
    at = data.find(b"B" * 4000) + 2000  # inside a body: its record's CRC fails
    data[at] ^= 0xFF
    (tmp_path / "bk" / segment).write_bytes(data)
    manifest["files"][segment] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest_path.write_text(json.dumps(manifest))
    result = _cli("restore", str(tmp_path / "bk"), str(tmp_path / "restored"))
    assert result.returncode == 1, result.stderr
    assert "quarantine/: 1;" in result.stderr
    assert "kept in" in result.stderr and (tmp_path / "restored" / "storage").is_dir()


async def test_a_restore_onto_a_disk_without_room_for_the_reserve_warns(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Restored whole (exit 0), but a gateway started there would refuse new messages: the
    restore says so rather than leave it to the first 507."""
    import errno

    from gateway.cli.offline import run_restore
    from store.backup import backup_offline
    from tests.store.test_backup import _filled

    await _filled(tmp_path / "data")
    backup_offline(tmp_path / "data", tmp_path / "bk")

    def full(*_: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("store.space.reserve_file", full)
    assert run_restore(tmp_path / "bk", tmp_path / "restored") == 0
    err = capsys.readouterr().err
    assert (f"entrepot: {tmp_path / 'restored'}'s disk has no room left for the store's space "
            "reserve (1048576 bytes): a gateway started on it refuses new messages (507) until "
            "room is made") in err, err
