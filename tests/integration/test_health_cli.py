"""`entrepot health`: the container's HEALTHCHECK. It reads the configuration `serve` reads
and asks /readyz on that listener (http or https, its port), exit 0 ready, 1 anything else
(Docker reserves 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO_ROOT, GatewayProcess, free_port, tls_server_config


def _health(config: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", "health", "--config", str(config),
                           *extra], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)


def test_ready_over_http_then_down_after_stop(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "entrepot.toml"
    config.write_text(f'[server]\nlisten = "127.0.0.1:{port}"\n')
    gateway = GatewayProcess(tmp_path / "data", extra_args=["--config", str(config)], port=port)
    try:
        gateway.wait_ready()
        ready = _health(config)
        assert ready.returncode == 0, ready.stderr
        assert f"http://127.0.0.1:{port}/readyz: ready" in ready.stdout
    finally:
        assert gateway.stop() == 0
    down = _health(config)
    assert down.returncode == 1
    assert f"http://127.0.0.1:{port}/readyz" in down.stderr


def test_follows_a_tls_listener(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "entrepot.toml"
    config.write_text(tls_server_config(tmp_path, "client")
                      + f'listen = "127.0.0.1:{port}"\n')
    gateway = GatewayProcess(tmp_path / "data", extra_args=["--config", str(config)], port=port,
                             cafile=tmp_path / "server" / "cert.pem")
    try:
        gateway.wait_ready()
        ready = _health(config)
        assert ready.returncode == 0, ready.stderr
        assert f"https://127.0.0.1:{port}/readyz: ready" in ready.stdout
        verified = _health(config, "--cafile", str(tmp_path / "server" / "cert.pem"))
        assert verified.returncode == 0, verified.stderr
        wrong_ca = _health(config, "--cafile", str(tmp_path / "client" / "cert.pem"))
        assert wrong_ca.returncode == 1 and "CERTIFICATE_VERIFY_FAILED" in wrong_ca.stderr
    finally:
        assert gateway.stop() == 0


def test_a_wildcard_listener_is_asked_on_loopback(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "entrepot.toml"
    config.write_text(f'[server]\nlisten = "0.0.0.0:{port}"\n')
    down = _health(config)
    assert down.returncode == 1
    assert f"http://127.0.0.1:{port}/readyz" in down.stderr


def test_a_bad_configuration_is_unhealthy_not_a_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "entrepot.toml"
    config.write_text('[server]\nlisten = "nowhere"\n')
    done = _health(config)
    assert done.returncode == 1, "Docker reserves exit code 2"
    assert "server.listen" in done.stderr


def test_a_ca_file_that_cannot_be_loaded_is_named(tmp_path: Path) -> None:
    """Not a traceback: the operator is told which file (health: 1; the admin commands: 2,
    a usage error, as a --token-file that cannot be read)."""
    config = tmp_path / "entrepot.toml"
    config.write_text(tls_server_config(tmp_path, "client")
                      + f'listen = "127.0.0.1:{free_port()}"\n')
    (tmp_path / "not-a-ca.pem").write_text("not a certificate\n")
    for cafile in (tmp_path / "missing.pem", tmp_path / "not-a-ca.pem"):
        done = _health(config, "--cafile", str(cafile))
        assert done.returncode == 1 and f"--cafile {cafile}: cannot load it" in done.stderr
        assert "Traceback" not in done.stderr
        admin = subprocess.run([sys.executable, "-m", "gateway", "queue", "list", "--url",
                                "https://127.0.0.1:9", "--cafile", str(cafile)],
                               capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
        assert admin.returncode == 2 and f"--cafile {cafile}: cannot load it" in admin.stderr
        assert "Traceback" not in admin.stderr
