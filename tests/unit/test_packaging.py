"""The container recipe keeps its promises (no Docker daemon here to build it, so they are
read from the Dockerfile and .dockerignore): multi-stage from a pinned slim base, non-root, a
data volume, a health check that reads the listener from the configuration, only the port
the default configuration serves, a build context without the virtualenv, live data, .git or
keys, and a Spark target with Java."""

from __future__ import annotations

import fnmatch
import json
import re

import pytest

from gateway.cli.main import build_parser
from gateway.settings import load_settings
from tests.helpers import REPO_ROOT


def _stages() -> dict[str, str]:
    text = (REPO_ROOT / "Dockerfile").read_text()
    parts = re.split(r"^FROM ", text, flags=re.M)[1:]
    return {part.split()[2] if " AS " in part.split("\n")[0] else part.split()[0]: part
            for part in parts}


def test_dockerfile() -> None:
    stages = _stages()
    assert list(stages)[-1] == "gateway", "the gateway is the default (last) target"
    assert all(s.startswith(("${BASE} ", "build ", "base ")) for s in stages.values())
    gateway, spark = stages["gateway"], stages["spark"]
    for stage in (gateway, spark):
        assert re.search(r"^USER entrepot$", stage, re.M), "runs as the non-root user"
    assert 'VOLUME ["/var/lib/entrepot"]' in gateway
    assert "openjdk-17-jre-headless" in spark and "COPY --from=build-spark" in spark
    assert '".[spark]"' in stages["build-spark"]
    # The store's C placing loop is compiled in the build stage; the image does not carry gcc.
    assert "gcc" in stages["build"] and "gcc" not in gateway and "gcc" not in stages["base"]


def test_the_base_image_is_pinned_to_a_patch_release_and_a_debian_release() -> None:
    text = (REPO_ROOT / "Dockerfile").read_text()
    base = re.search(r"^ARG BASE=(\S+)$", text, re.M)
    assert base is not None, "one ARG BASE names the image both stages start from"
    assert re.fullmatch(r"python:3\.11\.\d+-slim-(bookworm|trixie)", base.group(1)), base.group(1)
    assert set(re.findall(r"^FROM (\S+)", text, re.M)) <= {"${BASE}", "build", "base"}


def _exec_form(stage: str, prefix: str) -> list[str]:
    """The JSON array of the instruction starting ``prefix`` (continuation lines joined)."""
    joined = re.sub(r"\\\n\s*", " ", stage)
    line = re.search(rf"^{prefix}.*?(\[.*\])$", joined, re.M)
    assert line is not None, prefix
    return list(json.loads(line.group(1)))


def test_the_health_check_is_a_command_that_reads_the_same_configuration() -> None:
    gateway = _stages()["gateway"]
    assert _exec_form(gateway, "HEALTHCHECK .* CMD ") == ["/opt/venv/bin/entrepot", "health"]
    parser = build_parser()
    assert parser.parse_args(["health"]).command == "health", "a command of the image's CLI"
    serve = _exec_form(gateway, "CMD ")
    assert serve[0] == "serve" and "--listen" not in serve, \
        "the listener comes from the configuration, which the health check reads too"


def test_only_the_port_the_image_configuration_serves_is_exposed() -> None:
    text = (REPO_ROOT / "Dockerfile").read_text()
    assert "COPY config/container.toml /etc/entrepot/entrepot.toml" in text
    server = load_settings(REPO_ROOT / "config" / "container.toml").server
    assert re.findall(r"^EXPOSE (.+)$", _stages()["gateway"], re.M) == [str(server.port)]
    assert server.host == "0.0.0.0" and not server.tls_cert


def _ignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule, simplified: the last pattern matching the path or a parent decides."""
    parts = path.split("/")
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!")
        prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
        if any(fnmatch.fnmatch(prefix, pattern) or fnmatch.fnmatch(prefix, pattern.lstrip("*/"))
               for prefix in prefixes):
            ignored = not negate
    return ignored


@pytest.mark.parametrize(("path", "ignored"), [
    (".venv/bin/python", True),
    ("var/entrepot/storage/0000000001.mq", True),
    (".git/HEAD", True),
    ("build/lib/gateway/cli/main.py", True),
    ("entrepot.egg-info/PKG-INFO", True),
    ("gateway/srmp/codec.cpython-311-x86_64-linux-gnu.so", True),
    ("gateway/__pycache__/settings.cpython-311.pyc", True),
    ("config/credentials/tls.key", True),
    ("bench/results/latest.json", True),
    ("pyproject.toml", False),
    ("setup.py", False),
    ("README.md", False),
    ("gateway/cli/main.py", False),
    ("store/_placing.c", False),
    ("mapping/engine.py", False),
    ("config/container.toml", False),
    ("config/mapping/.gitkeep", False),
])
def test_the_build_context_holds_only_the_sources(path: str, ignored: bool) -> None:
    lines = (REPO_ROOT / ".dockerignore").read_text().splitlines()
    patterns = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    assert _ignored(path, patterns) == ignored
