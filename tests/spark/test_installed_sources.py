"""entrepot's own jobs start their JVM without Spark's lookup of the Python data sources
installed as ``pyspark_*`` packages (a Python process the first registration waits for); a
session asked for with the defaults, as a notebook's, still finds them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[2]

# A package Spark's lookup registers on its own: a module named pyspark_* with DefaultSource.
_PROBE = '''
from pyspark.sql.datasource import DataSource


class DefaultSource(DataSource):
    @classmethod
    def name(cls):
        return "entrepotprobe"
'''

# A job's session in a process of its own (a JVM's environment is set when it starts).
_JOB = '''
import json, os, sys
from gateway.spark.session import owned_session
with owned_session("local[1]", "probe", installed_sources=sys.argv[1] == "yes") as spark:
    manager = spark._jsparkSession.sessionState().dataSourceManager()
    print(json.dumps({
        "probe": manager.dataSourceExists("entrepotprobe"),
        "entrepot": manager.dataSourceExists("entrepot"),
        "driver_env": os.environ.get("PYSPARK_DRIVER_PYTHON"),
    }))
'''


def _job(tmp_path: Path, installed_sources: bool) -> dict[str, object]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "site"), str(_ROOT)])
    done = subprocess.run([sys.executable, "-c", _JOB, "yes" if installed_sources else "no"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    seen: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return seen


@pytest.fixture
def probe_site(tmp_path: Path) -> Path:
    package = tmp_path / "site" / "pyspark_entrepotprobe"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(_PROBE)
    return tmp_path


def test_a_job_session_skips_the_lookup_and_keeps_the_driver_environment(
        probe_site: Path) -> None:
    seen = _job(probe_site, installed_sources=False)
    assert seen["entrepot"] is True
    assert seen["probe"] is False, "the installed source was looked up"
    assert seen["driver_env"] == sys.executable, "the driver's own environment changed"


def test_a_default_session_finds_the_installed_sources(probe_site: Path) -> None:
    seen = _job(probe_site, installed_sources=True)
    assert seen["entrepot"] is True
    assert seen["probe"] is True
