"""Mapping directory loading (a broken file keeps its previous rules) and the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mapping.engine import route_inbound
from mapping.loader import MappingLoader
from tests.helpers import REPO_ROOT


def _redirection(source: str, target: str) -> str:
    return (f'<redirections xmlns="msmq-queue-redirections.xml"><redirection>'
            f"<from>{source}</from><to>{target}</to></redirection></redirections>")


def test_a_broken_new_version_keeps_the_previous_rules(tmp_path: Path) -> None:
    (tmp_path / "a.xml").write_text(_redirection("http://gw/msmq/a", "private$/a1"))
    (tmp_path / "b.xml").write_text(_redirection("http://gw/msmq/b", "private$/b1"))
    loader = MappingLoader(tmp_path)
    report = loader.load()
    assert report.loaded == ["a.xml", "b.xml"] and not report.rejected
    assert not loader.changed()
    (tmp_path / "a.xml").write_text("<redirections")  # broken while being edited
    (tmp_path / "b.xml").write_text(_redirection("http://gw/msmq/b", "private$/b2"))
    assert loader.changed()
    report = loader.load()
    assert [e.source for e in report.rejected] == ["a.xml"]
    assert report.kept_previous == ["a.xml"]
    assert route_inbound(loader.rules, "http://gw/msmq/a").target == "private$/a1"  # type: ignore[union-attr]
    assert route_inbound(loader.rules, "http://gw/msmq/b").target == "private$/b2"  # type: ignore[union-attr]
    assert (loader.reloads, loader.rejected_total) == (2, 1)


def test_a_broken_file_on_first_load_applies_nothing_but_others_work(tmp_path: Path) -> None:
    (tmp_path / "bad.xml").write_text("<!DOCTYPE x><x/>")
    (tmp_path / "good.xml").write_text(_redirection("http://gw/msmq/q", "private$/q"))
    loader = MappingLoader(tmp_path)
    report = loader.load()
    assert [e.source for e in report.rejected] == ["bad.xml"]
    assert route_inbound(loader.rules, "http://gw/msmq/q") is not None


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", "mapping", *args],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=60,
                          env={**os.environ, **(env or {})})


def test_mapping_commands_read_the_configuration_serve_reads(tmp_path: Path) -> None:
    """$ENTREPOT_CONFIG names the configuration for the mapping commands as for serve."""
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "in.xml").write_text(_redirection(
        "https://www.example.com/msmq/orderq", "https://orders/msmq/private$/orderq"))
    config = tmp_path / "entrepot.toml"
    config.write_text(f'[mapping]\ndir = "{tmp_path / "rules"}"\n')
    result = _cli("check", env={"ENTREPOT_CONFIG": str(config)})
    assert result.returncode == 0, result.stderr
    assert "https://www.example.com/msmq/orderq" in result.stdout


def test_mapping_check_prints_the_table_and_problems(tmp_path: Path) -> None:
    (tmp_path / "in.xml").write_text(_redirection("https://www.example.com/msmq/orderq",
                                                  "https://orders/msmq/private$/orderq"))
    result = _cli("check", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "inbound" in result.stdout and "https://www.example.com/msmq/orderq" in result.stdout
    (tmp_path / "broken.xml").write_text("<redirections")
    result = _cli("check", str(tmp_path))
    assert result.returncode == 1
    assert "PROBLEM broken.xml" in result.stdout


def test_mapping_explain_says_which_rule_applies(tmp_path: Path) -> None:
    (tmp_path / "in.xml").write_text(_redirection("https://www.example.com/msmq/*",
                                                  "https://orders/msmq/private$/orderq"))
    result = _cli("explain", "HTTPS://WWW.EXAMPLE.COM/msmq/anything", "--dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "https://orders/msmq/private$/orderq" in result.stdout
    assert "in.xml#1" in result.stdout
    missing = _cli("check", str(tmp_path / "nope"))
    assert missing.returncode == 2
    assert "no such mapping directory" in missing.stderr
    for address in ("not a url", "", "ftp://host/msmq/q", "http:///msmq/q"):
        refused = _cli("explain", address, "--dir", str(tmp_path))
        assert refused.returncode == 2 and "expected an http(s) queue URL" in refused.stderr, (
            address, refused.stdout, refused.stderr)


async def test_the_gateway_reloads_mapping_on_change(aiohttp_client: object,
                                                     settings_factory: object,
                                                     tmp_path: Path) -> None:
    import asyncio

    from gateway.web.appkeys import STATE_KEY
    from tests.helpers import ready_client

    directory = tmp_path / "mapping"
    directory.mkdir()
    (directory / "a.xml").write_text(_redirection("http://gw/msmq/a", "private$/a1"))
    settings = settings_factory(mapping__dir=str(directory),  # type: ignore[operator]
                                mapping__reload_interval="100ms")
    client = await ready_client(aiohttp_client, settings)
    state = client.app[STATE_KEY]
    assert route_inbound(state.mapping.rules, "http://gw/msmq/a").target == "private$/a1"
    (directory / "a.xml").write_text(_redirection("http://gw/msmq/a", "private$/a2"))
    for _ in range(600):  # an upper bound only
        found = route_inbound(state.mapping.rules, "http://gw/msmq/a")
        if found is not None and found.target == "private$/a2":
            break
        await asyncio.sleep(0.05)
    assert route_inbound(state.mapping.rules, "http://gw/msmq/a").target == "private$/a2"
    text = await (await client.get("/metrics")).text()
    assert "entrepot_mapping_reloads_total 2.0" in text


def test_sighup_reloads_the_mapping_of_a_running_gateway(tmp_path: Path) -> None:
    import signal
    import time

    from tests.helpers import GatewayProcess, http_get

    directory = tmp_path / "mapping"
    directory.mkdir()
    config = tmp_path / "entrepot.toml"
    config.write_text(f'[mapping]\ndir = "{directory}"\nreload_interval = "1h"\n')
    gateway = GatewayProcess(tmp_path / "data", extra_args=["--config", str(config)])
    try:
        gateway.wait_ready()
        (directory / "bad.xml").write_text("<redirections")
        gateway.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 30  # an upper bound only
        text = ""
        while time.monotonic() < deadline:
            text = http_get(gateway.url + "/metrics")[2].decode()
            if "entrepot_mapping_rejected_files_total 1.0" in text:
                break
            time.sleep(0.05)
        assert "entrepot_mapping_rejected_files_total 1.0" in text
        assert "entrepot_mapping_reloads_total 2.0" in text
    finally:
        assert gateway.stop() == 0
