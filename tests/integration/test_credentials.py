"""Secrets handed over by systemd's LoadCredential=: a file key set to ``credential:NAME``
reads ``$CREDENTIALS_DIRECTORY/NAME`` (the unit's DynamicUser cannot read root's 0600
files), a key hash set so is read from that file, and a missing credential stops the start
naming the key."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.auth.tls import create_self_signed
from gateway.credentials import resolve_credentials
from gateway.errors import ConfigError
from gateway.settings import parse_settings
from tests.helpers import REPO_ROOT, GatewayProcess, free_port, http_get, http_request


def _serve(config: Path, data: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A start that is expected to fail at once (a ready gateway would not return)."""
    clean = {k: v for k, v in os.environ.items() if k != "CREDENTIALS_DIRECTORY"}
    return subprocess.run([sys.executable, "-m", "gateway", "serve", "--config", str(config),
                           "--listen", f"127.0.0.1:{free_port()}", "--data-dir", str(data)],
                          capture_output=True, text=True, timeout=60, cwd=REPO_ROOT,
                          env={**clean, **env})


def test_tls_pair_from_the_credentials_directory(tmp_path: Path) -> None:
    credentials = tmp_path / "credentials"
    cert, _ = create_self_signed(credentials, common_name="localhost", names=["127.0.0.1"],
                                 days=2)
    config = tmp_path / "entrepot.toml"
    config.write_text('[server]\ntls_cert = "credential:cert.pem"\n'
                      'tls_key = "credential:key.pem"\n')
    gateway = GatewayProcess(tmp_path / "data", extra_args=["--config", str(config)],
                             env={"CREDENTIALS_DIRECTORY": str(credentials)}, cafile=cert)
    try:
        gateway.wait_ready()
        assert http_get(gateway.url + "/readyz", cafile=cert)[0] == 200
    finally:
        assert gateway.stop() == 0


def test_without_credentials_directory_the_start_names_the_key(tmp_path: Path) -> None:
    config = tmp_path / "entrepot.toml"
    config.write_text('[[partners]]\nname = "acme"\nhmac_secret_file = "credential:acme"\n')
    done = _serve(config, tmp_path / "data", {})
    assert done.returncode == 2
    assert "partners[0].hmac_secret_file" in done.stderr
    assert "$CREDENTIALS_DIRECTORY is not set" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_credential_missing_from_the_directory_names_key_and_name(tmp_path: Path) -> None:
    (tmp_path / "credentials").mkdir()
    config = tmp_path / "entrepot.toml"
    config.write_text('[server]\ntls_cert = "credential:cert.pem"\n'
                      'tls_key = "credential:key.pem"\n')
    done = _serve(config, tmp_path / "data",
                  {"CREDENTIALS_DIRECTORY": str(tmp_path / "credentials")})
    assert done.returncode == 2
    assert "server.tls_cert: credential 'cert.pem' is not in $CREDENTIALS_DIRECTORY" \
        in done.stderr


def test_every_file_key_takes_a_credential(tmp_path: Path) -> None:
    names = ["tls.crt", "tls.key", "ca.pem", "acme.secret", "hook.secret", "peer-ca.pem",
             "peer.crt", "peer.key"]
    for name in names:
        (tmp_path / name).write_text(name)
    settings = parse_settings({
        "server": {"tls_cert": "credential:tls.crt", "tls_key": "credential:tls.key",
                   "tls_client_ca": "credential:ca.pem"},
        "partners": [{"name": "acme", "hmac_secret_file": "credential:acme.secret"}],
        "webhooks": [{"url": "https://hook.example/*",
                      "hmac_secret_file": "credential:hook.secret"}],
        "peers": [{"url": "https://peer.example/msmq/*", "cafile": "credential:peer-ca.pem",
                   "client_cert": "credential:peer.crt", "client_key": "credential:peer.key"}],
    })
    resolved = resolve_credentials(settings, str(tmp_path))
    server, peer = resolved.server, resolved.peers[0]
    assert [server.tls_cert, server.tls_key, server.tls_client_ca,
            resolved.partners[0].hmac_secret_file, resolved.webhooks[0].hmac_secret_file,
            peer.cafile, peer.client_cert, peer.client_key] == [str(tmp_path / n) for n in names]
    assert resolved.partners[0].name == "acme" and resolved.peers[0].url == settings.peers[0].url


