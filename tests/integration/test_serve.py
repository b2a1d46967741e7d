"""The real ``entrepot serve`` process: start, serve, stop, and the exit-2 failures."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gateway.fronts.cpus import usable_cpus
from tests.helpers import REPO_ROOT, GatewayProcess, free_port, front_pids, http_get


def _run_cli(*args: str, cwd: Path = REPO_ROOT, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout)


def test_serves_health_and_metrics_and_stops_cleanly_on_sigterm(gateway: GatewayProcess) -> None:
    status, _, body = http_get(gateway.url + "/healthz")
    assert status == 200
    status, headers, body = http_get(gateway.url + "/metrics")
    assert status == 200
    assert b"# TYPE " in body
    assert headers["Content-Type"].startswith("text/plain")
    assert gateway.stop(signal.SIGTERM) == 0
    log = gateway.log()
    assert f"listen=127.0.0.1:{gateway.port}" in log
    assert f"data_dir={gateway.data_dir}" in log
    assert "config=" in log
    assert "stopped" in log
    assert "Traceback" not in log


def test_startup_objects_leave_the_cyclic_collector_once_ready(
        gateway: GatewayProcess) -> None:
    """Full collections walked every startup object and were the REST p99 (see serve.py)."""
    deadline = time.monotonic() + 30  # an upper bound only
    while time.monotonic() < deadline:
        found = re.search(r"startup objects frozen out of the cyclic collector count=(\d+)",
                          gateway.log())
        if found:
            break
        time.sleep(0.05)
    assert found is not None, gateway.log()
    assert int(found.group(1)) > 10_000  # modules, the app, the recovered store
    status, _, _ = http_get(gateway.url + "/readyz")
    assert status == 200


def test_sigint_also_stops_with_exit_0(tmp_path: Path) -> None:
    proc = GatewayProcess(tmp_path / "data")
    proc.wait_ready()
    assert proc.stop(signal.SIGINT) == 0


def test_json_log_format(tmp_path: Path) -> None:
    import json

    proc = GatewayProcess(tmp_path / "data", extra_args=["--log-format", "json"])
    proc.wait_ready()
    assert proc.stop() == 0
    lines = [json.loads(line) for line in proc.log().splitlines() if line.strip()]
    serving = [entry for entry in lines if "entrepot serving" in entry["message"]]
    assert serving and serving[0]["logger"] == "gateway.server"
    assert serving[0]["level"] == "info"
    # Which SRMP parser runs: the build compiles it (tests/unit/gateway/test_srmp_compiled.py).
    assert "srmp_parser=compiled" in serving[0]["message"]


def test_the_default_is_one_front_per_usable_cpu(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ENTREPOT_TEST_WORKERS", raising=False)  # no --workers at all
    proc = GatewayProcess(tmp_path / "data")
    cpus = usable_cpus()
    try:
        proc.wait_ready()
        assert len(front_pids(proc.proc.pid)) == (cpus if cpus > 1 else 0)
        assert f"workers={cpus} " in proc.log()
    finally:
        assert proc.stop() == 0


def test_unknown_config_key_exits_2_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[store]\nsegmnt_size = "4MiB"\n')
    result = _run_cli("serve", "--config", str(config), "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 2
    assert "store.segmnt_size" in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("path", ["private$/entrepot_x$", "system$;deadletter", "q;journal"])
def test_a_declared_queue_no_client_may_create_exits_2_naming_it(tmp_path: Path,
                                                                 path: str) -> None:
    # Refused at start: the queue manager would refuse it once the store opened, leaving a
    # gateway that runs and answers 503 to everything.
    config = tmp_path / "queues.toml"
    config.write_text(f'[[queues]]\npath = "ok"\n\n[[queues]]\npath = "{path}"\n')
    result = _run_cli("serve", "--config", str(config), "--data-dir", str(tmp_path / "d"),
                      "--listen", f"127.0.0.1:{free_port()}")
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"queues[1].path: {path!r}" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_value_from_env_config_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[server]\nconcurrent_requests_max = -4\n')
    result = subprocess.run(
        [sys.executable, "-m", "gateway", "serve", "--data-dir", str(tmp_path / "d")],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=30,
        env={**__import__("os").environ, "ENTREPOT_CONFIG": str(config)},
    )
    assert result.returncode == 2
    assert "server.concurrent_requests_max" in result.stderr
    assert "-4" in result.stderr


def test_busy_port_exits_2_naming_the_address(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = _run_cli("serve", "--listen", f"127.0.0.1:{port}",
                          "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 2
    assert f"127.0.0.1:{port}" in result.stderr
    assert "address already in use" in result.stderr
    assert "Traceback" not in result.stderr


def test_unwritable_data_dir_exits_2(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    result = _run_cli("serve", "--listen", f"127.0.0.1:{free_port()}",
                      "--data-dir", str(blocker / "data"))
    assert result.returncode == 2
    assert str(blocker / "data") in result.stderr
    assert "Traceback" not in result.stderr


def test_data_dir_in_use_exits_2(gateway: GatewayProcess) -> None:
    result = _run_cli("serve", "--listen", f"127.0.0.1:{free_port()}",
                      "--data-dir", str(gateway.data_dir))
    assert result.returncode == 2
    assert "in use by another entrepot process" in result.stderr


def test_help_lists_commands() -> None:
    result = _run_cli("--help")
    assert result.returncode == 0
    assert "serve" in result.stdout
    result = _run_cli("serve", "--help")
    assert result.returncode == 0
    for flag in ("--config", "--listen", "--data-dir", "--log-format"):
        assert flag in result.stdout


def test_bad_listen_flag_is_a_usage_error(tmp_path: Path) -> None:
    result = _run_cli("serve", "--listen", "nowhere", "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 2
    assert "nowhere" in result.stderr


def test_defaults_are_used_without_flags(tmp_path: Path) -> None:
    """With no flags the gateway takes ./var/entrepot relative to where it runs."""
    proc = GatewayProcess(tmp_path / "unused", cwd=tmp_path)
    proc.wait_ready()
    assert proc.stop() == 0
    assert (tmp_path / "unused" / "storage").is_dir()


def test_a_mapping_directory_that_does_not_exist_is_warned_about(tmp_path: Path) -> None:
    """A mistyped --mapping-dir leaves the gateway without its mapping rules: it serves, and
    says so at start."""
    proc = GatewayProcess(tmp_path / "data",
                          extra_args=["--mapping-dir", str(tmp_path / "no-such-dir")])
    proc.wait_ready()
    assert proc.stop() == 0
    warned = [line for line in proc.log().splitlines() if "WARNING" in line
              and "no-such-dir" in line and "does not exist" in line]
    assert warned, proc.log()
