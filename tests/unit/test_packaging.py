"""The container recipe keeps its promises (no Docker daemon here to build it, so they are
read from the Dockerfile): multi-stage from a slim base, non-root, a data volume, the
health check on /readyz, both ports, and a Spark target with Java."""

from __future__ import annotations

import re

from tests.helpers import REPO_ROOT


def _stages() -> dict[str, str]:
    text = (REPO_ROOT / "Dockerfile").read_text()
    parts = re.split(r"^FROM ", text, flags=re.M)[1:]
    return {part.split()[2] if " AS " in part.split("\n")[0] else part.split()[0]: part
            for part in parts}


def test_dockerfile() -> None:
    stages = _stages()
    assert list(stages)[-1] == "gateway", "the gateway is the default (last) target"
    assert all(s.startswith(("python:3.11-slim", "build ", "base ")) for s in stages.values())
    gateway, spark = stages["gateway"], stages["spark"]
    for stage in (gateway, spark):
        assert re.search(r"^USER entrepot$", stage, re.M), "runs as the non-root user"
    assert 'VOLUME ["/var/lib/entrepot"]' in gateway
    assert "EXPOSE 8080 8443" in gateway
    assert "HEALTHCHECK" in gateway and "/readyz" in gateway
    assert "openjdk-17-jre-headless" in spark and "COPY --from=build-spark" in spark
    assert '".[spark]"' in stages["build-spark"]
    # The store's C placing loop is compiled in the build stage; the image does not carry gcc.
    assert "gcc" in stages["build"] and "gcc" not in gateway and "gcc" not in stages["base"]