@pytest.mark.parametrize(("value", "fragment"), [
    ("credential:../tls.key", "peers[0].client_key: 'credential:../tls.key': a credential name"),
    ("credential:", "peers[0].client_key: 'credential:': a credential name"),
])
def test_a_credential_name_is_one_file_of_the_directory(tmp_path: Path, value: str,
                                                        fragment: str) -> None:
    settings = parse_settings({"peers": [{"url": "https://p.example/*",
                                          "client_cert": "/etc/c.pem", "client_key": value}]})
    with pytest.raises(ConfigError) as caught:
        resolve_credentials(settings, str(tmp_path))
    assert fragment in str(caught.value)


def test_plain_paths_are_left_alone(tmp_path: Path) -> None:
    settings = parse_settings({"server": {"tls_cert": "/etc/c.pem", "tls_key": "/etc/k.pem"}})
    assert resolve_credentials(settings, None) == settings


def test_the_admin_key_hash_from_a_credential_guards_the_gateway(tmp_path: Path) -> None:
    key = "a long random admin key for the credential test"
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    (credentials / "admin.sha256").write_text(hashlib.sha256(key.encode()).hexdigest().upper()
                                              + "\n")
    config = tmp_path / "entrepot.toml"
    config.write_text('[auth]\nadmin_key_sha256 = "credential:admin.sha256"\n')
    gateway = GatewayProcess(tmp_path / "data", extra_args=["--config", str(config)],
                             env={"CREDENTIALS_DIRECTORY": str(credentials)})
    try:
        gateway.wait_ready()
        assert http_request(gateway.url + "/v1/queues", method="GET") == 401
        assert http_request(gateway.url + "/v1/queues", method="GET",
                            headers={"Authorization": f"Bearer {key}"}) == 200
    finally:
        assert gateway.stop() == 0


@pytest.mark.parametrize("content", ["not a digest\n", "ab" * 31, ""])
def test_a_key_hash_credential_must_hold_64_hex_digits(tmp_path: Path, content: str) -> None:
    (tmp_path / "metrics.sha256").write_text(content)
    settings = parse_settings({"auth": {"metrics_key_sha256": "credential:metrics.sha256"}})
    with pytest.raises(ConfigError) as caught:
        resolve_credentials(settings, str(tmp_path))
    assert str(caught.value).startswith("auth.metrics_key_sha256: credential 'metrics.sha256'")
    assert "64 hex digits" in str(caught.value)


def test_a_key_hash_credential_of_the_empty_key_is_refused(tmp_path: Path) -> None:
    empty = hashlib.sha256(b"").hexdigest()
    (tmp_path / "admin.sha256").write_text(f"sha256  {empty}\n")  # `hash-key ''` printed it
    settings = parse_settings({"auth": {"admin_key_sha256": "credential:admin.sha256"}})
    with pytest.raises(ConfigError) as caught:
        resolve_credentials(settings, str(tmp_path))
    assert "auth.admin_key_sha256: credential 'admin.sha256': the SHA-256 of an empty key" in (
        str(caught.value))


def test_every_key_hash_takes_a_credential(tmp_path: Path) -> None:
    digests = {name: hashlib.sha256(name.encode()).hexdigest()
               for name in ("admin", "metrics", "acme")}
    for name, digest in digests.items():
        (tmp_path / name).write_text(digest + "\n")
    (tmp_path / "acme").write_text(f"sha256  {digests['acme']}\n")  # as `auth hash-key` prints
    settings = parse_settings({
        "auth": {"admin_key_sha256": "credential:admin",
                 "metrics_key_sha256": "credential:metrics"},
        "partners": [{"name": "acme", "api_key_sha256": "credential:acme"}]})
    resolved = resolve_credentials(settings, str(tmp_path))
    assert [resolved.auth.admin_key_sha256, resolved.auth.metrics_key_sha256,
            resolved.partners[0].api_key_sha256] == list(digests.values())
