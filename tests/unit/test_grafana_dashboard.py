"""The Grafana dashboard in config/ is valid JSON and only queries metrics the gateway
exports (a renamed metric must not leave a silently empty panel)."""

from __future__ import annotations

import json
import re
from typing import Any

from gateway.web.appkeys import METRICS_KEY
from tests.helpers import REPO_ROOT, ready_client

# The series a metric family of each type is scraped as.
_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum"),
             "summary": ("", "_count", "_sum"), "info": ("_info",), "unknown": ("",)}


async def test_dashboard_queries_known_metrics(aiohttp_client: Any, settings_factory: Any
                                               ) -> None:
    # Every family of a running gateway's registry, the ones read from its state at scrape
    # time included (the store's histograms need an open store).
    client = await ready_client(aiohttp_client, settings_factory())
    families = list(client.app[METRICS_KEY].registry.collect())
    exported = {f.name + suffix for f in families for suffix in _SUFFIXES[f.type]}
    assert "entrepot_store_sync_seconds_bucket" in exported  # the state's families are there
    doc = json.loads((REPO_ROOT / "config" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    assert len(doc["panels"]) >= 12 and exprs
    for expr in exprs:
        names = re.findall(r"\b(entrepot_[a-z_]+)", expr)
        assert names, f"{expr!r} names no entrepot metric"
        for name in names:
            assert name in exported, f"{name} in {expr!r} is not exported"
