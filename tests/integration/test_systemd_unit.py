"""The shipped unit as `make install` lays it out: `systemd-analyze verify` passes on the
installed files and `systemd-analyze security --offline=true` scores it at most 2.5; and
(marked slow) a full install that makes its own virtualenv serves as the unit starts it.

systemd-analyze comes with Debian's systemd package, which machines of this project carry
(.ci/run installs it when missing): without it these tests fail, naming the package."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO_ROOT, free_port, http_request

EXPOSURE_MAX = 2.5


def _analyze() -> str:
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.fail("systemd-analyze is missing: install Debian's systemd package "
                    "(apt-get install systemd)")
    return tool


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """`make install` into a temporary layout, reusing this checkout's virtualenv."""
    root = tmp_path_factory.mktemp("install")
    layout = {"PREFIX": root / "opt" / "entrepot", "SYSCONFDIR": root / "etc" / "entrepot",
              "UNITDIR": root / "etc" / "systemd" / "system",
              "VIRTUALENV": Path(sys.prefix)}
    done = subprocess.run(["make", "--no-print-directory", "install",
                           *(f"{key}={value}" for key, value in layout.items())],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return layout


def test_install_lays_out_the_documented_files(installed: dict[str, Path]) -> None:
    etc = installed["SYSCONFDIR"]
    unit = (installed["UNITDIR"] / "entrepot.service").read_text()
    assert (etc / "entrepot.toml").read_text() == (REPO_ROOT / "config" / "entrepot.toml"
                                                   ).read_text()
    assert (etc / "mapping").is_dir()
    assert (etc / "credentials").stat().st_mode & 0o777 == 0o700, "secrets: root only"
    assert (installed["PREFIX"] / "doc" / "operations.md").is_file()
    exec_start = re.search(r"^ExecStart=(\S+)", unit, re.M)
    assert exec_start is not None
    assert exec_start.group(1) == f"{installed['VIRTUALENV']}/bin/entrepot"
    assert f"Environment=ENTREPOT_CONFIG={etc}/entrepot.toml" in unit
    # The data directory is a state directory of its own ($STATE_DIRECTORY would list all).
    states = re.search(r"^StateDirectory=(.+)$", unit, re.M)
    assert states is not None and "entrepot" in states.group(1).split()
    assert "--data-dir %S/entrepot " in unit and "STATE_DIRECTORY}" not in unit
    assert f"--mapping-dir {etc}/mapping" in unit
    assert f"LoadCredential=entrepot:{etc}/credentials" in unit
    outside = unit.replace(str(installed["PREFIX"]), "").replace(str(etc), "")
    assert "/opt/entrepot" not in outside and "/etc/entrepot" not in outside, "all rewritten"


def test_the_installed_unit_verifies(installed: dict[str, Path]) -> None:
    unit = installed["UNITDIR"] / "entrepot.service"
    done = subprocess.run([_analyze(), "verify", str(unit)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "SYSTEMD_LOG_LEVEL": "notice"})
    problems = [line for line in done.stderr.splitlines() if "entrepot.service" in line]
    assert done.returncode == 0 and problems == [], done.stderr


def test_the_installed_unit_scores_at_most_2_5(installed: dict[str, Path]) -> None:
    unit = installed["UNITDIR"] / "entrepot.service"
    done = subprocess.run([_analyze(), "security", "--offline=true", "--no-pager", str(unit)],
                          capture_output=True, text=True, timeout=60)
    found = re.search(r"Overall exposure level for entrepot\.service: (\d+\.\d+)", done.stdout)
    assert found is not None, done.stdout + done.stderr
    assert float(found.group(1)) <= EXPOSURE_MAX, done.stdout


@pytest.mark.parametrize(("interpreter", "warned"), [
    ("/root/.pyenv/versions/3.11.7/bin/python3", True), ("/home/ops/py/bin/python3", True),
    ("/usr/bin/python3", False)])
def test_install_warns_of_an_interpreter_protecthome_hides(tmp_path: Path, interpreter: str,
                                                           warned: bool) -> None:
    # Under a real systemd, a virtualenv made with pyenv's interpreter (under /root) failed
    # every start with status 203/EXEC: the unit's ProtectHome=yes hides it.
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "entrepot").write_text("#!/bin/sh\n")
    (venv / "bin" / "entrepot").chmod(0o755)
    (venv / "bin" / "python").symlink_to(interpreter)
    done = subprocess.run(["sh", str(REPO_ROOT / "systemd" / "install.sh")],
                          env={**os.environ, "PREFIX": str(tmp_path / "opt"),
                               "SYSCONFDIR": str(tmp_path / "etc"),
                               "UNITDIR": str(tmp_path / "units"), "VIRTUALENV": str(venv)},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (interpreter in done.stderr and "ProtectHome=yes" in done.stderr
            and "203/EXEC" in done.stderr) == warned, done.stderr
    assert (tmp_path / "units" / "entrepot.service").exists()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_full_install_serves_as_the_unit_starts_it(tmp_path: Path) -> None:
    """`make install` making its own virtualenv (from PyPI, mypyc build: minutes), then the
    installed entrepot started with the unit's command line, configuration and credentials."""
    prefix, etc = tmp_path / "opt" / "entrepot", tmp_path / "etc" / "entrepot"
    done = subprocess.run(["make", "--no-print-directory", "install", f"PREFIX={prefix}",
                           f"SYSCONFDIR={etc}", f"UNITDIR={tmp_path / 'units'}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=1700)
    assert done.returncode == 0, done.stdout + done.stderr
    entrepot = prefix / "venv" / "bin" / "entrepot"
    credentials = tmp_path / "credentials"
    credentials.mkdir()
    key = "a long random admin key for the installed gateway"
    (credentials / "entrepot_admin.sha256").write_text(
        subprocess.run([str(entrepot), "auth", "hash-key", key], capture_output=True,
                       text=True, check=True).stdout)
    port = free_port()
    (etc / "entrepot.toml").write_text(
        f'[server]\nlisten = "127.0.0.1:{port}"\n'
        '[auth]\nadmin_key_sha256 = "credential:entrepot_admin.sha256"\n')
    env = {**os.environ, "ENTREPOT_CONFIG": str(etc / "entrepot.toml"),
           "CREDENTIALS_DIRECTORY": str(credentials)}
    log = (tmp_path / "serve.log").open("wb")
    serve = subprocess.Popen([str(entrepot), "serve", "--data-dir", str(tmp_path / "data"),
                              "--mapping-dir", str(etc / "mapping")], cwd=tmp_path, env=env,
                             stdout=log, stderr=subprocess.STDOUT)
    try:
        while True:  # until ready; the test's timeout bounds it
            assert serve.poll() is None, (tmp_path / "serve.log").read_text()
            health = subprocess.run([str(entrepot), "health"], env=env, capture_output=True,
                                    text=True, timeout=60)
            if health.returncode == 0:
                break
        url = f"http://127.0.0.1:{port}/v1/queues"
        assert http_request(url, method="GET") == 401
        assert http_request(url, method="GET", headers={"Authorization": f"Bearer {key}"}) == 200
    finally:
        serve.terminate()
        assert serve.wait(60) == 0
        log.close()
