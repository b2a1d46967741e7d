"""The Grafana dashboard in config/ and the metrics table of docs/operations.md keep up with
the metric names the code exports, read from a running gateway's registry: the dashboard only
queries exported series (a renamed metric must not leave a silently empty panel), takes the
rate of counters and never of gauges, and shows message rates per queue; the docs name every
family and nothing else."""

from __future__ import annotations

import json
import os
import re
from typing import Any

from gateway.fronts.front_stats import FrontStats
from gateway.web.appkeys import METRICS_KEY
from tests.helpers import REPO_ROOT, ready_client

# The series a metric family of each type is scraped as.
_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_count", "_sum"),
             "summary": ("", "_count", "_sum"), "info": ("_info",), "unknown": ("",)}
_NAME = re.compile(r"\b(entrepot_[a-z_]+)")
_RATE = re.compile(r"\b(?:rate|irate|increase)\((entrepot_[a-z_]+)")


async def _exported(aiohttp_client: Any, settings_factory: Any) -> dict[str, str]:
    """Every series name of a running gateway's registry -> its family's type, the families
    read from its state at scrape time included (the store's histograms need an open store)."""
    client = await ready_client(aiohttp_client, settings_factory())
    families = list(client.app[METRICS_KEY].registry.collect())
    # With fronts (server.workers > 1) the owner also reads each front's process figures:
    # here, of this process as front 0.
    families += FrontStats(lambda: {0: os.getpid()}).collect()
    exported = {f.name + suffix: f.type for f in families for suffix in _SUFFIXES[f.type]}
    assert "entrepot_store_sync_seconds_bucket" in exported  # the state's families are there
    assert "entrepot_queue_messages_total" in exported  # and the queue manager's counts
    return exported


def _dashboard_exprs() -> list[str]:
    doc = json.loads((REPO_ROOT / "config" / "grafana-dashboard.json").read_text())
    assert len(doc["panels"]) >= 12
    return [t["expr"] for p in doc["panels"] for t in p["targets"]]


async def test_dashboard_queries_known_metrics(aiohttp_client: Any, settings_factory: Any
                                               ) -> None:
    exported = await _exported(aiohttp_client, settings_factory)
    exprs = _dashboard_exprs()
    assert exprs
    for expr in exprs:
        names = _NAME.findall(expr)
        assert names, f"{expr!r} names no entrepot metric"
        for name in names:
            assert name in exported, f"{name} in {expr!r} is not exported"
        rated = _RATE.findall(expr)
        for name in rated:  # a gauge's rate means nothing
            assert exported[name] in ("counter", "histogram"), f"rate of gauge {name}"
        for name in names:  # a counter's raw value is only the count since the last restart
            assert exported[name] != "counter" or name in rated, f"{name} without rate"


def test_dashboard_shows_message_rates_per_queue() -> None:
    per_queue = [expr for expr in _dashboard_exprs() if re.search(
        r"sum by \((queue, event|event, queue)\) \(rate\(entrepot_queue_messages_total\b",
        expr)]
    assert per_queue, "a panel of sent/received/expired... messages per second per queue"


async def test_operations_page_names_every_metric_family(aiohttp_client: Any,
                                                         settings_factory: Any) -> None:
    exported = await _exported(aiohttp_client, settings_factory)
    text = (REPO_ROOT / "docs" / "operations.md").read_text()
    section = text[text.index("## Monitoring"):]
    section = section[:section.index("\n## ", 1)]
    documented = set(_NAME.findall(section))
    ours = {name for name in exported if name.startswith("entrepot_")}
    # A family is documented by the name it is queried by (a histogram by its base name).
    families = {re.sub(r"_(bucket|count|sum)$", "", name) if exported[name] == "histogram"
                else name for name in ours}
    assert families - documented == set(), "exported but not documented"
    assert documented - families == set(), "documented but not exported"


def test_a_lag_panel_shows_a_lag_and_matches_series_of_one_gateway() -> None:
    """A panel titled "lag" graphs the lag the gateway exports, not a committed position
    (nor a position dressed up by arithmetic); a vector match keeps two gateways' queues of
    the same name apart (``on(...)`` names ``instance``)."""
    doc = json.loads((REPO_ROOT / "config" / "grafana-dashboard.json").read_text())
    lag_panels = [p for p in doc["panels"] if "lag" in p["title"].lower()]
    assert lag_panels, "a panel shows the range consumers' lag"
    for panel in lag_panels:
        for target in panel["targets"]:
            names = set(_NAME.findall(target["expr"]))
            assert names == {"entrepot_consumer_lag"}, (panel["title"], target["expr"])
    for expr in _dashboard_exprs():
        for labels in re.findall(r"\bon\s*\(([^)]*)\)", expr):
            assert "instance" in {x.strip() for x in labels.split(",")}, expr
