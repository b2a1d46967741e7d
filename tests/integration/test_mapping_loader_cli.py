"""Mapping directory loading (a broken file keeps its previous rules) and the CLI."""

from __future__ import annotations

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


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", "mapping", *args],
                          capture_output=True, text=True, cwd=REPO_ROOT, timeout=60)


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
