"""The Grafana dashboard in config/ is valid JSON and only queries metrics the gateway
exports (a renamed metric must not leave a silently empty panel)."""

from __future__ import annotations

import json
import re

from gateway.metrics import Metrics
from tests.helpers import REPO_ROOT

# Families read from state at scrape time (gateway/metrics_state.py).
_STATE_FAMILIES = {
    "entrepot_queue_messages", "entrepot_queue_bytes", "entrepot_queue_oldest_age_seconds",
    "entrepot_consumer_position", "entrepot_link_state", "entrepot_link_retries",
    "entrepot_link_oldest_age_seconds", "entrepot_dead_letters", "entrepot_store_used_bytes",
    "entrepot_store_quota_bytes", "entrepot_store_journal_used_bytes",
    "entrepot_store_journal_quota_bytes", "entrepot_store_sync_seconds",
    "entrepot_store_batch_jobs",
}


def test_dashboard_queries_known_metrics() -> None:
    doc = json.loads((REPO_ROOT / "config" / "grafana-dashboard.json").read_text())
    known = {m.name for m in Metrics().registry.collect()} | _STATE_FAMILIES
    exprs = [t["expr"] for p in doc["panels"] for t in p["targets"]]
    assert len(doc["panels"]) >= 12 and exprs
    for expr in exprs:
        for name in re.findall(r"\b(entrepot_[a-z_]+)", expr):
            family = re.sub(r"_(total|bucket|count|sum)$", "", name)
            assert family in known, f"{name} in {expr!r} is not exported"
